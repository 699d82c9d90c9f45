"""Monte Carlo Tree Search guided by an AI critic (Agent Q, §3 of DESIGN.md).

One simulation:

1. **Selection**: from the root, follow UCB1 (Eq. 7) on the blended value
   Q(h, a) = alpha * Q_mcts + (1 - alpha) * Q̂ (Eq. 10) until a node that has
   not been expanded.
2. **Expansion**: sample K composite actions from the policy at that node,
   merge those that ground to the same command (keeping the likelier text),
   and let the critic rank them; the rank becomes Q̂ (``critic``).
   UCB1 then picks the child to simulate from (with N(h, a) = 0 the
   exploration term is equal for all new children, so the critic's favourite
   goes first).
3. **Simulation**: step into the child and roll out with the current policy
   until the episode ends or the depth limit. R = 1 on success, else 0 (or the
   env's dense score with ``dense_reward``).
4. **Backpropagation** (Eq. 8) along the path: Q_mcts <- (Q_mcts * N + R) / (N + 1),
   N <- N + 1.

The environment is restored to a node with ``env.unwrapped.snapshot()`` /
``restore()`` when it has them, otherwise by reset and replay of the command
prefix (as on the live web).

Departures from the paper, which publishes no constants: every value below is
ours and a config key. Rollout steps are not added to the tree (standard
MCTS); they are kept as trajectories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium as gym
import torch

from agentq.agent import episode
from agentq.agent.policy import Candidate, Policy
from agentq.agent.prompt import History
from agentq.data.trajectory import Step, Trajectory
from agentq.search.tree import Node, SearchResult, Tree, ucb_score


class Critic(Protocol):
    def score(self, history: History, candidates: Sequence[Candidate]) -> list[float]:
        """Q̂(h, a) for each candidate, higher is better."""
        ...


@dataclass
class MCTS:
    """Agent Q's MCTS. Arguments are the config keys of ``conf/search/mcts.yaml``.

    Args:
        num_simulations: simulations per tree.
        num_actions: K, composite actions sampled per expansion.
        max_depth: depth limit of selection + rollout, in env steps from the root.
        c_exp: UCB1 exploration constant (Eq. 7).
        alpha: weight of Q_mcts against the critic score in Eq. 10.
        dense_reward: use the env's score in [0, 1] instead of 1/0 success as R.
        greedy_rollouts: roll out with greedy decoding instead of sampling.
    """

    num_simulations: int = 8
    num_actions: int = 3
    max_depth: int = 10
    c_exp: float = 1.0
    alpha: float = 0.5
    dense_reward: bool = False
    greedy_rollouts: bool = False

    def __post_init__(self) -> None:
        checks = {
            "search.num_simulations": self.num_simulations >= 1,
            "search.num_actions": self.num_actions >= 1,
            "search.max_depth": self.max_depth >= 1,
            "search.c_exp": self.c_exp >= 0,
            "search.alpha": 0.0 <= self.alpha <= 1.0,
        }
        for key, ok in checks.items():
            if not ok:
                value = getattr(self, key.split(".")[1])
                raise ValueError(f"{key} is out of range: {value!r}")

    def __call__(
        self,
        env: gym.Env,
        policy: Policy,
        critic: Critic,
        *,
        task_id: Any,
        generator: torch.Generator | None = None,
    ) -> SearchResult:
        run = _Run(self, env, policy, critic, task_id, generator)
        for _ in range(self.num_simulations):
            run.simulate()
        return run.result()


class _Run:
    """The state of one search: the tree, the env position, counters."""

    def __init__(self, cfg: MCTS, env, policy, critic, task_id, generator) -> None:
        self.cfg, self.env, self.policy, self.critic = cfg, env, policy, critic
        self.task_id, self.generator = task_id, generator
        self.base = env.unwrapped
        self.can_snapshot = hasattr(self.base, "snapshot") and hasattr(self.base, "restore")
        self.tree = Tree(task_id=task_id, alpha=cfg.alpha)
        self.trajectories: list[Trajectory] = []
        self.stats = {"simulations": 0, "policy_calls": 0, "critic_calls": 0, "env_steps": 0, "restores": 0}
        root = self.tree.add(Node(id=0, parent=None, depth=0, history=episode.start(env, task_id)))
        root.expanded_env = True
        root.snapshot = self._snapshot()
        self.at: int | None = root.id  # the node the env is in, None when unknown

    # -- one simulation -------------------------------------------------------
    def simulate(self) -> None:
        node = self.tree.root
        while True:
            if node.terminal or node.depth >= self.cfg.max_depth:
                rollout: list[Step] = []
                outcome = episode.Outcome(node.terminal, node.success, node.score)
                break
            if not node.children:
                self._expand(node)
                node = self._select(node)
                self._enter(node)
                rollout, outcome = self._rollout(node)
                break
            node = self._select(node)
            self._enter(node)
        value = outcome.value(self.cfg.dense_reward)
        self._backpropagate(node, value)
        self._record(node, rollout, outcome, value)
        self.stats["simulations"] += 1

    def _select(self, node: Node) -> Node:
        children = self.tree.children(node)
        scores = [ucb_score(c, node.visits, self.cfg.alpha, self.cfg.c_exp) for c in children]
        return children[scores.index(max(scores))]

    def _expand(self, node: Node) -> None:
        self._goto(node)
        candidates = self.policy.propose(node.history, self.cfg.num_actions, generator=self.generator)
        self.stats["policy_calls"] += 1
        unique = _merge_duplicates(candidates)
        node.prompt = unique[0].prompt
        if len(unique) > 1:
            scores = self.critic.score(node.history, unique)
            self.stats["critic_calls"] += 1
        else:
            scores = [1.0]
        for candidate, score in zip(unique, scores, strict=True):
            self.tree.add(
                Node(
                    id=-1,
                    parent=node.id,
                    depth=node.depth + 1,
                    history=node.history,  # replaced when the env steps into the child
                    action=candidate.text,
                    command=candidate.command,
                    logprob=candidate.logprob,
                    action_ids=tuple(candidate.action_ids),
                    critic_score=float(score),
                )
            )

    def _enter(self, node: Node) -> None:
        """Step the env from the parent into ``node`` the first time it is selected."""
        if node.expanded_env:
            return
        parent = self.tree.nodes[node.parent]
        self._goto(parent)
        history, reward, outcome = episode.step(self.env, parent.history, node.action, node.command)
        self.stats["env_steps"] += 1
        node.history, node.reward = history, reward
        node.terminal, node.success, node.score = outcome.terminal, outcome.success, outcome.score
        node.expanded_env = True
        node.snapshot = self._snapshot()
        self.at = node.id

    def _rollout(self, node: Node) -> tuple[list[Step], episode.Outcome]:
        outcome = episode.Outcome(node.terminal, node.success, node.score)
        if node.terminal or node.depth >= self.cfg.max_depth:
            return [], outcome
        self._goto(node)
        steps, outcome = episode.rollout(
            self.env,
            self.policy,
            node.history,
            max_steps=self.cfg.max_depth - node.depth,
            greedy=self.cfg.greedy_rollouts,
            generator=self.generator,
        )
        self.stats["policy_calls"] += len(steps)
        self.stats["env_steps"] += len(steps)
        self.at = None
        return steps, outcome

    def _backpropagate(self, node: Node, value: float) -> None:
        """Agent Q, Eq. 8, on every edge of the root-to-node path (and N(root))."""
        for n in self.tree.path(node):
            n.q_mcts = (n.q_mcts * n.visits + value) / (n.visits + 1)
            n.visits += 1

    def _record(self, node: Node, rollout: list[Step], outcome: episode.Outcome, value: float) -> None:
        path = self.tree.path(node)[1:]
        steps = [
            Step(
                prompt=self.tree.nodes[n.parent].prompt,
                action=n.action,
                command=n.command,
                observation=n.history.observation,
                reward=n.reward,
                logprob=n.logprob,
                action_ids=list(n.action_ids),
            )
            for n in path
        ]
        self.trajectories.append(
            Trajectory(
                task_id=self.task_id,
                steps=steps + rollout,
                reward=value,
                success=outcome.success,
                score=outcome.score,
                source="mcts",
            )
        )

    # -- environment position ---------------------------------------------------
    def _snapshot(self) -> Any:
        return self.base.snapshot() if self.can_snapshot else None

    def _goto(self, node: Node) -> None:
        if self.at == node.id:
            return
        self.stats["restores"] += 1
        if node.snapshot is not None:
            self.base.restore(node.snapshot)
        else:  # reset and replay the command prefix
            episode.start(self.env, self.task_id)
            for n in self.tree.path(node)[1:]:
                self.env.step(n.command)
                self.stats["env_steps"] += 1
        self.at = node.id

    def result(self) -> SearchResult:
        best = max(self.trajectories, key=lambda t: t.reward, default=None)
        return SearchResult(tree=self.tree, trajectories=self.trajectories, best=best, stats=dict(self.stats))


def _merge_duplicates(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Candidates that ground to the same command are one edge; keep the likeliest text."""
    by_command: dict[str, Candidate] = {}
    for c in candidates:
        kept = by_command.get(c.command)
        if kept is None or c.logprob > kept.logprob:
            by_command[c.command] = c
    return list(by_command.values())
