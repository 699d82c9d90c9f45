"""Trajectory pairs: a successful against a failed trajectory of one task.

Agent Q's outcome-only baseline ("trajectory DPO", docs/method.md §4): DPO on whole
trajectories, log π(τ) = Σ_t log π(a_t | h_t), with no step-level credit. A
pair is a successful trajectory (chosen) and a failed one (rejected) of the same
search whose returns differ by at least ``min_gap`` (and by more than 0).

Each command sequence counts once. The cap takes pairs in a fixed order: the
chosen sorted best first, the rejected worst first (ties: earlier simulation
first), and pairs (i, j) of those ranks by i + j, then i: best × worst, best ×
second-worst, second-best × worst, ... so a capped task still spreads over
several trajectories instead of pairing one success with every failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from agentq.records.examples import PREFERENCE, TrajectoryPair, segments_of
from agentq.records.trajectory import distinct
from agentq.records.tree import SearchResult


@dataclass(frozen=True)
class TrajectoryPairBuilder:
    """Args:
    min_gap: the minimum return gap R(chosen) - R(rejected).
    max_pairs_per_task: at most this many pairs per search (None: all).
    """

    kind: ClassVar[str] = PREFERENCE

    min_gap: float = 0.0
    max_pairs_per_task: int | None = 4

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_gap <= 1.0:
            raise ValueError(f"pairs.min_gap must be in [0, 1], got {self.min_gap}")
        if self.max_pairs_per_task is not None and self.max_pairs_per_task < 1:
            raise ValueError(
                f"pairs.max_pairs_per_task must be >= 1 or null, got {self.max_pairs_per_task}"
            )

    def from_search(self, result: SearchResult, policy=None) -> list[TrajectoryPair]:
        kept = [t for _, t in distinct(result.trajectories) if t.steps]
        # sorted() is stable: equal returns keep simulation order.
        chosen = sorted((t for t in kept if t.success), key=lambda t: -t.reward)
        rejected = sorted((t for t in kept if not t.success), key=lambda t: t.reward)
        ranks = sorted(
            ((i, j) for i in range(len(chosen)) for j in range(len(rejected))),
            key=lambda ij: (ij[0] + ij[1], ij[0]),
        )
        pairs = []
        for i, j in ranks:
            w, lo = chosen[i], rejected[j]
            gap = w.reward - lo.reward
            if gap <= 0 or gap < self.min_gap - 1e-9:  # 0.7 - 0.4 < 0.3 in floating point
                continue
            pairs.append(
                TrajectoryPair(
                    task_id=w.task_id,
                    chosen=segments_of(w),
                    rejected=segments_of(lo),
                    reward_chosen=w.reward,
                    reward_rejected=lo.reward,
                )
            )
            if self.max_pairs_per_task is not None and len(pairs) >= self.max_pairs_per_task:
                break
        return pairs
