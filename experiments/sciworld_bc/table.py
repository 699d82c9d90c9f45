"""The ScienceWorld clone on the dev split, by task, beside the scripted oracle.

    python experiments/sciworld_bc/table.py [clone run]

Default: experiments/sciworld_bc/runs/bc. Writes table.md / table.csv beside this file: the
clone's greedy episodes overall and per task (success with its Wilson 95% interval, average
score with its bootstrap one), which tasks its demonstrations covered, and the oracle's row on
the same variations and step budget.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from omegaconf import OmegaConf

from agentq.compare import by_goal, evaluated_row, oracle_study_row, study_row, write_rows
from agentq.layout import RunLayout
from agentq.modes import ZERO_SHOT
from envs.scienceworld.env import parse_task_id

STUDY = Path(__file__).parent


def task_of(task_id: str) -> str:
    return parse_task_id(task_id)[0]


def main(run: Path) -> None:
    layout = RunLayout(run)
    demonstrated = Counter(task_of(json.loads(line)["task_id"]) for line in layout.examples(1).read_text().splitlines())
    max_steps = int(OmegaConf.load(layout.config).eval.max_steps)
    episodes = by_goal(run, 1, ZERO_SHOT)
    rows = [evaluated_row("clone, greedy (all tasks)", run, "last", ZERO_SHOT)]
    for task in sorted({task_of(t) for t in episodes}):
        mine = {t: e for t, e in episodes.items() if task_of(t) == task}
        rows.append(study_row(f"clone on {task} ({demonstrated[task]} demonstrations)", mine, max_steps))
    rows.append(oracle_study_row(run))
    print(write_rows(STUDY, "table", rows))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY / "runs" / "bc")
