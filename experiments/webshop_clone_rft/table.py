"""RFT from the clone's best-of-4 samples, against the clone on the same 200 test goals.

    python experiments/webshop_clone_rft/table.py [RFT run] [the base's 200-goal run]

Defaults: experiments/webshop_clone_rft/runs/rft and experiments/webshop_clone_search/runs/test200
(the clone greedy and with search on the first 200 test goals). Prints what the collection
found and writes table.md / table.csv beside this file: success with its Wilson 95% interval,
average reward with its bootstrap one, model calls and the cost per success, and against the
clone's greedy episodes goal by goal (won / lost with the exact McNemar p, the paired
bootstrap interval of the reward difference, identical episodes). The scripted oracle's row is
on the same goals and step budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentq.compare import by_goal, evaluated_row, oracle_study_row, trained_on, write_rows
from agentq.layout import TASK_GLOB, RunLayout, read_json
from agentq.modes import HOW_PICKED, VERIFIER, ZERO_SHOT

STUDY = Path(__file__).parent


def collection(run: Path) -> str:
    """What the best-of-N collection sampled and found on the training goals."""
    searches = [read_json(p) for p in sorted(RunLayout(run).collect(1).glob(TASK_GLOB))]
    played = [t for s in searches for t in s["trajectories"]]
    won = [t for t in played if t["success"]]
    goals = sum(any(t["success"] for t in s["trajectories"]) for s in searches)
    return (
        f"collection: {len(searches)} training goals, {len(played)} sampled episodes, {len(won)} successful "
        f"({100 * len(won) / len(played):.1f} %), {goals} goals with a success; "
        f"trained on {trained_on(run, 'last')} distinct successful trajectories"
    )


def main(rft: Path, base_run: Path) -> None:
    base = by_goal(base_run, 0, ZERO_SHOT)
    rows = [
        evaluated_row("base (the clone), greedy", base_run, "base", ZERO_SHOT),
        evaluated_row("RFT on best-of-4 successes, greedy", rft, "last", ZERO_SHOT, base),
        evaluated_row(f"base + MCTS ({HOW_PICKED[VERIFIER]})", base_run, "base", VERIFIER, base),
        oracle_study_row(rft),
    ]
    print(collection(rft))
    print(write_rows(STUDY, "table", rows))


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    main(*(args + [STUDY / "runs" / "rft", STUDY.parent / "webshop_clone_search" / "runs" / "test200"][len(args) :]))
