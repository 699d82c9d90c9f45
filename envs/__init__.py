"""Environments, one package each, registered with Gymnasium on import.

Each package also has a scripted oracle, ``envs.<name>.oracle.play(env,
task_id, max_steps) -> OracleResult``: it plays one task in a Gymnasium env
made from the config, within ``max_steps`` steps, using what the agent sees
(plus the task's own statement of the goal). :mod:`agentq.oracle` turns it
into the oracle row of every evaluation.
"""

import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

import gymnasium


class OracleResult(NamedTuple):
    """One oracle episode: success, the env's score in [0, 1], steps taken."""

    success: bool
    score: float
    steps: int


def register(env_id: str, entry_point: str) -> None:
    """Register ``env_id`` once; importing twice (a notebook reload) must not
    re-register, since gymnasium warns on overriding an id. The envs count their
    own steps (part of their snapshots), so no TimeLimit wrapper is added."""
    if env_id not in gymnasium.registry:
        gymnasium.register(id=env_id, entry_point=entry_point, max_episode_steps=None)


def choose_task(env: gymnasium.Env, options: dict[str, Any] | None, num_tasks: int, train: Sequence[int]) -> int:
    """The task ``reset`` plays: ``options["task_id"]`` (an int in ``[0, num_tasks)``),
    or else a train task drawn with the env's seeded ``np_random``."""
    if options is not None and options.get("task_id") is not None:
        task_id = operator.index(options["task_id"])
        if not 0 <= task_id < num_tasks:
            raise ValueError(f"task_id must be in [0, {num_tasks}), got {task_id}")
        return task_id
    return int(train[int(env.np_random.integers(len(train)))])
