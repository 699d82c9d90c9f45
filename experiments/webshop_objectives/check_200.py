"""The 200-goal table of evaluate_200.sh, after checking each policy's reproduction.

    python experiments/webshop_objectives/check_200.py

- Reproduction: goals 0-9 were evaluated again; their commands and scores must equal the
  50-goal run's episodes of the same policy (evaluate_200.sh copied goals 10-49 from there).
- The table (table_200.md, table_200.csv): success with its Wilson 95% interval, average
  reward with its bootstrap one, and against the base goal by goal: goals won and lost (exact
  McNemar p), the paired bootstrap interval of the reward difference, identical episodes;
  and the episodes that used every step without buying.
  The scripted oracle's row is on the same goals and step budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentq.compare import by_goal, commands, oracle_study_row, study_row, write_rows
from agentq.modes import ZERO_SHOT

STUDY = Path(__file__).parent
ITER = STUDY.parent / "webshop_outcome_iter" / "runs" / "agentq"
ROWS = {  # name: (label, trained on, the 50-goal run and iteration that evaluated the same policy)
    "base": ("base (the clone)", "-", STUDY / "runs/agentq", 0),
    "rft": ("RFT", "29 trajectories", STUDY / "runs/rft", 1),
    "traj_dpo": ("trajectory DPO", "28 trajectory pairs", STUDY / "runs/traj_dpo", 1),
    "agentq": ("Agent Q pi_1", "49 step pairs", STUDY / "runs/agentq", 1),
    "agentq_pi3": ("Agent Q pi_3 (webshop_outcome_iter)", "49 + 45 + 40 step pairs", ITER, 3),
}
RECHECKED = range(10)
MAX_STEPS = 15  # the study's eval.max_steps


def reproduced(name: str, fresh: dict[int, dict]) -> bool:
    earlier = by_goal(*ROWS[name][2:], ZERO_SHOT)
    same = [commands(fresh[g]) == commands(earlier[g]) and fresh[g]["score"] == earlier[g]["score"] for g in RECHECKED]
    print(f"{name}: goals 0-9 evaluated again, {sum(same)} of 10 equal to the 50-goal run's episodes")
    return all(same)


def main() -> None:
    runs = {name: by_goal(STUDY / "runs" / "test200" / name, 0, ZERO_SHOT) for name in ROWS}
    runs = {name: found for name, found in runs.items() if len(found) == 200}
    if "base" not in runs:
        sys.exit("the base's 200 episodes are missing: run evaluate_200.sh first")
    if not all([reproduced(name, fresh) for name, fresh in runs.items()]):
        sys.exit("a policy did not reproduce its 50-goal episodes: no table")
    rows = []
    for name, policy in runs.items():
        label, trained = ROWS[name][:2]
        rows.append({"row": label, "trained on": trained} | study_row(label, policy, MAX_STEPS, runs["base"]))
    rows.append(oracle_study_row(STUDY / "runs" / "test200" / "base"))
    print(write_rows(STUDY, "table_200", rows))


if __name__ == "__main__":
    main()
