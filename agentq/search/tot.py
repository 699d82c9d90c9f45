"""Tree of Thoughts search over environment states (Yao et al. 2023, arXiv 2305.10601; docs/method.md §7).

A "thought" is a composite action and a state is the environment state it
leads to: every candidate is stepped into (restoring the parent first, as in
MCTS), so the evaluator judges real observations, not imagined ones.

- **BFS** (ToT Algorithm 1): keep a frontier of ``b`` states; expand each with
  ``k`` candidates from the policy; score every new state with the state
  evaluator V; keep the best ``b`` across the whole new level; up to ``T``
  levels. Terminal states are never expanded.
- **DFS** (ToT Algorithm 2): expand a state, step into and evaluate its
  children, visit them in descending V; children with V < ``v_th`` are pruned;
  backtrack when a branch ends (terminal, depth limit, every child pruned);
  stop at the first success or when the budget is spent.

Every state is a :class:`~agentq.records.tree.Node` with ``critic_score`` = V in
[0, 1] and ``kept`` = selected (True) or pruned (False). The tree has
``alpha = 0`` so its blended value (Agent Q, Eq. 10) is V, and
:class:`~agentq.data.pairs.StepPairBuilder` turns it into CPO-style step pairs
(Zhang et al. 2024): a kept child against a pruned sibling.

Trajectories (for the buffer) are the branch ends, in node order: every
terminal state the search stepped into (kept or pruned: a finished episode is
data), plus BFS's kept states that were never expanded (the final frontier) or
DFS's visited states it turned back from (depth limit, all children pruned,
budget). The return is 1/0 success (or the env score with ``dense_reward``);
``best`` is the highest return, ties broken by V.

Departures from the paper, for agents:

- Candidates that ground to the same command are one state (as in MCTS).
- The evaluator is a :class:`~agentq.critic.value.StateEvaluator` that reads the
  LLM's label distribution instead of sampling judgements (see that module).
- DFS stops as soon as the env reports a success among the children it stepped
  into, even a pruned one: the env's outcome outranks the evaluator's guess.
- ToT's DFS budget is a step count; ours, ``max_nodes``, counts expansions
  (nodes whose children were proposed), so it is exact: at most
  ``1 + max_nodes * k`` nodes.
- ``max_policy_calls`` (both searches): no expansion starts once the policy was
  called that often; one expansion is one call, so the budget is never exceeded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import torch

from agentq.agent.policy import Policy, forget_prompts
from agentq.critic.value import StateEvaluator
from agentq.records.tree import Node, SearchResult
from agentq.search.position import child_node, leaf_trajectory, merge_duplicates
from agentq.search.run import SearchRun


@dataclass
class BFS:
    """ToT breadth-first search. Arguments are the config keys of ``conf/search/tot_bfs.yaml``.

    Args:
        breadth: b, states kept per level (the frontier).
        num_actions: k, composite actions sampled per expanded state.
        max_depth: T, levels (env steps from the root).
        dense_reward: a trajectory's return is the env's score instead of 1/0 success.
        max_policy_calls: no expansion starts once the policy was called this often.
    """

    critic_kind: ClassVar[str] = "state"
    has_visits: ClassVar[bool] = False

    breadth: int = 2
    num_actions: int = 3
    max_depth: int = 10
    dense_reward: bool = False
    max_policy_calls: int | None = None

    def __post_init__(self) -> None:
        _require("search.breadth", self.breadth, self.breadth >= 1, ">= 1")
        _require("search.num_actions", self.num_actions, self.num_actions >= 1, ">= 1")
        _require("search.max_depth", self.max_depth, self.max_depth >= 1, ">= 1")
        _require_budget(self.max_policy_calls)

    def __call__(
        self,
        env: gym.Env,
        policy: Policy,
        critic: StateEvaluator,
        *,
        task_id: Any,
        generator: torch.Generator | None = None,
    ) -> SearchResult:
        tot = _ToT(env, policy, critic, task_id, generator, self.num_actions, self.max_policy_calls)
        frontier = [tot.root]
        for _ in range(self.max_depth):
            level: list[Node] = []
            for node in frontier:
                if node.terminal:
                    continue
                if tot.run.budget_spent():
                    break
                level += tot.expand(node)
            if not level:
                break
            tot.evaluate(level)
            # Python's sort is stable: equal values keep expansion order.
            ranked = sorted(level, key=lambda n: -n.critic_score)
            for i, node in enumerate(ranked):
                node.kept = i < self.breadth
            frontier = ranked[: self.breadth]
        # Branch ends: every terminal state and every kept state never expanded
        # (the final frontier, or where the budget stopped the search).
        leaves = [n for n in tot.run.tree.nodes[1:] if n.terminal or (n.kept and not n.children)]
        return tot.result(leaves, self.dense_reward, source="tot_bfs")


@dataclass
class DFS:
    """ToT depth-first search. Arguments are the config keys of ``conf/search/tot_dfs.yaml``.

    Args:
        num_actions: k, composite actions sampled per expanded state.
        max_depth: T, the depth limit (env steps from the root).
        value_threshold: v_th, children with a lower value are pruned.
        max_nodes: at most this many states are expanded.
        dense_reward: a trajectory's return is the env's score instead of 1/0 success.
        max_policy_calls: no expansion starts once the policy was called this often.
    """

    critic_kind: ClassVar[str] = "state"
    has_visits: ClassVar[bool] = False

    num_actions: int = 3
    max_depth: int = 10
    value_threshold: float = 0.3
    max_nodes: int = 20
    dense_reward: bool = False
    max_policy_calls: int | None = None

    def __post_init__(self) -> None:
        _require("search.num_actions", self.num_actions, self.num_actions >= 1, ">= 1")
        _require("search.max_depth", self.max_depth, self.max_depth >= 1, ">= 1")
        _require(
            "search.value_threshold",
            self.value_threshold,
            0.0 <= self.value_threshold <= 1.0,
            "in [0, 1]",
        )
        _require("search.max_nodes", self.max_nodes, self.max_nodes >= 1, ">= 1")
        _require_budget(self.max_policy_calls)

    def __call__(
        self,
        env: gym.Env,
        policy: Policy,
        critic: StateEvaluator,
        *,
        task_id: Any,
        generator: torch.Generator | None = None,
    ) -> SearchResult:
        tot = _ToT(env, policy, critic, task_id, generator, self.num_actions, self.max_policy_calls)
        visited: set[int] = set()

        def visit(node: Node) -> bool:
            """DFS from ``node``; True stops the whole search (a success or the budget)."""
            visited.add(node.id)
            if node.terminal or node.depth >= self.max_depth:
                return False  # a dead end: backtrack
            if tot.run.budget_spent() or tot.run.stats.expansions >= self.max_nodes:
                return True
            children = tot.expand(node)
            tot.evaluate(children)
            for child in children:
                child.kept = child.critic_score >= self.value_threshold
            if any(c.success for c in children):
                return True
            for child in sorted((c for c in children if c.kept), key=lambda c: -c.critic_score):
                if visit(child):
                    return True
            return False

        visit(tot.root)

        # Branch ends: every terminal state, and every visited state the search
        # turned back from without visiting a child (depth limit, all children
        # pruned, budget).
        def branch_end(n: Node) -> bool:
            reached = [c for c in tot.run.tree.children(n) if c.terminal or c.id in visited]
            return n.terminal or (n.id in visited and not reached)

        leaves = [n for n in tot.run.tree.nodes[1:] if branch_end(n)]
        return tot.result(leaves, self.dense_reward, source="tot_dfs")


class _ToT:
    """ToT's own steps (expand into real states, evaluate them) on a :class:`SearchRun`;
    BFS and DFS drive it."""

    def __init__(
        self, env, policy, evaluator, task_id, generator, num_actions, max_policy_calls
    ) -> None:
        self.policy, self.evaluator, self.generator = policy, evaluator, generator
        forget_prompts(policy, evaluator)
        self.num_actions = num_actions
        # Eq. 10 with alpha = 0: a node's Q is the evaluator's V.
        self.run = SearchRun(env, task_id, alpha=0.0, max_policy_calls=max_policy_calls)
        self.root = self.run.root
        self.root.kept = True

    def expand(self, node: Node) -> list[Node]:
        """Propose k candidates at ``node`` and step into each distinct command."""
        self.run.position.goto(node)
        candidates = self.run.propose(self.policy, node, self.num_actions, self.generator)
        self.run.stats.expansions += 1
        children = [self.run.tree.add(child_node(node, c)) for c in merge_duplicates(candidates)]
        for child in children:
            self.run.position.enter(child)
        return children

    def evaluate(self, states: list[Node]) -> None:
        """V for each state, judged against the task (the root's history)."""
        values = self.evaluator.evaluate(self.root.history, [n.history for n in states])
        self.run.stats.critic_calls += 1
        self.run.stats.states_evaluated += len(states)
        for node, value in zip(states, values, strict=True):
            node.critic_score = float(value)

    def result(self, leaves: Iterable[Node], dense_reward: bool, source: str) -> SearchResult:
        ends = [
            (n, leaf_trajectory(self.run.tree, n, dense_reward=dense_reward, source=source))
            for n in sorted(leaves, key=lambda n: n.id)
        ]
        self.run.trajectories += [t for _, t in ends]
        # The best return; among equal returns the state the evaluator liked most (the first on a tie).
        best = max(ends, key=lambda e: (e[1].reward, e[0].critic_score), default=(None, None))[1]
        return self.run.result(best)


def _require(key: str, value: Any, ok: bool, rule: str) -> None:
    if not ok:
        raise ValueError(f"{key} must be {rule}, got {value!r}")


def _require_budget(max_policy_calls: int | None) -> None:
    ok = max_policy_calls is None or max_policy_calls >= 1
    _require("search.max_policy_calls", max_policy_calls, ok, ">= 1 or null")
