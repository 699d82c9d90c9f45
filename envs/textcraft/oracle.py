"""A scripted TextCraft solver that uses only what the agent sees.

Recipes are read from the listed commands in ``info["valid_actions"]`` and
base items from its ``get`` commands; it crafts the goal depth-first,
gathering each ingredient before its recipe, and backtracks out of a dead
end (e.g. a verbatim tag command) with the env's snapshot / restore. Since
``restore`` also rolls back the step counter, the steps it reports are those
of the straight plan it ended with, which the agent could have played (a
failure for lack of steps reports the whole budget).

It measures whether a task is solvable within a step budget (the oracle row of
the evaluation, :mod:`agentq.oracle`); it is not used for training.
"""

from __future__ import annotations

import re

import gymnasium as gym

from envs import OracleResult
from envs.textcraft.commands import CRAFT, GET

_GOAL = re.compile(r"Goal: craft (.+)\.")


def _item_id(name: str) -> str:
    return "minecraft:" + name.replace(" ", "_")


class _OutOfSteps(Exception):
    """The budget ran out on the current branch."""


class Oracle:
    """Crafts the goal using only ``info["valid_actions"]``, backtracking with snapshots."""

    def __init__(self, env: gym.Env, actions: list[str], max_steps: int | None = None) -> None:
        self.env = env
        self.base = env.unwrapped
        self.max_steps = max_steps
        self.gets: dict[str, str] = {}
        self.crafts: dict[str, list[tuple[str, dict[str, int]]]] = {}
        for action in actions:
            if get := GET.fullmatch(action):
                self.gets.setdefault(_item_id(get.group(2)), action)
            elif craft := CRAFT.fullmatch(action):
                inputs = {}
                for part in craft.group(3).split(", "):
                    count, name = part.split(" ", 1)
                    inputs[_item_id(name)] = int(count)
                self.crafts.setdefault(_item_id(craft.group(2)), []).append((action, inputs))
        self.done = False
        self.ran_out = False  # some branch hit the budget

    @property
    def steps(self) -> int:
        return self.base.snapshot().steps

    def _have(self, item: str) -> int:
        return self.base.snapshot().inventory.get(item, 0)

    def _step(self, action: str) -> str:
        if self.max_steps is not None and self.steps >= self.max_steps:
            self.ran_out = True
            raise _OutOfSteps
        obs, _, terminated, truncated, _ = self.env.step(action)
        self.done = terminated
        if truncated:
            self.ran_out = True
            raise _OutOfSteps
        return obs.rsplit("\nLast result: ", 1)[1]

    def obtain(self, item: str, count: int, path: frozenset[str] = frozenset()) -> bool:
        while self._have(item) < count and not self.done:
            if item in self.gets:
                self._step(self.gets[item])
            elif item in path or not self._craft_any(item, path | {item}):
                return False
        return True

    def _craft_any(self, item: str, path: frozenset[str]) -> bool:
        # Through the wrappers, not on the bare env: a wrapper that records the commands
        # (envs/demonstrations.py) must drop those a restore undoes.
        snapshot, restore = self.env.get_wrapper_attr("snapshot"), self.env.get_wrapper_attr("restore")
        for action, inputs in self.crafts.get(item, []):
            snap = snapshot()
            try:
                if self._craft(action, inputs, path):
                    return True
            except _OutOfSteps:
                pass  # another recipe may be shorter
            restore(snap)  # undo a dead end (e.g. a verbatim tag command)
        return False

    def _craft(self, action: str, inputs: dict[str, int], path: frozenset[str]) -> bool:
        # Crafting one input can consume another, so gather until all are there.
        for _ in range(3):
            for item, count in inputs.items():
                if not self.obtain(item, count, path):
                    return False
            if all(self._have(item) >= count for item, count in inputs.items()):
                return self._step(action).startswith("Crafted")
        return False


def play(env: gym.Env, task_id: int, max_steps: int) -> OracleResult:
    """Play task ``task_id`` with at most ``max_steps`` steps (and the env's own limit)."""
    obs, info = env.reset(options={"task_id": task_id})
    goal = _item_id(_GOAL.search(obs).group(1))
    oracle = Oracle(env, info["valid_actions"], max_steps)
    try:
        oracle.obtain(goal, 1)
    except _OutOfSteps:
        pass
    if oracle.done:
        return OracleResult(success=True, score=1.0, steps=oracle.steps)
    # A failure that ran out of steps used the whole budget (backtracking may have rolled
    # the counter back); one that found no way to the goal stopped where it stood.
    steps = min(max_steps, env.unwrapped.max_steps) if oracle.ran_out else oracle.steps
    return OracleResult(success=False, score=0.0, steps=steps)
