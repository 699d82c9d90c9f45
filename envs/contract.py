"""What the agent side (``agentq``) needs from an environment, declared once.

Every env in ``envs/`` is a Gymnasium env with text observations and text
actions, plus the members of :class:`AgentEnv` on ``env.unwrapped``. agentq
reads them as follows (the agent side never imports an env package directly):

- ``task_ids(split)``: the loop's training and evaluation tasks
  (``agentq.loop``, ``agentq.oracle``, ``agentq.validation``).
- ``reset(options={"task_id": t})``: every episode, search root and replay
  starts a named task (``agentq.agent.episode.start``).
- ``info["success"]``, ``info["score"]``, ``info["valid_actions"]``: the
  outcome of every step and the commands the policy is grounded to
  (``agentq.agent.episode``); see :data:`INFO_KEYS`.
- ``forkable``: whether ``workers > 1`` may fork the env (``agentq.components.make_env``,
  ``agentq.parallel``).
- ``np_random``: written by ``agentq.bookkeeping.seed_everything``, drawn from by
  ``reset`` without a task id (:func:`choose_task`).
- ``snapshot()`` / ``restore(state)``, optional (:class:`SnapshotEnv`): search
  returns to a node by restore when both exist, else by ``reset`` and replay of
  the node's commands (``agentq.search.position``), so an env without them
  must replay deterministically: the same task and commands give the same
  observations and infos.

Each env package ``envs.<name>`` also has ``oracle.play(env, task_id,
max_steps) -> OracleResult``, a scripted solver (``agentq.oracle``).

The command reference in the agent's prompt is not an env member: it is the
``prompt`` key of ``conf/env/<name>.yaml`` (``agent.prompt.env_instructions``).

This module imports nothing from ``agentq``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from inspect import getattr_static
from typing import Any, ClassVar, NamedTuple, Protocol, TypeVar, runtime_checkable

import numpy as np
from gymnasium import spaces

# Split names ``task_ids`` may be asked for. Every env has "train" (what reset
# draws from, and what the loop collects on) and "test"; "dev" is optional.
SPLITS = ("train", "dev", "test")
REQUIRED_SPLITS = ("train", "test")

# ``info`` keys of every ``reset`` and ``step``.
INFO_SUCCESS = "success"  # bool: the task is solved (the episode's binary outcome)
INFO_SCORE = "score"  # float in [0, 1]: the env's score of the episode so far (WebShop's reward)
INFO_VALID_ACTIONS = "valid_actions"  # list[str]: the commands the policy is grounded to
INFO_KEYS = (INFO_SUCCESS, INFO_SCORE, INFO_VALID_ACTIONS)
# Optional: how far towards the goal the episode got, for an env whose 1/0 outcome says
# little while the policy never succeeds (OpenTable): an int index into the env's
# ``milestones`` names, the furthest reached so far. Evaluation reports it.
INFO_MILESTONE = "milestone"

# A task id: an int (TextCraft, WebShop, OpenTable) or a str (ScienceWorld,
# "boil:3"). It must survive a JSON round trip unchanged (run directories store it).
TaskId = Hashable
T = TypeVar("T")


@runtime_checkable
class AgentEnv(Protocol):
    """The members agentq uses on ``env.unwrapped`` (see the module docstring).

    ``isinstance(env.unwrapped, AgentEnv)`` checks that they exist (on Python
    3.11 this evaluates properties such as ``np_random``, which makes gymnasium
    draw its generator early, from the same entropy it would use later);
    :func:`check_contract` checks them without side effects, and their kinds.
    """

    forkable: ClassVar[bool]
    """True when all of the env's state lives in this process, so ``workers > 1``
    may fork it; False when it holds a connection to another process (a JVM, a
    browser) that forked workers cannot share."""

    np_random: np.random.Generator
    """Gymnasium's generator; agentq assigns a seeded one before collecting, and
    ``reset`` without a task id draws its train task from it."""

    observation_space: spaces.Text
    """Observations are ``str``, each a complete description of the state (the
    agent's history keeps only the current observation)."""

    action_space: spaces.Text
    """Actions are ``str`` commands; any string is accepted and uses a step (text
    that is no valid command gets feedback saying so)."""

    def task_ids(self, split: str) -> Sequence[TaskId]:
        """The task ids of ``split`` (one of :data:`SPLITS`), in a fixed order
        whose prefixes are what evaluation takes (``eval.num_tasks``). Raises
        ValueError for a split the env does not have."""
        ...

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start ``options["task_id"]`` (any id the env has, not only listed ones;
        ValueError for an unknown id), or without one a train task drawn with
        ``np_random`` (:func:`choose_task`). ``info`` has :data:`INFO_KEYS`."""
        ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One command. ``info`` has :data:`INFO_KEYS`; the env counts its own steps
        (``max_steps``, truncation), and stepping after the end changes nothing."""
        ...

    def close(self) -> None:
        """Release what the env holds (a JVM, a browser); idempotent."""
        ...


@runtime_checkable
class SnapshotEnv(AgentEnv, Protocol):
    """An :class:`AgentEnv` whose whole state can be saved and restored (search
    restores instead of replaying)."""

    def snapshot(self) -> Any:
        """The env's full state (task, step count, flags included), immutable or a
        private copy: one snapshot may be restored any number of times."""
        ...

    def restore(self, state: Any) -> None:
        """Return to ``state`` (from :meth:`snapshot` of this env); later steps
        behave exactly as they would have from it."""
        ...


class OracleResult(NamedTuple):
    """One oracle episode: success, the env's score in [0, 1], steps taken, and the
    furthest milestone reached for an env that names them (``INFO_MILESTONE``)."""

    success: bool
    score: float
    steps: int
    milestone: int | None = None


# ``envs.<name>.oracle.play(env, task_id, max_steps)``: the scripted solver of a
# task, using what the agent sees (plus the task's own statement of the goal).
OraclePlay = Callable[[Any, TaskId, int], OracleResult]


class ContractError(TypeError):
    """An env lacks a member of :class:`AgentEnv`, or has one of the wrong kind."""


# What each member must be, named in errors; "method" members must be callable.
MEMBERS: Mapping[str, str] = {
    "forkable": "class attribute, bool: True when forked worker processes may share the env",
    "np_random": "attribute, numpy.random.Generator: gymnasium's env generator (settable)",
    "observation_space": "attribute, gymnasium.spaces.Text: observations are str",
    "action_space": "attribute, gymnasium.spaces.Text: actions are str",
    "task_ids": "method task_ids(split: str) -> list of task ids of 'train', 'test' (and maybe 'dev')",
    "reset": "method reset(*, seed=None, options={'task_id': ...}) -> (str, info)",
    "step": "method step(action: str) -> (str, reward, terminated, truncated, info)",
    "close": "method close() -> None",
}
SNAPSHOT_MEMBERS: Mapping[str, str] = {
    "snapshot": "method snapshot() -> state, restorable any number of times; optional, with restore",
    "restore": "method restore(state) -> None; optional, with snapshot",
}
_METHODS = frozenset({"task_ids", "reset", "step", "close", "snapshot", "restore"})
_MISSING = object()


def check_contract(env: Any) -> None:
    """Raise :class:`ContractError` naming every member of :class:`AgentEnv` that
    ``env.unwrapped`` (or ``env`` itself, if it has no ``unwrapped``) lacks or has
    of the wrong kind; ``snapshot`` and ``restore`` are optional but go together.

    Static: it calls nothing on the env (no JVM or browser starts, no generator is drawn).
    """
    base = getattr(env, "unwrapped", env)
    members = dict(MEMBERS)
    if any(getattr_static(base, name, _MISSING) is not _MISSING for name in SNAPSHOT_MEMBERS):
        members.update(SNAPSHOT_MEMBERS)  # optional, but both or neither
    problems = [p for name, what in members.items() if (p := _problem(base, name, what))]
    if problems:
        raise ContractError(
            f"{type(base).__name__} does not follow the agent-env contract (envs.contract.AgentEnv): "
            + "; ".join(problems)
        )


def can_snapshot(env: Any) -> bool:
    """Whether ``env.unwrapped`` has ``snapshot`` and ``restore`` (:class:`SnapshotEnv`)."""
    base = getattr(env, "unwrapped", env)
    return all(callable(getattr_static(base, name, None)) for name in SNAPSHOT_MEMBERS)


def _problem(base: Any, name: str, what: str) -> str | None:
    """What is wrong with member ``name`` of ``base`` (None when nothing is)."""
    value = getattr_static(base, name, _MISSING)
    if value is _MISSING:
        return f"missing {name} ({what})"
    if name in _METHODS:
        return None if callable(value) else f"{name} is not a method ({what})"
    if name == "forkable":
        declared = getattr_static(type(base), name, _MISSING)
        return None if isinstance(declared, bool) else f"forkable must be a bool class attribute ({what})"
    if name in ("observation_space", "action_space"):
        return None if isinstance(value, spaces.Text) else f"{name} is {type(value).__name__} ({what})"
    return None


def check_info(info: Mapping[str, Any]) -> None:
    """Raise :class:`ContractError` unless ``info`` (from ``reset`` or ``step``) has
    :data:`INFO_KEYS` with the right kinds."""
    problems = [f"missing {key!r}" for key in INFO_KEYS if key not in info]
    if INFO_SUCCESS in info and not isinstance(info[INFO_SUCCESS], (bool, np.bool_)):
        problems.append(f"{INFO_SUCCESS!r} must be a bool, got {info[INFO_SUCCESS]!r}")
    score = info.get(INFO_SCORE)
    if INFO_SCORE in info and not (isinstance(score, (int, float)) and 0.0 <= score <= 1.0):
        problems.append(f"{INFO_SCORE!r} must be a number in [0, 1], got {score!r}")
    valid = info.get(INFO_VALID_ACTIONS)
    if INFO_VALID_ACTIONS in info and not (
        isinstance(valid, (list, tuple)) and all(isinstance(a, str) for a in valid)
    ):
        problems.append(f"{INFO_VALID_ACTIONS!r} must be a list of str, got {type(valid).__name__}")
    if problems:
        raise ContractError("info does not follow the agent-env contract: " + "; ".join(problems))


def choose_task(env: Any, options: Mapping[str, Any] | None, parse: Callable[[Any], T]) -> T:
    """The task ``reset`` plays: ``options["task_id"]`` when given and not None,
    or else a task of ``env.task_ids("train")`` drawn with the env's seeded
    ``np_random`` (one ``integers(len(train))`` draw). Either goes through
    ``parse``, which returns the env's own form of the id and raises ValueError
    (or TypeError) for an id the env does not have; see :func:`task_index`."""
    if options is not None and options.get("task_id") is not None:
        return parse(options["task_id"])
    train = env.task_ids("train")
    return parse(train[int(env.np_random.integers(len(train)))])


def task_index(num_tasks: int) -> Callable[[Any], int]:
    """``parse`` for :func:`choose_task` when the task ids are ``0 .. num_tasks - 1``:
    any integer (``operator.index``: no str, no float) in that range."""

    def parse(task_id: Any) -> int:
        task_id = operator.index(task_id)
        if not 0 <= task_id < num_tasks:
            raise ValueError(f"task_id must be in [0, {num_tasks}), got {task_id}")
        return task_id

    return parse


__all__ = [
    "INFO_KEYS",
    "INFO_SCORE",
    "INFO_SUCCESS",
    "INFO_VALID_ACTIONS",
    "MEMBERS",
    "REQUIRED_SPLITS",
    "SNAPSHOT_MEMBERS",
    "SPLITS",
    "AgentEnv",
    "ContractError",
    "OraclePlay",
    "OracleResult",
    "SnapshotEnv",
    "TaskId",
    "can_snapshot",
    "check_contract",
    "check_info",
    "choose_task",
    "task_index",
]
