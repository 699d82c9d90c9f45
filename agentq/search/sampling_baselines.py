"""Search-free baselines that spend policy calls without a critic.

- **Best-of-N**: N episodes sampled from the root at the policy's temperature;
  the best is the one with the highest return (the outcome reward acts as a
  perfect verifier, so this is an upper bound for sampling at that budget).
- **Self-consistency** (Wang et al. 2023, arXiv 2203.11171, applied per step):
  at every step sample n composite actions, ground them, and take the most
  frequent command (majority vote; ties go to the larger summed log-prob);
  one episode.

Both accept and ignore the ``critic`` argument of the search contract.

Trees: best-of-N stores each episode as its own chain under the root (sampled
episodes are not merged, so every chain is one sample). Self-consistency
stores the chosen path; at each step the losing commands are children that
were never entered, with ``critic_score`` = the command's vote share and
``kept`` = chosen or not.

Budget ``max_policy_calls``: no policy call is made once the policy was
called that often; an episode cut short ends unfinished (return 0, or the env's
score so far with ``dense_reward``). It is never exceeded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import torch

from agentq.agent.policy import Policy, forget_prompts
from agentq.records.action import Candidate
from agentq.records.tree import SearchResult
from agentq.search.position import child_node, leaf_trajectory, merge_duplicates
from agentq.search.run import SearchRun


@dataclass
class BestOfN:
    """Arguments are the config keys of ``conf/search/best_of_n.yaml``.

    Args:
        n: episodes sampled from the root.
        max_depth: step limit of an episode.
        dense_reward: an episode's return is the env's score instead of 1/0 success.
        max_policy_calls: policy calls over all episodes (one per step).
    """

    critic_kind: ClassVar[None] = None
    has_visits: ClassVar[bool] = False

    n: int = 4
    max_depth: int = 10
    dense_reward: bool = False
    max_policy_calls: int | None = None

    def __post_init__(self) -> None:
        _check(self.n, self.max_depth, self.max_policy_calls)

    def __call__(
        self,
        env: gym.Env,
        policy: Policy,
        critic: Any = None,
        *,
        task_id: Any,
        generator: torch.Generator | None = None,
    ) -> SearchResult:
        forget_prompts(policy, critic)
        run = SearchRun(env, task_id, alpha=0.0, max_policy_calls=self.max_policy_calls)
        for _ in range(self.n):
            if run.budget_spent():
                break
            run.position.goto(run.root)
            node = run.root
            while not node.terminal and node.depth < self.max_depth and not run.budget_spent():
                candidate = run.propose(policy, node, 1, generator)[0]
                node = run.step_into(node, candidate)
            run.trajectories.append(
                leaf_trajectory(run.tree, node, dense_reward=self.dense_reward, source="best_of_n")
            )
            run.stats.episodes += 1
        return run.result()  # best: the first highest return


@dataclass
class SelfConsistency:
    """Arguments are the config keys of ``conf/search/self_consistency.yaml``.

    Args:
        n: composite actions sampled per step (the voters).
        max_depth: step limit of the episode.
        dense_reward: the episode's return is the env's score instead of 1/0 success.
        max_policy_calls: policy calls (one per step, each sampling ``n``).
    """

    critic_kind: ClassVar[None] = None
    has_visits: ClassVar[bool] = False

    n: int = 5
    max_depth: int = 10
    dense_reward: bool = False
    max_policy_calls: int | None = None

    def __post_init__(self) -> None:
        _check(self.n, self.max_depth, self.max_policy_calls)

    def __call__(
        self,
        env: gym.Env,
        policy: Policy,
        critic: Any = None,
        *,
        task_id: Any,
        generator: torch.Generator | None = None,
    ) -> SearchResult:
        forget_prompts(policy, critic)
        run = SearchRun(env, task_id, alpha=0.0, max_policy_calls=self.max_policy_calls)
        node = run.root
        while not node.terminal and node.depth < self.max_depth and not run.budget_spent():
            candidates = run.propose(policy, node, self.n, generator)
            winner, shares = majority_vote(candidates)
            chosen = None
            for candidate in merge_duplicates(candidates):
                if candidate.command == winner.command:
                    chosen = run.step_into(node, winner, critic_score=shares[winner.command], kept=True)
                else:  # a losing vote: recorded, never entered
                    run.tree.add(
                        child_node(node, candidate, shares[candidate.command])
                    ).kept = False
            node = chosen
        run.stats.episodes = 1
        trajectory = leaf_trajectory(
            run.tree, node, dense_reward=self.dense_reward, source="self_consistency"
        )
        run.trajectories.append(trajectory)
        return run.result(trajectory)


def majority_vote(candidates: Sequence[Candidate]) -> tuple[Candidate, dict[str, float]]:
    """The most frequent command (ties: the larger summed log-prob), its likeliest
    text, and every command's vote share."""
    counts = Counter(c.command for c in candidates)
    summed: dict[str, float] = {}
    for c in candidates:
        summed[c.command] = summed.get(c.command, 0.0) + c.logprob
    command = max(counts, key=lambda cmd: (counts[cmd], summed[cmd]))
    winner = max((c for c in candidates if c.command == command), key=lambda c: c.logprob)
    return winner, {cmd: k / len(candidates) for cmd, k in counts.items()}


def _check(n: int, max_depth: int, max_policy_calls: int | None) -> None:
    if n < 1:
        raise ValueError(f"search.n must be >= 1, got {n}")
    if max_depth < 1:
        raise ValueError(f"search.max_depth must be >= 1, got {max_depth}")
    if max_policy_calls is not None and max_policy_calls < 1:
        raise ValueError(f"search.max_policy_calls must be >= 1 or null, got {max_policy_calls}")
