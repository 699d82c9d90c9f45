"""Evaluation on held-out tasks, in four modes (docs/method.md §3 and §8):

- **zero_shot**: greedy, no search.
- **committed**: the agent acts with search (:mod:`agentq.search.committed`): at
  every real step it searches from its state, valued by its critic and a judge,
  never by the environment's reward, and executes one action. The episode's
  reward is what it actually did: the headline "with search" row.
- **verifier**: the configured search once per task, scored by its best
  trajectory ranked by the environment's own reward: pass@rollouts with the
  environment as the verifier, an upper bound, labelled as such everywhere.
- **recovery** (Agent-R, Table 3): each task starts from the first steps of an
  episode that failed: the prefix's commands are replayed, then the policy acts
  greedily until the episode ends or the step limit (prefix included). It
  measures how often the agent still succeeds after starting from its own mistakes.

Each task's episode is written to disk as it finishes; a resumed run skips
tasks already evaluated.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch

from agentq.agent import episode as ep
from agentq.agent.episode import run_episode
from agentq.agent.policy import forget_prompts
from agentq.layout import RunLayout, read_json, write_json
from agentq.parallel import for_each_task
from agentq.records.trajectory import Step, Trajectory
from agentq.records.tree import SearchStats
from agentq.search.committed import committed_episode

Episode = Callable[[Any, torch.Generator], tuple[Trajectory, SearchStats]]


def zero_shot(env: gym.Env, policy, *, max_steps: int, dense_reward: bool = False) -> Episode:
    def episode(task_id: Any, generator: torch.Generator) -> tuple[Trajectory, SearchStats]:
        forget_prompts(policy)  # an episode depends on its task, never on the one before
        before = getattr(policy, "num_calls", 0)
        trajectory = run_episode(env, policy, task_id, max_steps=max_steps, dense_reward=dense_reward)
        tokens = sum(len(s.action_ids) for s in trajectory.steps)  # greedy: one completion a step
        return trajectory, SearchStats(policy_calls=getattr(policy, "num_calls", 0) - before, policy_tokens=tokens)

    return episode


def verifier(env: gym.Env, policy, critic, search) -> Episode:
    def episode(task_id: Any, generator: torch.Generator) -> tuple[Trajectory, SearchStats]:
        result = search(env, policy, critic, task_id=task_id, generator=generator)
        best = result.best or Trajectory(task_id=task_id, steps=[], reward=0.0, success=False)
        return best, result.stats

    return episode


def committed(env: gym.Env, policy, critic, judge, search, *, max_steps: int, dense_reward: bool = False) -> Episode:
    def episode(task_id: Any, generator: torch.Generator) -> tuple[Trajectory, SearchStats]:
        return committed_episode(
            env, policy, critic, judge, search,
            task_id=task_id, max_steps=max_steps, dense_reward=dense_reward, generator=generator,
        )  # fmt: skip

    return episode


def recovery(
    env: gym.Env,
    policy,
    prefixes: Mapping[Any, Sequence[Step]],
    *,
    max_steps: int,
    dense_reward: bool = False,
) -> Episode:
    """Replay each task's failed prefix (``prefixes[task_id]``), then act greedily.

    The policy's history after the replay lists the prefix's action texts as its
    earlier actions, as if it had written them. ``max_steps`` counts the prefix;
    the trajectory holds the replayed steps (with the observations of this run)
    and the continuation, and the stats record ``prefix_steps``.
    """

    def episode(task_id: Any, generator: torch.Generator) -> tuple[Trajectory, SearchStats]:
        if task_id not in prefixes:
            raise KeyError(f"recovery: no failed prefix for task {task_id!r} (see failed_prefixes)")
        forget_prompts(policy)
        before = getattr(policy, "num_calls", 0)
        history = ep.start(env, task_id)
        outcome = ep.Outcome(terminal=False, success=False, score=0.0)
        steps: list[Step] = []
        for s in prefixes[task_id]:
            history, reward, outcome = ep.step(env, history, s.action, s.command)
            steps.append(Step(s.prompt, s.action, s.command, history.observation, reward, s.logprob, list(s.action_ids)))
            if outcome.terminal:  # a replay need not end where the recorded episode did
                break
        prefix_steps = len(steps)
        if not outcome.terminal and prefix_steps < max_steps:
            continuation, outcome = ep.rollout(
                env, policy, history, max_steps=max_steps - prefix_steps, greedy=True, generator=generator
            )
            steps += continuation
        trajectory = outcome.trajectory(task_id, steps, dense_reward=dense_reward, source="recovery")
        stats = SearchStats(policy_calls=getattr(policy, "num_calls", 0) - before, prefix_steps=prefix_steps)
        return trajectory, stats

    return episode


def failed_prefixes(
    trajectories: Sequence[Trajectory], fraction: float
) -> tuple[dict[Any, list[Step]], list[Any]]:
    """The first ceil(fraction * T) steps of each task's first failed trajectory (T steps),
    at least 1 and, when T >= 2, at most T - 1 (so the agent has a step left to recover).

    Returns the prefixes by task id and the task ids skipped (no failed trajectory
    with a step), in order of first appearance.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"recovery fraction must be in (0, 1], got {fraction}")
    prefixes: dict[Any, list[Step]] = {}
    for t in trajectories:
        if t.success or not t.steps or t.task_id in prefixes:
            continue
        n = len(t.steps)
        k = max(1, math.ceil(fraction * n - 1e-9))  # 0.3 * 10 is 3.0000000000000004
        if n >= 2:
            k = min(k, n - 1)
        prefixes[t.task_id] = list(t.steps[:k])
    tasks = dict.fromkeys(t.task_id for t in trajectories)  # in order of first appearance
    return prefixes, [task for task in tasks if task not in prefixes]


def evaluate(
    episode: Episode | Sequence[Episode],
    task_ids: Sequence[Any],
    *,
    layout: RunLayout,
    iteration: int,
    mode: str,
    seed: int,
    workers: int = 1,
    weights: str | None = None,
) -> dict[str, float]:
    """Run ``episode`` on every task (skipping finished ones) and aggregate. Given one
    episode function per lane, the lanes run side by side in threads; ``workers > 1``
    forks processes instead (see :mod:`agentq.parallel`). ``weights``: the server's name
    for the policy's weights (engine=server), kept with each episode."""

    at = {"layout": layout, "iteration": iteration, "mode": mode, "seed": seed, "weights": weights}
    lanes = [functools.partial(evaluate_task, e, **at) for e in ([episode] if callable(episode) else episode)]
    todo = [t for t in task_ids if not layout.episode(iteration, mode, t).exists()]
    if todo:  # (none when a resumed run finished them, or Ray actors played them)
        for_each_task(lanes, todo, workers=workers, description=f"eval {mode} (iter {iteration})")
    return aggregate([read_json(layout.episode(iteration, mode, t)) for t in task_ids])


def evaluate_task(
    episode: Episode, task_id: Any, *, layout: RunLayout, iteration: int, mode: str, seed: int, weights: str | None
) -> None:
    """One episode from the task's own seed, written to its file (with ``weights`` when not None)."""
    generator = torch.Generator().manual_seed(task_seed(seed, iteration, task_id, salt=1))
    with torch.no_grad():  # per thread: a lane's thread does not inherit the caller's
        trajectory, stats = episode(task_id, generator)
    record = {"trajectory": trajectory.to_dict(), "stats": stats.to_dict()}
    if weights is not None:
        record["weights"] = weights
    write_json(layout.episode(iteration, mode, task_id), record)


def aggregate(records: Sequence[dict]) -> dict[str, float]:
    n = len(records)
    if n == 0:
        return {"success_rate": 0.0, "avg_reward": 0.0, "num_tasks": 0}
    trajectories = [r["trajectory"] for r in records]
    metrics = {
        "success_rate": sum(bool(t["success"]) for t in trajectories) / n,
        "avg_reward": sum(float(t["score"]) for t in trajectories) / n,
        "num_tasks": n,
        "avg_steps": sum(len(t["steps"]) for t in trajectories) / n,
    }
    # The papers' tables: success rate in %, WebShop's "score" = average reward x 100.
    metrics["success_pct"] = 100 * metrics["success_rate"]
    metrics["score"] = 100 * metrics["avg_reward"]
    # A counter no task spent is one the mode does not count (zero-shot's env steps): not reported.
    stats = [SearchStats.from_dict(r["stats"]) for r in records]
    successes = sum(bool(t["success"]) for t in trajectories)
    for key in SearchStats.PER_TASK:
        values = [getattr(s, key) for s in stats]
        if any(values):
            metrics[f"avg_{key}"] = sum(values) / n
            if successes:  # cost per success: what the mode spent on all tasks over the ones it solved
                metrics[f"{key}_per_success"] = sum(values) / successes
    if successes:
        metrics["steps_per_success"] = sum(len(t["steps"]) for t in trajectories) / successes
        metrics["model_calls_per_success"] = sum(s.model_calls for s in stats) / successes
    metrics |= milestone_shares(t.get("milestone") for t in trajectories)
    # Shares of the steps whose command was exact / rewritten / refused / missing / unchecked
    # (agentq.agent.grounding), over the steps that recorded one (not replayed prefixes, old files).
    from agentq.agent.grounding import grounding_shares

    metrics |= grounding_shares(s.get("grounding") for t in trajectories for s in t["steps"])
    return metrics


def milestone_shares(milestones) -> dict[str, float]:
    """For an env that reports milestones (envs/contract.py): their mean index and the share
    of episodes that reached each one (``reached_milestone_<k>``, k >= 1); else nothing."""
    milestones = list(milestones)
    if all(m is None for m in milestones):
        return {}
    reached = [m or 0 for m in milestones]
    shares = {"avg_milestone": sum(reached) / len(reached)}
    for k in range(1, max(reached) + 1):
        shares[f"reached_milestone_{k}"] = sum(m >= k for m in reached) / len(reached)
    return shares


def task_seed(seed: int, iteration: int, task_id: Any, salt: int = 0) -> int:
    """A seed per (run seed, iteration, task) that does not depend on which tasks ran before,
    so a resumed run draws the same samples as an uninterrupted one."""
    return zlib.crc32(f"{seed}/{iteration}/{task_id}/{salt}".encode()) & 0x7FFFFFFF
