"""Running the policy in an environment: episode start and rollouts.

Shared by MCTS simulation, greedy evaluation and every other search, so the
meaning of "reward", "success" and "step limit" is the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch

from agentq.agent.policy import Policy
from agentq.records.history import History
from agentq.records.trajectory import Step, Trajectory
from envs.contract import INFO_MILESTONE


@dataclass(frozen=True)
class Outcome:
    """Where an environment step left the episode."""

    terminal: bool  # terminated or truncated
    success: bool
    score: float  # the env's own score in [0, 1]
    milestone: int | None = None  # info["milestone"] (envs/contract.py), for an env that reports one

    def value(self, dense_reward: bool) -> float:
        """The return R used by search and evaluation: 1/0 success, or the env score."""
        return self.score if dense_reward else float(self.success)

    def trajectory(self, task_id: Any, steps: list[Step], *, dense_reward: bool, source: str) -> Trajectory:
        """The steps that led here, with this outcome's return (every search and episode)."""
        return Trajectory(
            task_id=task_id,
            steps=steps,
            reward=self.value(dense_reward),
            success=self.success,
            score=self.score,
            source=source,
            milestone=self.milestone,
        )


def start(env: gym.Env, task_id: Any) -> History:
    observation, info = env.reset(options={"task_id": task_id})
    return History(observation=observation, valid_actions=_valid(info))


# Put before the env's answer to an empty command (the parser found no COMMAND).
NO_COMMAND = "Invalid action: your last answer had no COMMAND, so nothing was done. Write one line 'COMMAND: <command>'."


def step(env: gym.Env, history: History, action_text: str, command: str) -> tuple[History, float, Outcome]:
    """Send ``command`` to the env as it is. Text that is no valid action (a refused
    command, docs/method.md §2) is the env's to answer: all four envs say what was wrong and
    spend a step. An empty command also spends a step (the env's step count and a
    replay of the path stay the same), and the observation starts with :data:`NO_COMMAND`."""
    observation, reward, terminated, truncated, info = env.step(command)
    if not command.strip():
        observation = f"{NO_COMMAND}\n{observation}"
    outcome = Outcome(
        terminal=bool(terminated or truncated),
        success=bool(info.get("success", False)),
        score=float(info.get("score", reward)),
        milestone=info.get(INFO_MILESTONE),
    )
    return history.extend(action_text, observation, _valid(info)), float(reward), outcome


def rollout(
    env: gym.Env,
    policy: Policy,
    history: History,
    *,
    max_steps: int,
    greedy: bool,
    generator: torch.Generator | None = None,
) -> tuple[list[Step], Outcome]:
    """Act with the policy from ``history`` (the env must be in that state) until
    the episode ends or ``max_steps`` steps were taken."""
    steps: list[Step] = []
    outcome = Outcome(terminal=False, success=False, score=0.0)
    for _ in range(max_steps):
        candidate = policy.propose(history, 1, greedy=greedy, generator=generator)[0]
        history, reward, outcome = step(env, history, candidate.text, candidate.command)
        steps.append(Step.from_candidate(candidate, history.observation, reward))
        if outcome.terminal:
            break
    return steps, outcome


def run_episode(
    env: gym.Env,
    policy: Policy,
    task_id: Any,
    *,
    max_steps: int,
    dense_reward: bool = False,
    generator: torch.Generator | None = None,
) -> Trajectory:
    """A greedy episode (zero-shot evaluation: no search)."""
    steps, outcome = rollout(
        env, policy, start(env, task_id), max_steps=max_steps, greedy=True, generator=generator
    )
    return outcome.trajectory(task_id, steps, dense_reward=dense_reward, source="greedy")


def _valid(info: dict) -> tuple[str, ...] | None:
    valid = info.get("valid_actions")
    return None if valid is None else tuple(valid)
