"""RFT from the 80-demonstration clone's best-of-4 samples, against the clone on the same dev goals.

    python experiments/webshop_clone80_rft/table.py [runs folder] [the clone's dev run]

Defaults: experiments/webshop_clone80_rft/runs (``rft``: lr 3e-4 for 3 epochs; ``rft_light``: lr
1e-4 for 1 epoch on the same collection) and experiments/webshop_bc_scale/runs/eval_n80 (the clone
greedy on the 100 dev goals, actions stopped at the COMMAND line). Prints what the
collection found: successes per goal out of the samples, and the distinct successes trained on.
Writes beside this file table.md / table.csv (success with its Wilson 95% interval, average reward
with its bootstrap one, cost per success, and against the clone goal by goal: won / lost with the
exact McNemar p, the paired bootstrap interval of the reward difference, identical episodes; the
scripted oracle on the same goals and step budget) and behaviour.md / behaviour.csv (per row, the
result each episode opened first, the options it clicked, whether it bought; also for the
successes trained on, so a reader sees whether the samples hold option clicks the clone misses).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from agentq.compare import evaluated_row, last_by_goal, oracle_study_row, write_rows
from agentq.layout import TASK_GLOB, RunLayout, read_json
from agentq.modes import ZERO_SHOT
from agentq.records.trajectory import Trajectory, distinct
from envs.webshop.episodes import behaviour_row

STUDY = Path(__file__).parent
ARMS = {"rft": "lr 3e-4, 3 epochs", "rft_light": "lr 1e-4, 1 epoch"}  # run folder -> its training


def trained_successes(rft: Path) -> tuple[dict, Counter]:
    """The collection's distinct successful trajectories (what RFT trains on, chosen as
    ``SuccessfulTrajectories`` chooses them), numbered, and how many goals had 0, 1, ...
    successful samples."""
    searches = [read_json(p) for p in sorted(RunLayout(rft).collect(1).glob(TASK_GLOB))]
    per_goal = Counter(sum(t["success"] for t in s["trajectories"]) for s in searches)
    successes = {}
    for search in searches:
        for i, t in distinct([Trajectory.from_dict(t) for t in search["trajectories"]]):
            if t.success and t.steps:
                successes[len(successes)] = search["trajectories"][i]
    return successes, per_goal


def main(runs: Path, clone_run: Path) -> None:
    clone = last_by_goal(clone_run)
    successes, per_goal = trained_successes(runs / "rft")  # the arms share this collection
    print(
        f"collection: {sum(per_goal.values())} training goals; goals by successful samples "
        f"{dict(sorted(per_goal.items()))}; {len(successes)} distinct successes trained on"
    )
    rows = [evaluated_row("clone on 80 demonstrations, greedy", clone_run, "last", ZERO_SHOT)]
    behaviours = [behaviour_row("clone on 80 demonstrations, greedy (dev)", clone)]
    for arm, training in ARMS.items():
        label = f"RFT on its best-of-4 successes ({training}), greedy"
        rows.append(evaluated_row(label, runs / arm, "last", ZERO_SHOT, clone))
        behaviours.append(behaviour_row(f"{label} (dev)", last_by_goal(runs / arm)))
    rows.append(oracle_study_row(runs / "rft"))
    behaviours.append(behaviour_row("the distinct successes trained on (training goals)", successes))
    print(write_rows(STUDY, "table", rows))
    print(write_rows(STUDY, "behaviour", behaviours))


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    defaults = [STUDY / "runs", STUDY.parent / "webshop_bc_scale" / "runs" / "eval_n80"]
    main(*(args + defaults[len(args) :]))
