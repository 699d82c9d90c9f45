"""RFT examples: the successful trajectories of a search (Agent Q's RFT baseline, docs/method.md §4).

Rejection-sampling fine-tuning imitates whatever the search found that worked:
every successful trajectory, once per distinct command sequence (MCTS records a
trajectory per simulation, and simulations that end in an already visited
terminal node repeat one), every step with loss. A cap per task keeps the best
successes (ties: earlier simulation first), so a task whose search succeeded many
times does not outweigh the others, and the fit's cost stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from agentq.records.examples import SFT, SFTExample, segments_of
from agentq.records.trajectory import distinct
from agentq.records.tree import SearchResult


@dataclass(frozen=True)
class SuccessfulTrajectories:
    """Args:
    min_reward: also require this return (with ``dense_reward`` a success may score
        below 1); None: every success.
    max_per_task: at most this many trajectories per search, best first (None: all).
    """

    kind: ClassVar[str] = SFT

    min_reward: float | None = None
    max_per_task: int | None = None

    def __post_init__(self) -> None:
        if self.min_reward is not None and not 0.0 <= self.min_reward <= 1.0:
            raise ValueError(f"pairs.min_reward must be in [0, 1] or null, got {self.min_reward}")
        if self.max_per_task is not None and self.max_per_task < 1:
            raise ValueError(f"pairs.max_per_task must be >= 1 or null, got {self.max_per_task}")

    def from_search(self, result: SearchResult, policy=None) -> list[SFTExample]:
        kept = [
            (i, t)
            for i, t in distinct(result.trajectories)
            if t.success and t.steps and (self.min_reward is None or t.reward >= self.min_reward)
        ]
        if self.max_per_task is not None:  # sorted() is stable: equal returns keep simulation order
            kept = sorted(kept, key=lambda it: -it[1].reward)[: self.max_per_task]
        return [
            SFTExample(
                task_id=t.task_id,
                segments=segments_of(t),
                source="success",
                info={"trajectory": i, "reward": t.reward},
            )
            for i, t in kept
        ]
