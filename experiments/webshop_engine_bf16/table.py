"""The engine's bf16 copy against fp32 (NOTES.md): the 80-demonstration clone, greedy on the 100 dev
goals and continuing the fp32 clone's 59 failed prefixes, each read paired by goal with the fp32
read, beside the phase's wall time.

    python experiments/webshop_engine_bf16/table.py

Writes table.md / table.csv beside this file.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentq.compare import by_goal, evaluated_row, oracle_study_row, write_rows
from agentq.layout import RunLayout
from agentq.modes import RECOVERY, ZERO_SHOT

HERE = Path(__file__).resolve().parent
STEM = "table"
RUNS = HERE / "runs"
MORNING = HERE.parent / "webshop_clone80_agent_r" / "runs" / "agent_r_iter3"  # its iteration 0: the same reads in fp32
READS = {ZERO_SHOT: "greedy", RECOVERY: "recovery from the fp32 clone's failed prefixes"}
# (label, run, the run it is paired with, its engine if it is one of the runs timed one after another)
ROWS = [
    ("fp32, this morning (webshop_clone80_agent_r)", MORNING, None, None),
    ("fp32", RUNS / "fp32", MORNING, "fp32"),
    ("bf16 engine", RUNS / "bf16", RUNS / "fp32", "bf16"),
    ("bf16 engine, again", RUNS / "bf16_again", RUNS / "bf16", "bf16"),
    ("fp32, again", RUNS / "fp32_again", RUNS / "fp32", "fp32"),
]


def phase_seconds(run: Path, mode: str) -> float:
    return json.loads(RunLayout(run).seconds(0).read_text())[f"eval_{mode}"]


def rows() -> list[dict]:
    table = []
    for mode, read in READS.items():
        for label, run, against, _ in ROWS:
            base = by_goal(against, 0, mode) if against else None
            table.append(evaluated_row(f"{label}, {read}", run, 0, mode, base) | {
                "paired with": against.name if against else "-",
                "phase wall s": f"{phase_seconds(run, mode):.1f}",
            })  # fmt: skip
    table.append(oracle_study_row(RUNS / "fp32"))
    return table


def speedups() -> str:
    """fp32's mean phase time over bf16's, both timed twice today, one run after another."""
    lines = []
    for mode, read in READS.items():
        fp32, bf16 = ([phase_seconds(run, mode) for _, run, _, timed in ROWS if timed == engine] for engine in ("fp32", "bf16"))
        lines.append(f"- {read}: fp32 {' and '.join(f'{s:.1f}' for s in fp32)} s, bf16 "
                     f"{' and '.join(f'{s:.1f}' for s in bf16)} s: {sum(fp32) / sum(bf16):.2f}x faster in bf16")  # fmt: skip
    return "\nPhase wall time, fp32 against the bf16 engine:\n\n" + "\n".join(lines) + "\n"


def main(out: Path = HERE) -> str:
    return write_rows(out, STEM, rows(), speedups())


if __name__ == "__main__":
    print(main())
