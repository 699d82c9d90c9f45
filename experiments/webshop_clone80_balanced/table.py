"""Agent Q on step pairs balanced by listing order, beside the same update on all the pairs of
the same trees, against the clone on the 100 dev goals.

    python experiments/webshop_clone80_balanced/table.py [runs folder] [the clone's run]

Defaults: experiments/webshop_clone80_balanced/runs (``balanced``: MCTS without the critic on 100
training goals, step IPO at beta 0.1 on the pairs ``pairs.balance_order`` keeps; ``all``: the same
trees, every pair; ``all2``: ``all`` run on to a second iteration) and
experiments/webshop_clone80_fit/runs/fit (its base: the clone greedy on the same 100 dev goals).
Writes beside this file table.md / table.csv (each policy against the clone goal by goal, pi_2
also against pi_1; the oracle on the same goals and step budget; appended: where each run's data
came from) and behaviour.md / behaviour.csv (the result each episode opened first, the options it
clicked, whether it bought).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentq import compare
from agentq.modes import ZERO_SHOT
from envs.webshop.episodes import behaviour_row

STUDY = Path(__file__).parent
ARMS = {
    "balanced": "Agent Q without the critic: step IPO (beta 0.1) on the pairs balanced by listing order",
    "all": "the same trees and update, every pair",
}


def main(runs: Path, clone_run: Path) -> None:
    clone = compare.by_goal(clone_run, 0, ZERO_SHOT)
    last = {arm: compare.last_by_goal(runs / arm) for arm in (*ARMS, "all2")}  # each run's episodes, read once
    pi_2 = f"{ARMS['all']}: a second iteration (pi_2: 100 new training goals searched by pi_1), greedy"
    rows = [compare.evaluated_row("clone on 80 demonstrations, greedy", clone_run, "base", ZERO_SHOT)]
    rows += [compare.evaluated_row(f"{label}, greedy", runs / arm, "last", ZERO_SHOT, clone) for arm, label in ARMS.items()]
    rows.append(compare.evaluated_row(pi_2, runs / "all2", "last", ZERO_SHOT, clone))
    rows.append(compare.evaluated_row(f"{pi_2}, against pi_1", runs / "all2", "last", ZERO_SHOT, last["all"]))
    rows.append(compare.oracle_study_row(runs / "balanced"))
    behaviours = [behaviour_row("clone on 80 demonstrations, greedy (dev)", clone)]
    behaviours += [behaviour_row(f"{label} (dev)", last[arm]) for arm, label in (*ARMS.items(), ("all2", pi_2))]
    data = "".join(f"\nWhere the data of `{arm}` came from:\n\n{compare.diagnostics_markdown(runs / arm)}" for arm in ("balanced", "all2"))
    print(compare.write_rows(STUDY, "table", rows, appendix=data))
    print(compare.write_rows(STUDY, "behaviour", behaviours))

if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    defaults = [STUDY / "runs", STUDY.parent / "webshop_clone80_fit" / "runs" / "fit"]
    main(*(args + defaults[len(args) :]))
