"""ScienceWorld (Wang et al. 2022) as a Gymnasium environment for Agent Q.

The simulator is the official ``scienceworld`` package, a Scala program in a
JVM reached through py4j (:mod:`envs.scienceworld.simulator`). This module
adds what the package lacks and our search needs: spaces, task ids that name
a (task, variation) pair, the package's variation splits as task lists, a step
limit, a score in [0, 1], filtered valid actions, self-contained observations,
and recovery from a JVM that dies.

The package has no snapshot of the simulator state, so the env has no
``snapshot`` / ``restore``: search returns to a node by ``reset`` and replay of
the node's commands. Replay reproduces observations exactly only because the
JVM runs with constant identity hashes (see :mod:`envs.scienceworld.simulator`).
"""

from __future__ import annotations

import itertools
import logging
import re
import string
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import gymnasium as gym
from gymnasium import spaces
from py4j.protocol import Py4JError, Py4JJavaError

from envs.contract import choose_task
from envs.scienceworld.simulator import SPLITS, TASK_NAMES, Simulator

logger = logging.getLogger(__name__)

# Six short-horizon tasks from five of the ten task groups (2-1, 3-1, 4-1, 4-2,
# 6-2, 7-1): the gold paths of all their 331 test variations reach the goal in
# at most 28 steps. ``tasks=None`` selects all 30.
DEFAULT_TASKS: tuple[str, ...] = (
    "find-living-thing",
    "find-non-living-thing",
    "lifespan-longest-lived",
    "power-component",
    "chemistry-mix-paint-secondary-color",
    "use-thermometer",
)
# Sections of the observation are clipped to these lengths (the largest seen
# on the gold paths of variation 0 of all 30 tasks: room 1518, feedback 1453,
# inventory 445, task 461), so the whole fits OBSERVATION_MAX_LENGTH.
OBSERVATION_MAX_LENGTH = 8192
_TASK_MAX, _FEEDBACK_MAX, _ROOM_MAX, _INVENTORY_MAX = 1000, 2000, 4000, 1000
# A command is a verb and one or two object names; longer text is not sent to
# the parser.
ACTION_MAX_LENGTH = 512
_ELLIPSIS = "..."
# Text spaces default to alphanumerics; room descriptions use tabs and newlines.
_CHARSET = string.printable
# The package's own test for tasks that need wires (it refuses its
# ``noElectricalAction`` simplification for them).
_ELECTRICAL = ("power-component", "conductivity")
_ELECTRICAL_VERBS = frozenset({"connect", "disconnect"})
_NO_OBJECT_ACTIONS = frozenset({"look around", "inventory", "task", "wait", "wait1"})
_TWO_OBJECT_VERBS = frozenset({"connect", "dunk", "move", "pour", "use"})
_AMBIGUOUS = "Ambiguous request:"
_CHOICE = re.compile(r"^(\d+):\s*(.+?)\s*$")
_NOT_STARTED = "call reset() before step()"

T = TypeVar("T")
_split_cache: dict[str, dict[str, tuple[int, ...]]] = {}  # per task; a property of the jar


def task_id(task: str, variation: int) -> str:
    """The id of variation ``variation`` of ``task``: ``"boil:3"``."""
    return f"{task}:{variation}"


def parse_task_id(task_id: str) -> tuple[str, int]:
    """``"boil:3"`` -> ``("boil", 3)``; a ValueError names what is wrong."""
    if not isinstance(task_id, str):
        raise ValueError(f"task_id must be a str 'task-name:variation', got {task_id!r}")
    task, _, variation = task_id.rpartition(":")
    if task not in TASK_NAMES or not variation.isdigit():
        raise ValueError(
            f"task_id must be 'task-name:variation' with one of the {len(TASK_NAMES)} "
            f"ScienceWorld tasks {TASK_NAMES}, got {task_id!r}"
        )
    return task, int(variation)


class ScienceWorldEnv(gym.Env[str, str]):
    """A ScienceWorld task: an elementary-school science experiment in a text world.

    A task id ``"task-name:variation"`` (``"boil:3"``) names one of the 30
    tasks and one of its variations (which substance, which room, which
    animal...). :meth:`task_ids` lists the package's own train / dev / test
    variations of the configured tasks, interleaved task by task so that any
    prefix covers the tasks evenly (evaluation takes the first n).

    ## Action Space

    ``Text(max_length=512, charset=string.printable)``: one ScienceWorld
    command such as ``open door to kitchen``, ``go to kitchen``,
    ``pick up thermometer``, ``focus on red apple``,
    ``move banana to orange box``, ``use thermometer on water``,
    ``wait1``. Whitespace runs are sent as single spaces. Any string is
    accepted and uses a step: the simulator answers text it cannot parse with
    "No known action matches that input.", and text longer than 512 characters
    is not sent to it (the observation says so).

    A command that fits several objects gets the simulator's numbered list of
    readings; the next command is then the number, or one of the readings as
    written in ``info["valid_actions"]``, which the env turns into its number.

    ## Observation Space

    ``Text(max_length=8192, charset=string.printable)``, four blocks separated
    by blank lines::

        Task: Your task is to boil water. ...
        Last result: The door is now open.
        This room is called the kitchen. In it, you see: ...
        In your inventory, you see: ...

    The package returns only each command's feedback, leaving the history to
    the agent's prompt. Agent Q's history ``h_t`` keeps only the current
    observation, so each one repeats the task and adds the room (the free
    ``look around``) and the inventory. Feedback that repeats the room or the
    inventory is shown as ``(shown below)``. Each block is clipped and
    non-printable characters become ``"?"``, so every observation lies in the
    space.

    ## Rewards

    The change in the normalised score: the package's score (0 to 100, from the
    task's goal sequence) divided by 100, and 0 once it turns negative. An
    episode's rewards sum to its final ``info["score"]`` less the score at
    reset (0 except in a few tasks, e.g. 0.07 in ``power-component``).

    ## Episode End

    * Termination: the score reaches 100 (``info["success"]`` is True); the
      score turns negative (a wrong ``focus on``, or a task-specific mistake;
      the package's -100 is a failure); the simulator reports the task
      completed; or the JVM fails (``info["error"]`` says how).
    * Truncation: ``max_steps`` steps were taken without an end. The counter is
      the env's own (the package's move counter skips free actions), so the
      env is registered with ``max_episode_steps=None``.

    Stepping after the end changes nothing and returns the final flags.

    ## Information

    Every ``info`` has ``task_id`` (str), ``success`` (bool), ``score`` (float
    in [0, 1]), ``raw_score`` (int, the package's score, -100 to 100),
    ``valid_actions`` (list[str], empty once the episode has ended) and
    ``error`` (None, or why the simulator failed).

    ``valid_actions`` is the package's list of valid action-object
    combinations for the state, reduced to a usable size (in a kitchen 2,726
    become about 1,000): ``connect`` / ``disconnect`` pairs (two thirds of the
    list) only in the electrical tasks, no ``reset task`` (it erases the goal
    progress the score measures), exact duplicates removed; ordered commands
    without an object first, then those with one, then those with two, each in
    the package's order. The package names each object by one referent, while
    its parser also accepts others and aliases (``examine`` for ``look at``,
    ``drop`` for ``put down``): the list is a guide for grounding, not every
    command that works.

    ``reset(options={"task_id": ..., "gold_actions": True})`` adds
    ``info["gold_actions"]``, the package's gold action sequence for the task
    (slower: the simulator plays it to build it, up to ~8 s).

    ## Arguments

    * ``max_steps``: steps per episode before truncation (default 30).
    * ``tasks``: the task names :meth:`task_ids` lists (default
      :data:`DEFAULT_TASKS`; ``None``: all 30). ``reset`` accepts any task.

    ``reset(options={"task_id": "boil:3"})`` plays that variation; without it a
    train task id is drawn with ``self.np_random``.

    ## JVM

    Each env owns one JVM, started on first use (``reset`` or
    :meth:`task_ids`; about 1.5 s plus ~0.2 s per task to read its splits) and
    stopped by :meth:`close`, when the env is garbage-collected, and at
    interpreter exit. If it dies during a step, that episode ends as a failure
    with the reason in ``info["error"]`` and the next ``reset`` starts a new
    one; a failure during ``reset`` is retried once with a new JVM.
    """

    metadata = {"render_modes": []}
    forkable = False  # it talks to a JVM over py4j, which forked workers cannot share

    def __init__(self, max_steps: int = 30, tasks: Sequence[str] | None = DEFAULT_TASKS) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        tasks = TASK_NAMES if tasks is None else tuple(dict.fromkeys(tasks))
        unknown = [t for t in tasks if t not in TASK_NAMES]
        if unknown or not tasks:
            raise ValueError(f"tasks must be names from {TASK_NAMES}, got unknown {unknown or 'none'}")
        self.max_steps = max_steps
        self.tasks: tuple[str, ...] = tasks
        self.observation_space = spaces.Text(max_length=OBSERVATION_MAX_LENGTH, charset=_CHARSET)
        self.action_space = spaces.Text(max_length=ACTION_MAX_LENGTH, charset=_CHARSET)
        self._sim: Simulator | None = None
        self._stop_sim: weakref.finalize | None = None
        self._task_id: str | None = None
        self._electrical = False
        self._task = ""
        self._feedback = ""
        self._room = ""
        self._inventory = ""
        self._choices: dict[str, str] = {}  # reading of an ambiguous command -> its number
        self._valid_actions: tuple[str, ...] = ()
        self._raw_score = 0
        self._steps = 0
        self._terminated = False
        self._truncated = False
        self._error: str | None = None

    @property
    def jvm_pid(self) -> int | None:
        """The process id of this env's JVM, None when none is running."""
        return None if self._sim is None else self._sim.pid

    def task_ids(self, split: str) -> list[str]:
        """Task ids of the configured tasks in the package's ``"train"``,
        ``"dev"`` or ``"test"`` variations: each task's first variation in the
        split, then each task's second, and so on."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        per_task = [
            [task_id(task, v) for v in self._variations(task)[split]] for task in self.tasks
        ]
        return [i for row in itertools.zip_longest(*per_task) for i in row if i is not None]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        tid = choose_task(self, options, self._check_task_id)
        task, variation = parse_task_id(tid)
        gold = bool(options.get("gold_actions", False))

        def load(sim: Simulator) -> list[str] | None:
            sim.load(task, variation, "", generateGoldPath=gold)
            # As the package's reset: a first look refreshes the score (no move).
            feedback = sim.server.step("look around")
            self._read_state(sim, feedback)
            self._task = _strip_header(sim.server.freeActionTaskDesc())
            self._valid_actions = self._list_valid_actions(sim)
            return sim.get_gold_action_sequence() if gold else None

        self._task_id = tid
        self._electrical = any(word in task for word in _ELECTRICAL)
        self._steps = 0
        self._terminated = self._truncated = False
        self._error = None
        self._choices = {}
        gold_actions = self._with_simulator(load)
        self._feedback = "none"
        info = self._info()
        if gold_actions is not None:
            info["gold_actions"] = gold_actions
        return self._render(), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        if self._terminated or self._truncated:
            return self._render(), 0.0, self._terminated, self._truncated, self._info()
        if self._sim is None:
            raise RuntimeError(_NOT_STARTED)
        sim, raw_before = self._sim, max(self._raw_score, 0)
        self._steps += 1
        try:
            if len(action) > ACTION_MAX_LENGTH:  # not sent: the simulator's state is unchanged
                self._feedback = (
                    f"Nothing happened: that action is {len(action)} characters long; "
                    f"a command is at most {ACTION_MAX_LENGTH}."
                )
                completed = False
            else:
                command = " ".join(action.split())
                completed = self._read_state(sim, sim.server.step(self._choices.get(command, command)))
            self._terminated = completed or self._raw_score < 0 or self._raw_score >= 100
            self._truncated = not self._terminated and self._steps >= self.max_steps
            if self._terminated or self._truncated:
                self._valid_actions = ()
            elif len(action) <= ACTION_MAX_LENGTH:
                self._valid_actions = self._list_valid_actions(sim)
        except Py4JError as error:
            self._fail(error)
        return (
            self._render(),
            (max(self._raw_score, 0) - raw_before) / 100,
            self._terminated,
            self._truncated,
            self._info(),
        )

    @property
    def score(self) -> float:
        """The episode's score in [0, 1]: the package's score / 100, 0 when negative."""
        return max(self._raw_score, 0) / 100

    def close(self) -> None:
        if self._stop_sim is not None:
            self._stop_sim()  # runs Simulator.close once
        self._sim = self._stop_sim = None

    # -- the JVM ---------------------------------------------------------------
    def _simulator(self) -> Simulator:
        if self._sim is None:
            sim = Simulator()
            self._sim, self._stop_sim = sim, weakref.finalize(self, sim.close)
            logger.info("ScienceWorld JVM started (pid %d)", sim.pid)
        return self._sim

    def _with_simulator(self, call: Callable[[Simulator], T]) -> T:
        """``call(simulator)``; a JVM that fails is replaced and the call made again, once.

        Only for calls between episodes, where nothing is lost with the JVM.
        """
        try:
            return call(self._simulator())
        except Py4JError as error:
            logger.warning("ScienceWorld JVM failed (%s); starting a new one", _describe(error))
            self.close()
        try:
            return call(self._simulator())
        except Py4JError as error:
            self.close()
            raise RuntimeError(f"ScienceWorld failed twice in a row: {_describe(error)}") from error

    def _check_task_id(self, tid: Any) -> str:
        """``tid`` if it names a variation of a ScienceWorld task (any task, not only
        the configured ones), else ValueError."""
        task, variation = parse_task_id(tid)
        variations = self._variations(task)
        if not any(variation in variations[s] for s in SPLITS):
            count = sum(len(variations[s]) for s in SPLITS)
            raise ValueError(f"{task} has variations 0 .. {count - 1}, got task_id {tid!r}")
        return tid

    def _variations(self, task: str) -> dict[str, tuple[int, ...]]:
        if task not in _split_cache:
            # Loading a task ends an episode: read every configured task's
            # split at once, before the first episode.
            missing = [t for t in (*self.tasks, task) if t not in _split_cache]
            for t in dict.fromkeys(missing):
                _split_cache[t] = self._with_simulator(lambda sim, t=t: sim.variations(t))
        return _split_cache[task]

    def _fail(self, error: Py4JError) -> None:
        if isinstance(error, Py4JJavaError):  # an exception inside the simulator
            what = "the ScienceWorld simulator raised a Java exception"
        else:  # the connection broke: give a killed JVM a moment to be reaped
            code = None if self._sim is None else self._sim.exit_code(wait=1.0)
            what = (
                "lost the connection to the ScienceWorld JVM"
                if code is None
                else f"the ScienceWorld JVM exited with code {code}"
            )
        self._error = (
            f"{what} at step {self._steps} ({_describe(error)}); the episode ends as a "
            "failure and the next reset starts a new JVM"
        )
        logger.warning("%s: %s", self._task_id, self._error)
        self.close()
        self._feedback = "The simulator stopped; this episode has ended."
        self._choices = {}
        self._valid_actions = ()
        self._terminated, self._truncated = True, False

    # -- state -----------------------------------------------------------------
    def _read_state(self, sim: Simulator, feedback: str) -> bool:
        """Reads score, room and inventory after ``feedback``; returns the
        simulator's completed flag."""
        server = sim.server
        self._raw_score = int(round(100 * server.getScore()))  # as the package rounds it
        self._room = server.freeActionLook()
        self._inventory = server.freeActionInventory()
        self._feedback = feedback
        self._choices = _readings(feedback)
        return bool(server.getCompleted())

    def _list_valid_actions(self, sim: Simulator) -> tuple[str, ...]:
        if self._choices:
            return tuple(self._choices)
        kept = (
            a
            for a in sim.valid_actions()
            if a != "reset task"
            and (self._electrical or a.split(" ", 1)[0] not in _ELECTRICAL_VERBS)
        )
        return tuple(sorted(dict.fromkeys(kept), key=_object_count))

    def _info(self) -> dict[str, Any]:
        return {
            "task_id": self._task_id,
            "success": self._raw_score >= 100,
            "score": self.score,
            "raw_score": self._raw_score,
            "valid_actions": list(self._valid_actions),
            "error": self._error,
        }

    def _render(self) -> str:
        room, inventory = _clean(self._room), _clean(self._inventory)
        feedback = _clean(self._feedback)
        if feedback and feedback in (room, inventory):
            feedback = "(shown below)"
        return "\n\n".join(
            (
                f"Task: {_clip(_clean(self._task), _TASK_MAX)}",
                f"Last result: {_clip(feedback, _FEEDBACK_MAX)}",
                _clip(room, _ROOM_MAX),
                _clip(inventory, _INVENTORY_MAX),
            )
        )


def _readings(feedback: str) -> dict[str, str]:
    """The numbered readings of an ambiguous command, reading -> number."""
    if not feedback.startswith(_AMBIGUOUS):
        return {}
    readings: dict[str, str] = {}
    for line in feedback.splitlines()[1:]:
        match = _CHOICE.match(line)
        if match:
            readings.setdefault(match.group(2), match.group(1))
    return readings


def _object_count(action: str) -> int:
    if action in _NO_OBJECT_ACTIONS:
        return 0
    return 2 if action.split(" ", 1)[0] in _TWO_OBJECT_VERBS else 1


def _strip_header(task: str) -> str:
    return re.sub(r"^\s*task description:\s*", "", task, flags=re.IGNORECASE)


def _describe(error: Exception) -> str:
    first_line = str(error).strip().splitlines()[:1]
    return f"{type(error).__name__}: {first_line[0] if first_line else ''}"


def _clean(text: str) -> str:
    """Strips trailing spaces per line; non-printable characters become ``"?"``."""
    lines = "\n".join(line.rstrip() for line in text.strip().splitlines())
    return "".join(c if c in _CHARSET else "?" for c in lines)


def _clip(text: str, max_length: int) -> str:
    if len(text) <= max_length:
        return text
    return text[: max_length - len(_ELLIPSIS)] + _ELLIPSIS


__all__ = [
    "ACTION_MAX_LENGTH",
    "DEFAULT_TASKS",
    "OBSERVATION_MAX_LENGTH",
    "ScienceWorldEnv",
    "parse_task_id",
    "task_id",
]
