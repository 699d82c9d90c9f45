"""The bookkeeping of one search, shared by every search in :mod:`agentq.search`.

MCTS, ToT and the sampling baselines are siblings: each holds a
:class:`SearchRun` (the tree, the counters, the env's position, the budget, the
trajectories) and keeps only its own algorithm.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import gymnasium as gym
import torch

from agentq.agent.policy import Policy
from agentq.records.action import Candidate
from agentq.records.history import History
from agentq.records.trajectory import Trajectory
from agentq.records.tree import Node, SearchResult, SearchStats, Tree
from agentq.search.position import Position, child_node


class SearchRun:
    """One search's tree (rooted at the task's reset, or at ``start``, the state
    the env is in after the commands ``prefix``), its counters, the env's
    :class:`~agentq.search.position.Position` and the trajectories it collected.

    Args:
        alpha: the tree's weight of Q_mcts in Eq. 10 (0 when the search has no
            visit counts: a node's Q is then its ``critic_score``).
        max_policy_calls: the search's budget (None: no limit), see :meth:`budget_spent`.
    """

    def __init__(
        self,
        env: gym.Env,
        task_id: Any,
        *,
        alpha: float,
        max_policy_calls: int | None,
        start: History | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        self.task_id, self.max_policy_calls = task_id, max_policy_calls
        self.tree = Tree(task_id=task_id, alpha=alpha)
        self.stats = SearchStats()
        self.trajectories: list[Trajectory] = []
        self.position = Position(env, task_id, self.tree, self.stats, prefix)
        self.root = self.position.root(start)

    def budget_spent(self) -> bool:
        """Every search's ``max_policy_calls``: nothing new starts once it is reached."""
        return (
            self.max_policy_calls is not None and self.stats.policy_calls >= self.max_policy_calls
        )

    def propose(
        self,
        policy: Policy,
        node: Node,
        k: int,
        generator: torch.Generator | None,
        exclude: Collection[str] = (),
    ) -> list[Candidate]:
        """One policy call: ``k`` candidates at ``node`` (none of the commands ``exclude``),
        whose ``prompt`` becomes the rendered history (one call renders one prompt, shared
        by its candidates)."""
        candidates = policy.propose(node.history, k, generator=generator, exclude=exclude)
        self.stats.policy_calls += 1
        self.stats.policy_tokens += sum(len(c.action_ids) for c in candidates)
        if candidates:
            node.prompt = node.prompt or candidates[0].prompt
        return candidates

    def step_into(
        self, node: Node, candidate: Candidate, *, critic_score: float = 0.0, kept: bool | None = None
    ) -> Node:
        """Add the edge ``candidate`` under ``node`` and step the env into it, keeping no
        snapshot: searches that use this return only to the root (a node without a
        snapshot is reached by replay)."""
        child = self.tree.add(child_node(node, candidate, critic_score))
        child.kept = kept
        self.position.enter(child, keep_snapshot=False)
        return child

    def result(self, best: Trajectory | None = None) -> SearchResult:
        """The search's result; ``best`` defaults to the first trajectory with the highest return."""
        if best is None:
            best = max(self.trajectories, key=lambda t: t.reward, default=None)
        return SearchResult(
            tree=self.tree, trajectories=self.trajectories, best=best, stats=self.stats
        )
