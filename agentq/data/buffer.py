"""The on-disk replay buffer of a run: search results in, training examples out.

Where each file lives is :class:`agentq.layout.RunLayout`'s; every file is
written atomically, so a resumed run skips tasks whose file exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentq.layout import TASK_GLOB, RunLayout, atomic_write_text, read_json, task_file, write_json
from agentq.records.examples import TAGS
from agentq.records.tree import SearchResult


class ReplayBuffer:
    def __init__(self, layout: RunLayout) -> None:
        self.layout = layout

    # -- collection -----------------------------------------------------------
    def _collect_path(self, iteration: int, task_id: Any) -> Path:
        return task_file(self.layout.collect(iteration), task_id)

    def has_search(self, iteration: int, task_id: Any) -> bool:
        return self._collect_path(iteration, task_id).exists()

    def write_search(self, iteration: int, task_id: Any, result: SearchResult) -> None:
        write_json(self._collect_path(iteration, task_id), result.to_dict())

    def copy_search(self, iteration: int, task_id: Any, source: RunLayout) -> bool:
        """Take the task's search result from another run's same iteration; False if it has none."""
        path = task_file(source.collect(iteration), task_id)
        if not path.exists():
            return False
        atomic_write_text(self._collect_path(iteration, task_id), path.read_text())
        return True

    def searches(self, iteration: int) -> list[SearchResult]:
        folder = self.layout.collect(iteration)
        return [SearchResult.from_dict(read_json(p)) for p in sorted(folder.glob(TASK_GLOB))]

    # -- training examples ----------------------------------------------------
    def _examples_path(self, iteration: int) -> Path:
        return self.layout.examples(iteration)

    def has_examples(self, iteration: int) -> bool:
        return self._examples_path(iteration).exists()

    def write_examples(self, iteration: int, examples: Iterable[Any]) -> None:
        tags = {cls: tag for tag, cls in TAGS.items()}
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
                cls = TAGS[data.pop("type")]  # the line's type tag
                examples.append(cls.from_dict(data) if hasattr(cls, "from_dict") else cls(**data))
        return examples
