"""The on-disk replay buffer of a run.

Layout under the run directory::

    iter_001/collect/<task>.json    search result per task: tree + trajectories
    iter_001/examples.jsonl         training examples built from them (step pairs,
                                    trajectory pairs or SFT examples), one per line
    iter_001/train.json             training metrics (written when training finished)
    iter_001/train_steps.json       per-step metrics from rank 0 (and the world size)
    iter_001/seconds.json           wall time of each phase
    iter_001/adapter/               the LoRA adapter trained in this iteration
    iter_001/eval/<mode>/<task>.json  one evaluation episode per task
    summary.json

Every file is written atomically (temp file + rename), so a run killed at any
moment leaves only whole files; a resumed run skips tasks whose file exists.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentq.data.examples import SFTExample, TrajectoryPair
from agentq.data.pairs import StepPair
from agentq.search.tree import SearchResult

# The type tag of each line in examples.jsonl.
EXAMPLE_TYPES = {"step_pair": StepPair, "trajectory_pair": TrajectoryPair, "sft": SFTExample}


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=1))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


class ReplayBuffer:
    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)

    def iteration_dir(self, iteration: int) -> Path:
        return self.run_dir / f"iter_{iteration:03d}"

    # -- collection -----------------------------------------------------------
    def _collect_path(self, iteration: int, task_id: Any) -> Path:
        return self.iteration_dir(iteration) / "collect" / f"task_{task_id}.json"

    def has_search(self, iteration: int, task_id: Any) -> bool:
        return self._collect_path(iteration, task_id).exists()

    def write_search(self, iteration: int, task_id: Any, result: SearchResult) -> None:
        write_json(self._collect_path(iteration, task_id), result.to_dict())

    def searches(self, iteration: int) -> list[SearchResult]:
        folder = self.iteration_dir(iteration) / "collect"
        return [SearchResult.from_dict(read_json(p)) for p in sorted(folder.glob("task_*.json"))]

    # -- training examples ----------------------------------------------------
    def _examples_path(self, iteration: int) -> Path:
        return self.iteration_dir(iteration) / "examples.jsonl"

    def has_examples(self, iteration: int) -> bool:
        return self._examples_path(iteration).exists()

    def write_examples(self, iteration: int, examples: Iterable[Any]) -> None:
        tags = {cls: tag for tag, cls in EXAMPLE_TYPES.items()}
        lines = [json.dumps({"type": tags[type(e)], **e.to_dict()}) + "\n" for e in examples]
        atomic_write_text(self._examples_path(iteration), "".join(lines))

    def num_examples(self, iteration: int) -> int:
        """How many examples an iteration has (without parsing them: summaries need only this)."""
        if not self.has_examples(iteration):
            return 0
        return sum(1 for line in self._examples_path(iteration).read_text().splitlines() if line.strip())

    def examples(self, iteration: int) -> list[Any]:
        examples = []
        for line in self._examples_path(iteration).read_text().splitlines():
            if line.strip():
                data = json.loads(line)
                cls = EXAMPLE_TYPES[data.pop("type")]
                examples.append(cls.from_dict(data) if hasattr(cls, "from_dict") else cls(**data))
        return examples

    # -- training and evaluation ----------------------------------------------
    def adapter_dir(self, iteration: int) -> Path:
        return self.iteration_dir(iteration) / "adapter"

    def train_metrics_path(self, iteration: int) -> Path:
        return self.iteration_dir(iteration) / "train.json"

    def eval_path(self, iteration: int, mode: str, task_id: Any) -> Path:
        return self.iteration_dir(iteration) / "eval" / mode / f"task_{task_id}.json"
