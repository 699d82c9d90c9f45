"""Toy environments and scripted policies/critics/evaluators whose search trees can be worked out by hand."""

from __future__ import annotations

import string

import gymnasium as gym
from gymnasium import spaces

from agentq.agent.action import format_composite
from agentq.records.action import Candidate


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
        return {
            "task_id": self.task_id,
            "success": success,
            "score": float(success),
            "valid_actions": list(self.ACTIONS),
        }

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
        return (
            self._obs(),
            float(info["success"]),
            bool(info["success"]),
            bool(done and not info["success"]),
            info,
        )


class Snapshots:
    """Adds snapshot/restore to a toy env (without them, searches replay)."""

    def snapshot(self):
        return (list(self.path), self.task_id)

    def restore(self, snap) -> None:
        self.path, self.task_id = list(snap[0]), snap[1]


class SnapshotToyEnv(Snapshots, ToyEnv):
    pass


class ThreeWayToyEnv(ToyEnv):
    """Three choices per step (a, b, c); only ``goal`` succeeds; episodes end after ``depth`` steps."""

    ACTIONS = ("a", "b", "c")

    def __init__(self, depth: int = 3, goal: tuple[str, ...] = ("b", "a")) -> None:
        super().__init__(depth=depth, goal=goal)


class SnapshotThreeWayToyEnv(Snapshots, ThreeWayToyEnv):
    pass


def path_key(observation: str) -> str:
    """The path of a toy observation: "At a/b" -> "a/b", "At start" -> "" (the root)."""
    where = observation.removeprefix("At ")
    return "" if where == "start" else where


def toy_candidate(
    command: str, i: int, observation: str, logprob: float | None = None
) -> Candidate:
    prompt = [{"role": "user", "content": observation}]
    text = format_composite(command, thought=f"try {command}")
    return Candidate(
        text=text,
        command=command,
        logprob=-1.0 - i if logprob is None else logprob,
        action_ids=(i,),
        prompt=prompt,
    )


class ScriptedPolicy:
    """Proposes the env's valid actions in order (``left`` then ``right`` in ToyEnv);
    a rollout (k=1) always takes the first. ``seen`` lists where it was called."""

    def __init__(self) -> None:
        self.num_calls = 0
        self.seen: list[str] = []

    def propose(self, history, k, *, greedy=False, generator=None, exclude=()):
        self.num_calls += 1
        self.seen.append(path_key(history.observation))
        actions = history.valid_actions or ToyEnv.ACTIONS
        return [toy_candidate(c, i, history.observation) for i, c in enumerate(actions[:k])]


class EpisodePolicy:
    """Samples scripted episodes: each call at the start state begins the next one."""

    def __init__(self, episodes: list[list[str]]) -> None:
        self.episodes, self.episode, self.num_calls = episodes, -1, 0

    def propose(self, history, k, *, greedy=False, generator=None, exclude=()):
        self.num_calls += 1
        if not history.previous:
            self.episode += 1
        command = self.episodes[self.episode][len(history.previous)]
        return [toy_candidate(command, 0, history.observation)] * k


class TablePolicy:
    """Proposes, at each state (a path key), a fixed list of (command, logprob)."""

    def __init__(self, table: dict[str, list[tuple[str, float]]]) -> None:
        self.table, self.num_calls = table, 0

    def propose(self, history, k, *, greedy=False, generator=None, exclude=()):
        self.num_calls += 1
        rows = self.table[path_key(history.observation)][:k]
        return [
            toy_candidate(c, i, history.observation, logprob) for i, (c, logprob) in enumerate(rows)
        ]


class ScriptedCritic:
    """At the root prefers ``right``, deeper prefers ``left`` (the goal path)."""

    def score(self, history, candidates):
        preferred = "right" if not history.previous else "left"
        return [1.0 if c.command == preferred else 0.0 for c in candidates]


class TableEvaluator:
    """A ToT state evaluator whose V(s) is looked up by path key ("a/b")."""

    kind = "state"

    def __init__(self, values: dict[str, float]) -> None:
        self.values = values
        self.calls: list[list[str]] = []

    def evaluate(self, task_history, states):
        assert task_history.observation == "At start"  # judged against the task, not the parent
        keys = [path_key(s.observation) for s in states]
        self.calls.append(keys)
        return [self.values[k] for k in keys]
