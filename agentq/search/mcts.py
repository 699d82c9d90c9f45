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
prefix (as on the live web): :class:`agentq.search.position.Position`.

Budget: ``num_simulations``, and optionally ``max_policy_calls``: no new
simulation starts once the policy has been called that often, so a search may
overshoot it by one simulation (one expansion plus a rollout of at most
``max_depth`` steps).

Departures from the paper, which publishes no constants: every value below is
ours and a config key. Rollout steps are not added to the tree (standard
MCTS); they are kept as trajectories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import torch

from agentq.agent import episode
from agentq.agent.policy import Candidate, Policy
from agentq.agent.prompt import History
from agentq.data.trajectory import Step, Trajectory
from agentq.search.position import Position, budget_spent, child_node, merge_duplicates, path_steps
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
        max_policy_calls: no new simulation starts once the policy was called this
            often (None: no limit); the running one finishes.
    """

    critic_kind: ClassVar[str] = "rank"  # ranks the K candidates at a node (LLMRankingCritic)
    has_visits: ClassVar[bool] = True  # nodes carry N(h, a) (conservative DPO weighs by it)

    num_simulations: int = 8
    num_actions: int = 3
    max_depth: int = 10
    c_exp: float = 1.0
    alpha: float = 0.5
    dense_reward: bool = False
    greedy_rollouts: bool = False
    max_policy_calls: int | None = None

    def __post_init__(self) -> None:
        checks = {
            "search.num_simulations": self.num_simulations >= 1,
            "search.num_actions": self.num_actions >= 1,
            "search.max_depth": self.max_depth >= 1,
            "search.c_exp": self.c_exp >= 0,
            "search.alpha": 0.0 <= self.alpha <= 1.0,
            "search.max_policy_calls": self.max_policy_calls is None or self.max_policy_calls >= 1,
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
            if budget_spent(run.stats, self.max_policy_calls):
                break
            run.simulate()
        return run.result()


class _Run:
    """The state of one search: the tree, the env position, counters."""

    def __init__(self, cfg: MCTS, env, policy, critic, task_id, generator) -> None:
        self.cfg, self.env, self.policy, self.critic = cfg, env, policy, critic
        self.task_id, self.generator = task_id, generator
        self.tree = Tree(task_id=task_id, alpha=cfg.alpha)
        self.trajectories: list[Trajectory] = []
        self.stats = {"simulations": 0, "policy_calls": 0, "critic_calls": 0, "env_steps": 0, "restores": 0}
        self.position = Position(env, task_id, self.tree, self.stats)
        self.position.root()

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
                self.position.enter(node)
                rollout, outcome = self._rollout(node)
                break
            node = self._select(node)
            self.position.enter(node)
        value = outcome.value(self.cfg.dense_reward)
        self._backpropagate(node, value)
        self._record(node, rollout, outcome)
        self.stats["simulations"] += 1

    def _select(self, node: Node) -> Node:
        children = self.tree.children(node)
        scores = [ucb_score(c, node.visits, self.cfg.alpha, self.cfg.c_exp) for c in children]
        return children[scores.index(max(scores))]

    def _expand(self, node: Node) -> None:
        self.position.goto(node)
        candidates = self.policy.propose(node.history, self.cfg.num_actions, generator=self.generator)
        self.stats["policy_calls"] += 1
        unique = merge_duplicates(candidates)
        node.prompt = unique[0].prompt
        if len(unique) > 1:
            scores = self.critic.score(node.history, unique)
            self.stats["critic_calls"] += 1
        else:
            scores = [1.0]
        for candidate, score in zip(unique, scores, strict=True):
            self.tree.add(child_node(node, candidate, score))

    def _rollout(self, node: Node) -> tuple[list[Step], episode.Outcome]:
        outcome = episode.Outcome(node.terminal, node.success, node.score)
        if node.terminal or node.depth >= self.cfg.max_depth:
            return [], outcome
        self.position.goto(node)
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
        self.position.lost()
        return steps, outcome

    def _backpropagate(self, node: Node, value: float) -> None:
        """Agent Q, Eq. 8, on every edge of the root-to-node path (and N(root))."""
        for n in self.tree.path(node):
            n.q_mcts = (n.q_mcts * n.visits + value) / (n.visits + 1)
            n.visits += 1

    def _record(self, node: Node, rollout: list[Step], outcome: episode.Outcome) -> None:
        steps = path_steps(self.tree, node)
        self.trajectories.append(
            outcome.trajectory(self.task_id, steps + rollout, dense_reward=self.cfg.dense_reward, source="mcts")
        )

    def result(self) -> SearchResult:
        best = max(self.trajectories, key=lambda t: t.reward, default=None)
        return SearchResult(tree=self.tree, trajectories=self.trajectories, best=best, stats=dict(self.stats))
