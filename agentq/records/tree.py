"""Search trees and search results: the data every search shares.

A node is a history h (the env state its action prefix reached); the edge into
a node is the composite action a taken at its parent, so the edge statistics
N(h, a), Q_mcts(h, a) and the critic score Q̂(h, a) live on the child.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from agentq.records.history import History, Messages
from agentq.records.trajectory import Trajectory


@dataclass
class Node:
    id: int
    parent: int | None
    depth: int
    history: History
    # The edge from the parent (empty at the root).
    action: str = ""
    command: str = ""
    logprob: float = 0.0
    action_ids: tuple[int, ...] = ()
    grounding: str | None = None  # how the command relates to the parent's valid actions (Candidate.grounding)
    critic_score: float = 0.0  # Q̂(h, a): the MCTS critic's rank score, or a ToT evaluator's value
    kept: bool | None = None  # ToT: selected into the frontier (True) or pruned (False); None in MCTS
    # Filled when the env first steps into the node.
    expanded_env: bool = False
    reward: float = 0.0
    terminal: bool = False
    success: bool = False
    score: float = 0.0
    # MCTS statistics (Agent Q, Eq. 8).
    visits: int = 0  # N(h, a) for the edge into this node, N(h) for the node itself
    q_mcts: float = 0.0
    # The value its first visit backed up: drawn before any selection on this node's own
    # returns, unlike q_mcts (the critic-agreement diagnostic, agentq.data.diagnostics).
    first_return: float | None = None
    children: list[int] = field(default_factory=list)
    prompt: Messages = field(default_factory=list)  # h rendered, set when the node is expanded
    snapshot: Any = None  # env state, never serialised

    @property
    def backed_up(self) -> float:
        """Q_mcts to 9 decimals: a mean of the same returns summed in another order differs in
        its last bits (0.6 against 0.5999999999999999), and that is not a different outcome."""
        return round(self.q_mcts, 9)

    def blended_q(self, alpha: float) -> float:
        """Agent Q, Eq. 10: Q(h, a) = alpha * Q_mcts(h, a) + (1 - alpha) * Q̂(h, a)."""
        return alpha * self.q_mcts + (1.0 - alpha) * self.critic_score


@dataclass
class Tree:
    task_id: Any
    alpha: float
    nodes: list[Node] = field(default_factory=list)

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def add(self, node: Node) -> Node:
        node.id = len(self.nodes)
        self.nodes.append(node)
        if node.parent is not None:
            self.nodes[node.parent].children.append(node.id)
        return node

    def children(self, node: Node) -> list[Node]:
        return [self.nodes[i] for i in node.children]

    def path(self, node: Node) -> list[Node]:
        """Root-to-node path, root included."""
        path = [node]
        while path[-1].parent is not None:
            path.append(self.nodes[path[-1].parent])
        return path[::-1]

    def to_dict(self) -> dict:
        nodes = []
        for n in self.nodes:
            nodes.append(
                {
                    "id": n.id,
                    "parent": n.parent,
                    "depth": n.depth,
                    "observation": n.history.observation,
                    "previous": list(n.history.previous),
                    "valid_actions": None if n.history.valid_actions is None else list(n.history.valid_actions),
                    "action": n.action,
                    "command": n.command,
                    "logprob": n.logprob,
                    "action_ids": list(n.action_ids),
                    "grounding": n.grounding,
                    "critic_score": n.critic_score,
                    "kept": n.kept,
                    "q_mcts": n.q_mcts,
                    "first_return": n.first_return,
                    "q": n.blended_q(self.alpha),
                    "visits": n.visits,
                    "reward": n.reward,
                    "terminal": n.terminal,
                    "success": n.success,
                    "score": n.score,
                    "expanded_env": n.expanded_env,
                    "children": list(n.children),
                    "prompt": n.prompt,
                }
            )
        return {"task_id": self.task_id, "alpha": self.alpha, "nodes": nodes}

    @classmethod
    def from_dict(cls, data: dict) -> Tree:
        tree = cls(task_id=data["task_id"], alpha=data["alpha"])
        for d in data["nodes"]:
            valid = d.get("valid_actions")
            history = History(
                observation=d["observation"],
                previous=tuple(d.get("previous", ())),
                valid_actions=None if valid is None else tuple(valid),
            )
            tree.nodes.append(
                Node(
                    id=d["id"],
                    parent=d["parent"],
                    depth=d["depth"],
                    history=history,
                    action=d["action"],
                    command=d["command"],
                    logprob=d["logprob"],
                    action_ids=tuple(d.get("action_ids", ())),
                    grounding=d.get("grounding"),
                    critic_score=d["critic_score"],
                    kept=d.get("kept"),
                    expanded_env=d.get("expanded_env", True),
                    reward=d["reward"],
                    terminal=d["terminal"],
                    success=d["success"],
                    score=d.get("score", 0.0),
                    visits=d["visits"],
                    q_mcts=d["q_mcts"],
                    first_return=d.get("first_return"),
                    children=list(d["children"]),
                    prompt=d.get("prompt", []),
                )
            )
        return tree

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)


@dataclass
class SearchStats:
    """Counters of one search or one evaluation episode: the budget it spent.

    A counter a search does not use stays 0. Committed episodes sum their
    per-step searches with ``+``.

    Args:
        simulations: MCTS simulations run.
        policy_calls: calls of the policy (one per expansion or rollout step,
            however many candidates it sampled).
        policy_tokens: tokens the policy generated in those calls (every candidate's).
        critic_calls: calls of the critic (an MCTS ranking, a ToT evaluation).
        judge_calls: calls of the judge valuing a state without the env's reward
            (committed episodes).
        env_steps: env steps, replayed ones included.
        restores: moves of the env to a tree node (a snapshot restore or a reset
            and replay).
        expansions: ToT states whose children were proposed.
        states_evaluated: ToT states the evaluator valued.
        episodes: sampling baselines' episodes.
        searches: a committed episode's searches (one per real step).
        prefix_steps: recovery episodes' replayed steps of the failed prefix.
    """

    # Averaged per task in an evaluation's metrics (``avg_<name>``), when any task spent them.
    PER_TASK: ClassVar[tuple[str, ...]] = (
        "policy_calls", "policy_tokens", "critic_calls", "judge_calls", "env_steps", "prefix_steps"
    )  # fmt: skip

    simulations: int = 0
    policy_calls: int = 0
    policy_tokens: int = 0
    critic_calls: int = 0
    judge_calls: int = 0
    env_steps: int = 0
    restores: int = 0
    expansions: int = 0
    states_evaluated: int = 0
    episodes: int = 0
    searches: int = 0
    prefix_steps: int = 0

    @property
    def model_calls(self) -> int:
        """Calls of an LLM: the policy, the critic and the judge (the comparison's budget)."""
        return self.policy_calls + self.critic_calls + self.judge_calls

    def add(self, other: SearchStats) -> None:
        """Add ``other``'s counters to these."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchStats:
        """Tolerant of files written before a counter existed (missing -> 0)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"SearchStats: unknown counters {unknown}; known: {sorted(known)}")
        return cls(**{k: int(v) for k, v in data.items()})


@dataclass(frozen=True)
class SearchResult:
    """What a search returns: the tree, every rollout trajectory, the best one,
    and counters for reporting budgets (model calls, env steps)."""

    tree: Tree
    trajectories: list[Trajectory]
    best: Trajectory | None
    stats: SearchStats = field(default_factory=SearchStats)
    weights: str | None = None  # the server's name for the weights that sampled it (engine=server)

    def to_dict(self) -> dict:
        data = {
            "tree": self.tree.to_dict(),
            "trajectories": [t.to_dict() for t in self.trajectories],
            "best": None if self.best is None else self.best.to_dict(),
            "stats": self.stats.to_dict(),
        }
        return data if self.weights is None else data | {"weights": self.weights}

    @classmethod
    def from_dict(cls, data: dict) -> SearchResult:
        best = data.get("best")
        return cls(
            tree=Tree.from_dict(data["tree"]),
            trajectories=[Trajectory.from_dict(t) for t in data["trajectories"]],
            best=None if best is None else Trajectory.from_dict(best),
            stats=SearchStats.from_dict(data.get("stats", {})),
            weights=data.get("weights"),
        )
