"""The scripted oracle's commands on a task: the demonstrations of a behaviour-cloned base.

Each env package's ``oracle.play`` (:data:`envs.contract.OraclePlay`) reports only
its outcome; :func:`oracle_commands` also records the commands it sent, by
playing it through a wrapper that keeps every ``step``'s action. An oracle that
backtracks (TextCraft's) restores a snapshot taken through the wrappers, and the
recorder drops the commands the restore undid: what remains is the straight plan
the oracle ended with, which replays from the task's reset.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym

from envs.contract import OraclePlay, OracleResult, TaskId


class _Recorder(gym.Wrapper):
    """Passes everything through and keeps the commands of the current episode."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.commands: list[str] = []

    def reset(self, **kwargs: Any):
        self.commands = []
        return self.env.reset(**kwargs)

    def step(self, action: str):
        self.commands.append(action)
        return self.env.step(action)

    def snapshot(self) -> tuple[int, Any]:
        return len(self.commands), self.env.get_wrapper_attr("snapshot")()

    def restore(self, state: tuple[int, Any]) -> None:
        sent, inner = state
        del self.commands[sent:]
        self.env.get_wrapper_attr("restore")(inner)


def oracle_of(env: gym.Env) -> OraclePlay:
    """``play`` of the oracle module in the package of ``env``'s class (``envs.webshop.env`` ->
    ``envs.webshop.oracle``)."""
    package = type(env.unwrapped).__module__.rpartition(".")[0]
    return importlib.import_module(f"{package}.oracle").play


def oracle_commands(env: gym.Env, task_id: TaskId, max_steps: int) -> tuple[OracleResult, list[str]]:
    """The oracle's episode on ``task_id`` within ``max_steps`` and the commands it sent, in order."""
    recorder = _Recorder(env)
    result = oracle_of(env)(recorder, task_id, max_steps)
    return result, list(recorder.commands)
