"""Evaluation on held-out tasks: zero-shot (greedy, no search) and with search.

"With search" runs the configured search at inference on each task and scores
the best trajectory it found. The search's value signal includes the
environment's reward (as in Agent Q's inference-time MCTS), so this mode
measures what the agent achieves when it may explore and backtrack in the
environment; its budget (model calls, env steps) is reported beside it.

Each task's episode is written to disk as it finishes; a resumed run skips
tasks already evaluated.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from rich.progress import track

from agentq.agent.episode import run_episode
from agentq.data.buffer import ReplayBuffer, read_json, write_json
from agentq.data.trajectory import Trajectory

Episode = Callable[[Any, torch.Generator], tuple[Trajectory, dict[str, float]]]


def zero_shot(env: gym.Env, policy, *, max_steps: int, dense_reward: bool = False) -> Episode:
    def episode(task_id: Any, generator: torch.Generator) -> tuple[Trajectory, dict[str, float]]:
        before = getattr(policy, "num_calls", 0)
        trajectory = run_episode(env, policy, task_id, max_steps=max_steps, dense_reward=dense_reward)
        return trajectory, {"policy_calls": getattr(policy, "num_calls", 0) - before}

    return episode


def with_search(env: gym.Env, policy, critic, search) -> Episode:
    def episode(task_id: Any, generator: torch.Generator) -> tuple[Trajectory, dict[str, float]]:
        result = search(env, policy, critic, task_id=task_id, generator=generator)
        best = result.best or Trajectory(task_id=task_id, steps=[], reward=0.0, success=False)
        return best, dict(result.stats)

    return episode


def evaluate(
    episode: Episode,
    task_ids: Sequence[Any],
    *,
    buffer: ReplayBuffer,
    iteration: int,
    mode: str,
    seed: int,
) -> dict[str, float]:
    """Run ``episode`` on every task (skipping finished ones) and aggregate."""
    records = []
    for task_id in track(task_ids, description=f"eval {mode} (iter {iteration})", transient=True):
        path = buffer.eval_path(iteration, mode, task_id)
        if not path.exists():
            generator = torch.Generator().manual_seed(task_seed(seed, iteration, task_id, salt=1))
            trajectory, stats = episode(task_id, generator)
            write_json(path, {"trajectory": trajectory.to_dict(), "stats": stats})
        records.append(read_json(path))
    return aggregate(records)


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
    for key in ("policy_calls", "critic_calls", "env_steps"):
        values = [r["stats"].get(key) for r in records if key in r["stats"]]
        if values:
            metrics[f"avg_{key}"] = sum(values) / len(values)
    return metrics


def task_seed(seed: int, iteration: int, task_id: Any, salt: int = 0) -> int:
    """A seed per (run seed, iteration, task) that does not depend on which tasks ran before,
    so a resumed run draws the same samples as an uninterrupted one."""
    return zlib.crc32(f"{seed}/{iteration}/{task_id}/{salt}".encode()) & 0x7FFFFFFF
