"""MCTS at inference from the 80-demonstration clone, against its greedy episodes on the same dev goals.

    python experiments/webshop_clone80_search/table.py [search run] [the clone's earlier dev run]

Defaults: experiments/webshop_clone80_search/runs/search (the clone evaluated greedy, with committed
MCTS and with the verifier on the 100 dev goals) and experiments/webshop_bc_scale/runs/eval_n80
(the clone's greedy dev row the other clone80 studies pair with). Prints how many greedy episodes
of the two runs take the same commands (the evaluation reproduced). Writes beside this file
table.md / table.csv (success with its Wilson 95% interval, average reward with its bootstrap one,
cost per success, and against greedy goal by goal: won / lost with the exact McNemar p, the paired
bootstrap interval of the reward difference, identical episodes; the scripted oracle on the same
goals and step budget) and behaviour.md / behaviour.csv (per row, the result each episode opened
first, the options it clicked, whether it bought).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentq.compare import by_goal, commands, evaluated_row, oracle_study_row, write_rows
from agentq.modes import HOW_PICKED, SEARCH_MODES, ZERO_SHOT
from envs.webshop.episodes import behaviour_row

STUDY = Path(__file__).parent


def main(run: Path, earlier: Path) -> None:
    greedy, before = by_goal(run, 0, ZERO_SHOT), by_goal(earlier, 0, ZERO_SHOT)
    same = sum(commands(greedy[g]) == commands(before.get(g, {"steps": []})) for g in greedy)
    print(f"greedy: {same} of {len(greedy)} episodes take the commands of {earlier}")
    rows = [evaluated_row("clone on 80 demonstrations, greedy", run, "base", ZERO_SHOT)]
    behaviours = [behaviour_row("clone on 80 demonstrations, greedy (dev)", greedy)]
    for mode in SEARCH_MODES:
        label = f"clone + MCTS ({HOW_PICKED[mode]})"
        rows.append(evaluated_row(label, run, "base", mode, greedy))
        behaviours.append(behaviour_row(f"{label} (dev)", by_goal(run, 0, mode)))
    rows.append(oracle_study_row(run))
    print(write_rows(STUDY, "table", rows))
    print(write_rows(STUDY, "behaviour", behaviours))


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    defaults = [STUDY / "runs" / "search", STUDY.parent / "webshop_bc_scale" / "runs" / "eval_n80"]
    main(*(args + defaults[len(args) :]))
