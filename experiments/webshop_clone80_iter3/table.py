"""Agent Q for three iterations from the 80-demonstration clone, each policy against the clone
(evaluated in the same run) and against the one before it, on the 100 dev goals.

    python experiments/webshop_clone80_iter3/table.py [run folder]

Default: experiments/webshop_clone80_iter3/runs/iter3. Writes beside this file table.md /
table.csv (the oracle on the same goals and step budget; appended: where each iteration's data
came from) and behaviour.md / behaviour.csv (the result each episode opened first, the options
it clicked, whether it bought).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentq import compare
from agentq.modes import ZERO_SHOT
from envs.webshop.episodes import behaviour_row

STUDY = Path(__file__).parent
CLONE = "clone on 80 demonstrations, greedy"


def policy(i: int) -> str:
    return CLONE if i == 0 else f"Agent Q pi_{i} (step IPO beta 0.1, every pair; 100 new training goals), greedy"


def main(run: Path) -> None:
    iterations = compare.iteration_index(run, "last")
    episodes = [compare.by_goal(run, i, ZERO_SHOT) for i in range(iterations + 1)]  # read once
    rows = [compare.evaluated_row(CLONE, run, 0, ZERO_SHOT)]
    rows += [compare.evaluated_row(policy(i), run, i, ZERO_SHOT, episodes[0]) for i in range(1, iterations + 1)]
    rows += [compare.evaluated_row(f"{policy(i)}, against pi_{i - 1}", run, i, ZERO_SHOT, episodes[i - 1])
             for i in range(2, iterations + 1)]  # fmt: skip
    rows.append(compare.oracle_study_row(run))
    behaviours = [behaviour_row(f"{policy(i)} (dev)", episodes[i]) for i in range(iterations + 1)]
    data = f"\nWhere the data came from:\n\n{compare.diagnostics_markdown(run)}"
    print(compare.write_rows(STUDY, "table", rows, appendix=data))
    print(compare.write_rows(STUDY, "behaviour", behaviours))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY / "runs" / "iter3")
