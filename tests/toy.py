"""A toy environment and scripted policy/critic whose MCTS trees can be worked out by hand."""

from __future__ import annotations

import string

import gymnasium as gym
from gymnasium import spaces

from agentq.agent.action import format_composite
from agentq.agent.policy import Candidate


class ToyEnv(gym.Env):
    """Two binary choices; only ``right`` then ``left`` succeeds. Episodes end after
    ``depth`` steps. ``snapshots=False`` hides snapshot/restore to force replay."""

    metadata = {"render_modes": []}
    ACTIONS = ("left", "right")

    def __init__(self, depth: int = 2, goal: tuple[str, ...] = ("right", "left")) -> None:
        self.depth, self.goal = depth, goal
        self.observation_space = spaces.Text(max_length=200, charset=string.printable)
        self.action_space = spaces.Text(max_length=200, charset=string.printable)
        self.path: list[str] = []
        self.task_id = 0
        self.resets = 0

    def task_ids(self, split: str) -> list[int]:
        return [0, 1] if split == "train" else [2]

    def _obs(self) -> str:
        return f"At {'/'.join(self.path) or 'start'}"

    def _info(self) -> dict:
        success = tuple(self.path) == self.goal
        return {"task_id": self.task_id, "success": success, "score": float(success), "valid_actions": list(self.ACTIONS)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        self.task_id = (options or {}).get("task_id", 0)
        self.path = []
        return self._obs(), self._info()

    def step(self, action: str):
        if action in self.ACTIONS:
            self.path.append(action)
        else:
            self.path.append("?")
        info = self._info()
        done = info["success"] or len(self.path) >= self.depth
        return self._obs(), float(info["success"]), bool(info["success"]), bool(done and not info["success"]), info


class SnapshotToyEnv(ToyEnv):
    def snapshot(self):
        return (list(self.path), self.task_id)

    def restore(self, snap) -> None:
        self.path, self.task_id = list(snap[0]), snap[1]


class ScriptedPolicy:
    """Proposes ``left`` then ``right``; a rollout (k=1) always goes ``left``."""

    def __init__(self) -> None:
        self.num_calls = 0

    def propose(self, history, k, *, greedy=False, generator=None):
        self.num_calls += 1
        prompt = [{"role": "user", "content": history.observation}]
        return [
            Candidate(text=format_composite(c, thought=f"try {c}"), command=c, logprob=-1.0 - i, action_ids=(i,), prompt=prompt)
            for i, c in enumerate(ToyEnv.ACTIONS[:k])
        ]


class ScriptedCritic:
    """At the root prefers ``right``, deeper prefers ``left`` (the goal path)."""

    def score(self, history, candidates):
        preferred = "right" if not history.previous else "left"
        return [1.0 if c.command == preferred else 0.0 for c in candidates]
