"""RFT examples: the successful trajectories of a search (Agent Q's RFT baseline, docs/method.md §4).

Rejection-sampling fine-tuning imitates whatever the search found that worked:
every successful trajectory, once per distinct command sequence (MCTS records a
trajectory per simulation, and simulations that end in an already visited
terminal node repeat one), every step with loss.
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
    """

    kind: ClassVar[str] = SFT

    min_reward: float | None = None

    def __post_init__(self) -> None:
        if self.min_reward is not None and not 0.0 <= self.min_reward <= 1.0:
            raise ValueError(f"pairs.min_reward must be in [0, 1] or null, got {self.min_reward}")

    def from_search(self, result: SearchResult, policy=None) -> list[SFTExample]:
        return [
            SFTExample(
                task_id=t.task_id,
                segments=segments_of(t),
                source="success",
                info={"trajectory": i, "reward": t.reward},
            )
            for i, t in distinct(result.trajectories)
            if t.success and t.steps and (self.min_reward is None or t.reward >= self.min_reward)
        ]
