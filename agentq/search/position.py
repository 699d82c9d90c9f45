"""Moving a real environment through a search tree, and reading tree paths back.

Every search in :mod:`agentq.search` grows a :class:`~agentq.records.tree.Tree`
whose nodes are environment states. They share three rules, kept here so the
meaning is the same everywhere:

- **Edges**: candidates that ground to the same command are one edge
  (:func:`merge_duplicates`).
- **Position**: the env is moved to a node by ``env.unwrapped.restore(snapshot)``
  when the env can snapshot, otherwise by reset and replay of the node's
  command prefix, as on the live web (:class:`Position`).
- **Trajectories**: a root-to-node path becomes trajectory steps whose prompt is
  the parent's rendered history (:func:`path_steps`, :func:`leaf_trajectory`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from agentq.agent import episode
from agentq.records.action import Candidate
from agentq.records.history import History
from agentq.records.trajectory import Step, Trajectory
from agentq.records.tree import Node, SearchStats, Tree
from envs.contract import can_snapshot


class Position:
    """Where the env is in ``tree``, and how to move it to another node.

    ``stats`` are the search's counters; ``env_steps`` (including replayed
    steps) and ``restores`` are added to them.
    """

    def __init__(
        self, env: gym.Env, task_id: Any, tree: Tree, stats: SearchStats, prefix: Sequence[str] = ()
    ) -> None:
        self.env, self.task_id, self.tree, self.stats = env, task_id, tree, stats
        self.prefix = tuple(prefix)  # commands from the task's reset to the root
        self.base = env.unwrapped
        self.can_snapshot = can_snapshot(env)
        self.at: int | None = None  # the node the env is in, None when unknown

    def root(self, history: History | None = None) -> Node:
        """Add the root node: the task's reset state, or ``history``, the state the
        env is in now (a committed episode's, reached by ``prefix`` from the reset)."""
        if history is None:
            if self.prefix:
                raise ValueError("Position.root: a prefix needs the history it leads to")
            history = self._reset()
        root = self.tree.add(Node(id=0, parent=None, depth=0, history=history))
        root.expanded_env = True
        root.snapshot = self._snapshot()
        self.at = root.id
        return root

    def goto(self, node: Node) -> None:
        if self.at == node.id:
            return
        self.stats.restores += 1
        if node.snapshot is not None:
            self.base.restore(node.snapshot)
        else:  # reset and replay the command prefix
            self._reset()
            for n in self.tree.path(node)[1:]:
                self.env.step(n.command)
                self.stats.env_steps += 1
        self.at = node.id

    def enter(self, node: Node, *, keep_snapshot: bool = True) -> None:
        """Step the env from the parent into ``node`` (once) and record what the step gave.

        ``keep_snapshot=False`` skips the snapshot for nodes the search will not
        come back to (a node without one is reached by replay).
        """
        if node.expanded_env:
            return
        parent = self.tree.nodes[node.parent]
        self.goto(parent)
        history, reward, outcome = episode.step(self.env, parent.history, node.action, node.command)
        self.stats.env_steps += 1
        node.history, node.reward = history, reward
        node.terminal, node.success, node.score = outcome.terminal, outcome.success, outcome.score
        node.expanded_env = True
        node.snapshot = self._snapshot() if keep_snapshot else None
        self.at = node.id

    def lost(self) -> None:
        """The env moved outside the tree (a rollout): the next ``goto`` must restore."""
        self.at = None

    def _reset(self) -> History:
        history = episode.start(self.env, self.task_id)
        for command in self.prefix:
            self.env.step(command)
            self.stats.env_steps += 1
        return history

    def _snapshot(self) -> Any:
        return self.base.snapshot() if self.can_snapshot else None


def merge_duplicates(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Candidates that ground to the same command are one edge; keep the likeliest text."""
    by_command: dict[str, Candidate] = {}
    for c in candidates:
        kept = by_command.get(c.command)
        if kept is None or c.logprob > kept.logprob:
            by_command[c.command] = c
    return list(by_command.values())


def child_node(parent: Node, candidate: Candidate, critic_score: float = 0.0) -> Node:
    """A not-yet-entered child for the edge ``candidate`` (``Tree.add`` assigns the id)."""
    return Node(
        id=-1,
        parent=parent.id,
        depth=parent.depth + 1,
        history=parent.history,  # replaced when the env steps into the child
        action=candidate.text,
        command=candidate.command,
        logprob=candidate.logprob,
        action_ids=tuple(candidate.action_ids),
        grounding=candidate.grounding,
        critic_score=float(critic_score),
    )


def path_steps(tree: Tree, node: Node) -> list[Step]:
    """The edges from the root to ``node`` as trajectory steps; h_t is the parent's prompt."""
    return [
        Step(
            prompt=tree.nodes[n.parent].prompt,
            action=n.action,
            command=n.command,
            observation=n.history.observation,
            reward=n.reward,
            logprob=n.logprob,
            action_ids=list(n.action_ids),
            grounding=n.grounding,
        )
        for n in tree.path(node)[1:]
    ]


def leaf_trajectory(tree: Tree, node: Node, *, dense_reward: bool, source: str) -> Trajectory:
    """The root-to-``node`` path as a trajectory whose return is the node's outcome
    (0 / the score so far when the search stopped before the episode ended)."""
    outcome = episode.Outcome(node.terminal, node.success, node.score)
    return outcome.trajectory(tree.task_id, path_steps(tree, node), dense_reward=dense_reward, source=source)
