"""The run directory: every file a run writes, named in one place.

::

    config.yaml                       the resolved config (``resume=<run dir>`` reads it)
    run_info.json                     code revision, package versions and machine, one entry per (re)start
    oracle.json                       the scripted oracle on the evaluation goals (agentq.oracle)
    summary.json                      rebuilt from the files below after every phase
    refused.txt                       a multirun job whose config combination cannot run
    iter_001/collect/task_<id>.json   search result per task: tree + trajectories
    iter_001/examples.jsonl           training examples built from them, one per line
    iter_001/search.json              what the trees say of the critic and the pairs (agentq.data.diagnostics)
    iter_001/train.json               training metrics (written when training finished)
    iter_001/train_steps.json         per-step metrics from rank 0 (agentq.training.fit)
    iter_001/seconds.json             wall time of each phase
    iter_001/memory.json              the process's peak resident memory (GB) when each phase ended
    iter_001/adapter/                 the LoRA adapter trained in this iteration
    served_adapters/agentq-<hash>/    pi_i as one LoRA adapter for a server (engine=server; conf/engine/server.yaml)
    iter_001/eval/<mode>.json         a mode's metrics (modes: agentq.modes)
    iter_001/eval/<mode>/task_<id>.json  one evaluation episode per task

Every JSON file is written atomically (temp file + rename), so a run killed at
any moment leaves only whole files; a resumed run skips tasks whose file exists.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentq.modes import LEGACY_NAMES

TASK_GLOB = "task_*.json"


def task_file(folder: Path, task_id: Any) -> Path:
    return folder / f"task_{task_id}.json"


@dataclass(frozen=True)
class RunLayout:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def run_info(self) -> Path:
        return self.root / "run_info.json"

    @property
    def oracle(self) -> Path:
        return self.root / "oracle.json"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def refused(self) -> Path:
        return self.root / "refused.txt"

    def iteration(self, iteration: int) -> Path:
        return self.root / f"iter_{iteration:03d}"

    def collect(self, iteration: int) -> Path:
        return self.iteration(iteration) / "collect"

    def collect_folders(self) -> list[Path]:
        """Every iteration's collect folder, newest first."""
        return sorted(self.root.glob("iter_*/collect"), reverse=True)

    def examples(self, iteration: int) -> Path:
        return self.iteration(iteration) / "examples.jsonl"

    def search_diagnostics(self, iteration: int) -> Path:
        return self.iteration(iteration) / "search.json"

    def train_metrics(self, iteration: int) -> Path:
        return self.iteration(iteration) / "train.json"

    def seconds(self, iteration: int) -> Path:
        return self.iteration(iteration) / "seconds.json"

    def memory(self, iteration: int) -> Path:
        return self.iteration(iteration) / "memory.json"

    def adapter(self, iteration: int) -> Path:
        return self.iteration(iteration) / "adapter"

    def adapters(self, iteration: int) -> list[Path]:
        """The adapters merged into the base to make pi_``iteration``, in order (an
        iteration without training examples trained none)."""
        return [self.adapter(done) for done in range(1, iteration + 1) if self.adapter(done).exists()]

    def eval_metrics(self, iteration: int, mode: str) -> Path:
        return self.iteration(iteration) / "eval" / f"{mode}.json"

    def episodes(self, iteration: int, mode: str, *, legacy: bool = False) -> Path:
        """The folder of a mode's episodes; ``legacy``: the older name when only it exists."""
        folder = self.iteration(iteration) / "eval" / mode
        old = self.iteration(iteration) / "eval" / LEGACY_NAMES.get(mode, mode)
        return old if legacy and not folder.exists() and old.exists() else folder

    def episode(self, iteration: int, mode: str, task_id: Any) -> Path:
        return task_file(self.episodes(iteration, mode), task_id)

    def episode_folders(self) -> list[tuple[int, str, Path]]:
        """(iteration, mode, folder) of every mode's episodes the run wrote, in that order."""
        found = (p for p in self.root.glob("iter_*/eval/*") if p.is_dir())
        return sorted((int(p.parent.parent.name.removeprefix("iter_")), p.name, p) for p in found)

    def remove_partial_writes(self) -> int:
        """Delete what :func:`atomic_write_text` had not finished when the run was killed
        (the file it was writing was never replaced, so nothing is lost); how many."""
        partial = list(self.root.rglob(f".*{PARTIAL_SUFFIX}"))
        for path in partial:
            path.unlink(missing_ok=True)
        return len(partial)


PARTIAL_SUFFIX = ".tmp"  # a file being written; renamed onto its name when complete


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX)
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
