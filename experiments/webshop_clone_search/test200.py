"""The clone with and without search at inference on 200 test goals, goal by goal.

    python experiments/webshop_clone_search/test200.py [experiments/webshop_clone_search/runs/test200]

Reads the run's iteration-0 episodes of each mode (zero-shot, committed, verifier) and
writes table_200.md / table_200.csv beside this file: success with its Wilson 95% interval,
average reward with its bootstrap one, model calls per task, the cost per success, and
against zero-shot (the base) on the same goals: goals won and lost (exact McNemar p), the
paired bootstrap interval of the reward difference and identical episodes. A mode still
running counts the goals it finished, and its comparison uses those goals only. The
scripted oracle's row is on the same goals and step budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentq.compare import by_goal, evaluated_row, oracle_study_row, write_rows
from agentq.modes import COMMITTED, HOW_PICKED, VERIFIER, ZERO_SHOT

STUDY = Path(__file__).parent
LABELS = {
    ZERO_SHOT: "base (the clone), zero-shot",
    COMMITTED: f"base + MCTS ({HOW_PICKED[COMMITTED]})",
    VERIFIER: f"base + MCTS ({HOW_PICKED[VERIFIER]})",
}


def rows(run: Path) -> list[dict]:
    greedy = by_goal(run, 0, ZERO_SHOT)
    found = []
    for mode, label in LABELS.items():
        try:
            found.append(evaluated_row(label, run, "base", mode, None if mode == ZERO_SHOT else greedy))
        except FileNotFoundError:  # a mode not evaluated (yet)
            continue
    return [*found, oracle_study_row(run)]


def main(run: Path) -> None:
    print(write_rows(STUDY, "table_200", rows(run)))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY / "runs" / "test200")
