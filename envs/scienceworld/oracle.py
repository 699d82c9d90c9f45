"""The ScienceWorld package's gold action sequence, played as an oracle.

``reset(options={"gold_actions": True})`` asks the simulator for the task's
gold path (a few seconds per task: the simulator plays it to build it); the
oracle plays it until the episode ends or the step budget runs out. Some gold
paths go on after the goal (a last look, a wait): the episode has ended by
then, so those steps are not taken. It measures whether a task is solvable in
a step budget (the oracle row of the evaluation, :mod:`agentq.oracle`).
"""

from __future__ import annotations

import gymnasium as gym

from envs import OracleResult


def play(env: gym.Env, task_id: str, max_steps: int) -> OracleResult:
    """Play the gold path of ``task_id`` with at most ``max_steps`` steps (and the env's own limit)."""
    _, info = env.reset(options={"task_id": task_id, "gold_actions": True})
    steps = 0
    for action in info["gold_actions"]:
        if steps >= max_steps:
            break
        _, _, terminated, truncated, info = env.step(action)
        steps += 1
        if terminated or truncated:
            break
    return OracleResult(success=bool(info["success"]), score=float(info["score"]), steps=steps)
