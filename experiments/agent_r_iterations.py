"""An Agent-R study's per-iteration table: Agent-R's pi_1..pi_n and the good-paths-only
ablation's, each greedy on the study's evaluation goals and on the clone's failed prefixes
(recovery), against the clone and against the other arm's policy of the same iteration, the oracle
on the same goals and step budget, and what each iteration trained on.

    python experiments/agent_r_iterations.py experiments/sciworld_agent_r
    python experiments/agent_r_iterations.py experiments/webshop_clone80_agent_r

Reads the study's two run folders: compare's runs/agent_r (its iteration 0 holds the clone's rows)
and runs/agent_r_good, or where they exist their copies extended an iteration at a time (their
NOTES.md), runs/agent_r_iter3 and runs/agent_r_good_iter3. Writes iterations.md / .csv and
data.md / .csv into the study folder; an iteration not evaluated yet has no row.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agentq import compare
from agentq.layout import RunLayout
from agentq.modes import RECOVERY, ZERO_SHOT

RUNS = {"Agent-R": "agent_r", "good paths only": "agent_r_good"}  # compare's runs, under <study>/runs
EXTENDED = "_iter3"  # the suffix of a run's copy extended to three iterations
READS = {ZERO_SHOT: "greedy", RECOVERY: "recovery from the clone's failed prefixes"}


def evaluated(run: Path) -> list[int]:
    layout = RunLayout(run)
    last = compare.iteration_index(run, "last")
    return [i for i in range(1, last + 1) if layout.eval_metrics(i, ZERO_SHOT).exists()]


def arms(study: Path) -> dict[str, Path]:
    runs = {arm: study / "runs" / name for arm, name in RUNS.items()}
    extended = {arm: run.with_name(run.name + EXTENDED) for arm, run in runs.items()}
    return extended if all(run.exists() for run in extended.values()) else runs


def table_rows(study: Path) -> list[dict]:
    rows, runs = [], arms(study)
    done = {run: evaluated(run) for run in runs.values()}
    agent_r, good = runs.values()
    clone_run = agent_r  # iteration 0 of Agent-R's run: the clone, greedy and on the prefixes
    both = sorted(set(done[agent_r]) & set(done[good]))
    for mode, read in READS.items():
        clone = compare.by_goal(clone_run, 0, mode)
        rows.append(compare.evaluated_row(f"clone, {read}", clone_run, 0, mode))
        for arm, run in runs.items():
            for i in done[run]:
                if compare.by_goal(run, i, mode).keys() != clone.keys():
                    raise ValueError(f"{run.name}'s iteration {i} did not play the clone's {mode} goals")
                rows.append(compare.evaluated_row(f"{arm} pi_{i}, {read}", run, i, mode, clone))
        # The ablation's question, goal by goal: each iteration's Agent-R policy against the good-only one.
        for i in both:
            rows.append(compare.evaluated_row(f"Agent-R pi_{i} against good-only pi_{i}, {read}", agent_r, i, mode,
                                              compare.by_goal(good, i, mode)))  # fmt: skip
    rows.append(compare.oracle_study_row(clone_run))
    return rows


def data_rows(study: Path) -> list[dict]:
    """Per arm and iteration: the trees searched, and the examples by source (``search.json``'s
    ``sft``: revisions spliced at a judged Bad step or at the divergence fallback, good paths)."""
    rows = []
    for arm, run in arms(study).items():
        layout = RunLayout(run)
        for i in evaluated(run):
            examples = [json.loads(line) for line in layout.examples(i).open()]
            sources = json.loads(layout.search_diagnostics(i).read_text())["sft"]
            rows.append({
                "arm": arm, "iteration": i, "examples": len(examples),
                "revisions at a judged Bad step": sources.get("revision_judged", 0),
                "revisions at the divergence fallback": sources.get("revision_fallback", 0),
                "good paths (of them successes)": f"{sources.get('good', 0)} ({sources.get('good_success', 0)})",
                "from trees": ", ".join(str(t) for t in sorted({e["task_id"] for e in examples})),
            })  # fmt: skip
    return rows


def main(study: Path, out: Path | None = None) -> None:
    out = out or study
    written = [compare.write_rows(out, "iterations", table_rows(study)), compare.write_rows(out, "data", data_rows(study))]
    print("\n".join(written))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
