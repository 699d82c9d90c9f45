"""Monte Carlo Tree Search guided by an AI critic (Agent Q, docs/method.md §3).

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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import torch

from agentq.agent import episode
from agentq.agent.policy import Policy, forget_prompts
from agentq.records.action import Candidate
from agentq.records.history import History
from agentq.records.trajectory import Step
from agentq.records.tree import Node, SearchResult
from agentq.search.position import child_node, merge_duplicates, path_steps
from agentq.search.run import SearchRun

LeafValue = Callable[[History], float]  # a state's value in [0, 1], judged without the env's reward


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
        distinct_actions: when K samples repeat commands, draw again (one more policy
            call each time) from the valid actions not drawn yet, until K distinct
            commands or a draw brings nothing new: K samples without replacement. A
            confident policy otherwise gives one child where the search needs K (the
            80-demonstration clone, WebShop product pages: 93 of 120 expansions drew one
            command). Needs constrained decoding (``agent.sampling.constrain_command``).
        use_critic: rank each expansion's candidates with the critic (Agent Q). False
            is plain UCT, Agent-R's search (Zhang et al. 2025, §3.1: MCTS whose values
            are the environment's rewards, no LLM critic): Q̂ = 0, no critic calls,
            new children tried in the policy's order, and ``alpha`` must be 1.
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
    distinct_actions: bool = False
    use_critic: bool = True

    def __post_init__(self) -> None:
        if not self.use_critic and self.alpha != 1.0:
            raise ValueError(
                f"search.use_critic=false leaves Q̂ = 0 in Eq. 10, so search.alpha must be 1.0, got {self.alpha}"
            )
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
        """A tree from the task's start, valued by the environment's reward."""
        forget_prompts(policy, critic)
        return self.search_from(env, policy, critic, task_id=task_id, generator=generator)

    def search_from(
        self,
        env: gym.Env,
        policy: Policy,
        critic: Critic,
        *,
        task_id: Any,
        generator: torch.Generator | None = None,
        start: History | None = None,
        prefix: Sequence[str] = (),
        leaf_value: LeafValue | None = None,
    ) -> SearchResult:
        """A tree rooted at ``start``, the state the env is in now (reached from the
        task's reset by the commands ``prefix``), or at the reset when None.

        ``leaf_value`` replaces the environment's reward as R (Eq. 8): the value of
        the state a simulation ended in, judged without the env's reward (the
        committed mode of :mod:`agentq.search.committed`).
        """
        run = SearchRun(
            env, task_id, alpha=self.alpha, max_policy_calls=self.max_policy_calls, start=start, prefix=prefix
        )
        simulation = _Simulation(self, run, env, policy, critic, generator, leaf_value)
        for _ in range(self.num_simulations):
            if run.budget_spent():
                break
            simulation.simulate()
        return run.result()


class _Simulation:
    """MCTS's own steps (selection, expansion, rollout, backpropagation) on a :class:`SearchRun`."""

    def __init__(self, cfg: MCTS, run: SearchRun, env, policy, critic, generator, leaf_value) -> None:
        self.cfg, self.run, self.env, self.policy, self.critic = cfg, run, env, policy, critic
        self.generator, self.leaf_value = generator, leaf_value
        self.tree, self.stats, self.position = run.tree, run.stats, run.position

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
        self._backpropagate(node, self._value(node, rollout, outcome))
        self._record(node, rollout, outcome)
        self.stats.simulations += 1

    def _value(self, node: Node, rollout: list[Step], outcome: episode.Outcome) -> float:
        """R of Eq. 8: the env's reward, or ``leaf_value`` of the state the simulation reached."""
        if self.leaf_value is None:
            return outcome.value(self.cfg.dense_reward)
        state = node.history
        for s in rollout:
            state = state.extend(s.action, s.observation, None)
        self.stats.judge_calls += 1
        return float(self.leaf_value(state))

    def _select(self, node: Node) -> Node:
        children = self.tree.children(node)
        scores = [ucb_score(c, node.visits, self.cfg.alpha, self.cfg.c_exp) for c in children]
        return children[scores.index(max(scores))]

    def _expand(self, node: Node) -> None:
        self.position.goto(node)
        unique = self._propose(node)
        if len(unique) > 1 and self.cfg.use_critic:
            scores = self.critic.score(node.history, unique)
            self.stats.critic_calls += 1
        else:
            scores = [1.0 if self.cfg.use_critic else 0.0] * len(unique)
        for candidate, score in zip(unique, scores, strict=True):
            self.tree.add(child_node(node, candidate, score))

    def _propose(self, node: Node) -> list[Candidate]:
        """The K candidates of an expansion, one per command (``distinct_actions``: K distinct
        commands where the valid actions allow)."""
        k = self.cfg.num_actions
        unique = merge_duplicates(self.run.propose(self.policy, node, k, self.generator))
        while self.cfg.distinct_actions and len(unique) < k:
            drawn = {c.command for c in unique}
            if all(a in drawn for a in node.history.valid_actions or ()):
                break  # every valid action has its child
            more = self.run.propose(self.policy, node, k - len(unique), self.generator, exclude=drawn)
            fresh = [c for c in merge_duplicates(more) if c.command not in drawn]
            if not fresh:
                break  # a template's argument drawn again: the policy has nothing new here
            unique += fresh
        return unique

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
        self.stats.policy_calls += len(steps)
        self.stats.policy_tokens += sum(len(s.action_ids) for s in steps)
        self.stats.env_steps += len(steps)
        self.position.lost()
        return steps, outcome

    def _backpropagate(self, node: Node, value: float) -> None:
        backpropagate(self.tree.path(node), value)

    def _record(self, node: Node, rollout: list[Step], outcome: episode.Outcome) -> None:
        steps = path_steps(self.tree, node)
        self.run.trajectories.append(
            outcome.trajectory(self.run.task_id, steps + rollout, dense_reward=self.cfg.dense_reward, source="mcts")
        )


def backpropagate(path: Sequence[Node], value: float) -> None:
    """Agent Q, Eq. 8, on every edge of a root-to-node path (and N(root)); a node's
    first value is kept as well (``Node.first_return``)."""
    for n in path:
        if n.visits == 0:
            n.first_return = value
        n.q_mcts = (n.q_mcts * n.visits + value) / (n.visits + 1)
        n.visits += 1


def ucb_score(child: Node, parent_visits: int, alpha: float, c_exp: float) -> float:
    """Agent Q, Eq. 7: Q(h, a) + c_exp * sqrt(log N(h) / (1 + N(h, a))), Q from Eq. 10."""
    exploration = math.sqrt(math.log(max(parent_visits, 1)) / (1 + child.visits))
    return child.blended_q(alpha) + c_exp * exploration
