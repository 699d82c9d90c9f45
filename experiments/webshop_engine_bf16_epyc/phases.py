"""The three-iteration WebShop Agent-R study's time, phase by phase, on two machine kinds: its bf16
run on an AMD EPYC without AMX (NOTES.md) beside the same study on an Intel Xeon with AMX, in bf16
(webshop_engine_bf16) and in fp32 (webshop_clone80_agent_r). Each figure sums both arms' runs.

    python experiments/webshop_engine_bf16_epyc/phases.py

Writes phases.md / phases.csv beside this file.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from agentq.compare import iteration_index, write_rows
from agentq.layout import RunLayout

HERE = Path(__file__).resolve().parent
STEM = "phases"
STUDIES = {  # column: the study folder, whose runs/agent_r_iter3 and agent_r_good_iter3 are its two arms
    "bf16, AMD EPYC": HERE,
    "bf16, Intel Xeon with AMX": HERE.parent / "webshop_engine_bf16",
    "fp32, Intel Xeon with AMX": HERE.parent / "webshop_clone80_agent_r",
}
PHASES = {  # row: the phase's key in each iteration's seconds.json
    "greedy reads (7 of 100 dev goals)": "eval_zero_shot",
    "recovery reads (7, the clone's failed prefixes)": "eval_recovery",
    "searches (5 of 20 trees; good-only's first copies Agent-R's)": "collect",
    "training (6)": "train",
}


def arms(study: Path) -> list[Path]:
    """The study's two run folders, as agent_r_iterations.py finds them."""
    path = HERE.parent / "agent_r_iterations.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.arms(study).values())


def phase_seconds(run: Path) -> dict[str, float]:
    """The run's seconds per phase, summed over its iterations."""
    layout, total = RunLayout(run), {}
    for i in range(iteration_index(run, "last") + 1):
        if layout.seconds(i).exists():
            for phase, seconds in json.loads(layout.seconds(i).read_text()).items():
                total[phase] = total.get(phase, 0.0) + seconds
    return total


def study_seconds(study: Path) -> dict[str, float]:
    runs = arms(study)
    total = {key: sum(phase_seconds(run).get(key, 0.0) for run in runs) for key in PHASES.values()}
    total["phases"] = sum(total.values())
    total["wall"] = sum(json.loads(RunLayout(run).summary.read_text())["wall_seconds"] for run in runs)
    return total


def rows() -> list[dict]:
    seconds = {label: study_seconds(study) for label, study in STUDIES.items()}
    epyc, amx = (seconds[label] for label in list(STUDIES)[:2])
    labels = PHASES | {"all phases": "phases", "wall, both runs (summary.json)": "wall"}
    return [
        {"phase": name} | {label: f"{seconds[label][key]:,.0f} s" for label in STUDIES}
        | {"EPYC / AMX, bf16": f"{epyc[key] / amx[key]:.2f}x"}
        for name, key in labels.items()
    ]  # fmt: skip


def main(out: Path = HERE) -> str:
    return write_rows(out, STEM, rows())


if __name__ == "__main__":
    print(main())
