"""The fitted-revision probe (NOTES.md, "Does a policy that has learned the revision turn recover
more?"): iteration 1 of both arms trained 10 epochs at lr 1e-3 on the three-iteration study's
iteration-1 examples, beside the same iteration trained 1 epoch at 1e-4, greedy on the 100 dev
goals and on the clone's 59 failed prefixes, against the clone and against each other.

    python experiments/webshop_clone80_agent_r/fit.py

Writes fit.md / fit.csv beside this file.
"""

from __future__ import annotations

from pathlib import Path

from agentq.compare import by_goal, evaluated_row, oracle_study_row, write_rows
from agentq.modes import RECOVERY, ZERO_SHOT

HERE = Path(__file__).resolve().parent
STEM = "fit"
RUNS = HERE / "runs"
CLONE = RUNS / "agent_r_iter3"  # its iteration 0: the clone, greedy and on its own failed prefixes
POLICIES = {
    "Agent-R pi_1, 1 epoch at 1e-4": RUNS / "agent_r_iter3",
    "good-only pi_1, 1 epoch at 1e-4": RUNS / "agent_r_good_iter3",
    "Agent-R pi_1, 10 epochs at 1e-3": RUNS / "agent_r_fit",
    "good-only pi_1, 10 epochs at 1e-3": RUNS / "agent_r_good_fit",
}
READS = {ZERO_SHOT: "greedy", RECOVERY: "recovery from the clone's failed prefixes"}


def rows() -> list[dict]:
    table = []
    for mode, read in READS.items():
        clone = by_goal(CLONE, 0, mode)
        table.append(evaluated_row(f"clone, {read}", CLONE, 0, mode))
        for label, run in POLICIES.items():
            table.append(evaluated_row(f"{label}, {read}", run, 1, mode, clone))
        good = by_goal(POLICIES["good-only pi_1, 10 epochs at 1e-3"], 1, mode)
        table.append(evaluated_row(f"Agent-R against good-only, 10 epochs at 1e-3, {read}", RUNS / "agent_r_fit", 1, mode, good))
    table.append(oracle_study_row(CLONE))
    return table


def main(out: Path = HERE) -> str:
    return write_rows(out, STEM, rows())


if __name__ == "__main__":
    print(main())
