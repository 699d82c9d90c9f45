"""The ScienceWorld simulator: one JVM, reached through the official package.

:class:`Simulator` is the package's ``ScienceWorldEnv`` (which launches the JVM
and connects to it with py4j) with three additions the Gymnasium env needs:

* ``close()`` is safe to call twice and on a JVM that has died: the package's
  own ``close()`` asks the dead gateway to shut down (py4j then logs
  connection tracebacks) and leaves the process unreaped.
* ``valid_actions()`` fetches the list in one round trip. Iterating the Java
  list, as the package does, costs one py4j call per action (thousands).
* ``variations(task)``: the package's train / dev / test variation split of a
  task.

It also starts the JVM with constant identity hash codes
(``-XX:hashCode=2``). The simulator keeps the objects of a room or container
in hash sets and gives them no ``hashCode`` of its own, so with the JVM's
default (random) identity hashes the order in which a room lists its objects,
and the numbering of an ambiguous command's readings, change from one load of
a variation to the next: ``find-non-living-thing:1`` looked different on each
of 6 loads. With a constant hash the order depends only on what happened in
the episode, which restoring a search node by reset and replay relies on. It
costs no measurable speed (the sets are small); the official benchmark's
worlds are the same, listed in one of the orders they could have had.

The Gymnasium env calls the package's Java interface (``self.server``)
directly rather than the package's ``step``, which would also compute the
valid actions, look and inventory on every step, and ends episodes by its own
step limit.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from py4j.protocol import Py4JError
from scienceworld import ScienceWorldEnv
from scienceworld.constants import ID2TASK
from scienceworld.utils import infer_task

# The package's 30 task names, in its task-id order (1-1 boil, ... 10-1 ...).
TASK_NAMES: tuple[str, ...] = tuple(infer_task(name) for name in ID2TASK.values())
SPLITS = ("train", "dev", "test")
# The package ends an episode after this many simulator moves; the env counts
# its own steps instead.
_NO_STEP_LIMIT = 2**31 - 1
_EXIT_TIMEOUT_S = 5.0
# ``hashCode`` is an experimental HotSpot flag (JDK 8 to 21 at least).
JAVA_OPTIONS = "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2"

# The package logs every load ("Loading: boil (variation: 3)") and py4j every
# callback server start at INFO: with search replaying from a reset, hundreds
# of lines per task. Quieted unless a level was configured for them.
for _name in ("scienceworld", "py4j"):
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(logging.WARNING)


class Simulator(ScienceWorldEnv):
    """One ScienceWorld JVM. Starting one takes about 1.5 s; always ``close()`` it."""

    def __init__(self) -> None:
        self._closed = False
        # The package launches the JVM itself, without a way to pass options.
        with _java_tool_options(JAVA_OPTIONS):
            super().__init__(envStepLimit=_NO_STEP_LIMIT)

    @property
    def pid(self) -> int:
        return self._gateway.java_process.pid

    def exit_code(self, wait: float = 0.0) -> int | None:
        """The JVM's exit code, None while it runs (waiting up to ``wait`` seconds)."""
        try:
            return self._gateway.java_process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            return None

    def valid_actions(self) -> list[str]:
        """The package's valid action-object combinations for the current state."""
        actions = self.server.getValidActionObjectCombinations()
        # Object names never contain a newline.
        joined = self._gateway.jvm.java.lang.String.join("\n", actions)
        return joined.split("\n") if joined else []

    def variations(self, task: str) -> dict[str, tuple[int, ...]]:
        """``{"train": ..., "dev": ..., "test": ...}`` variation indices of ``task``.

        Loads ``task``, which ends any running episode.
        """
        self.load(task, 0, "")
        return {
            "train": tuple(self.get_variations_train()),
            "dev": tuple(self.get_variations_dev()),
            "test": tuple(self.get_variations_test()),
        }

    def close(self) -> None:
        if self._closed or not hasattr(self, "_gateway"):  # closed, or never started
            return
        self._closed = True
        process: subprocess.Popen = self._gateway.java_process
        client = self._gateway._gateway_client
        if process.poll() is None:
            with suppress(Py4JError, OSError):
                self._gateway.shutdown()
                # The launcher exits on a line on its stdin (py4j issue 320).
                process.stdin.write(b"\n")
                process.stdin.flush()
            try:
                process.wait(timeout=_EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        else:  # nothing to ask the JVM; stop our side only
            self._gateway.shutdown_callback_server()
            client.close()
        # Java object proxies collected later would each try to reach the JVM
        # and, if it died, log a traceback; unconnected, they skip it.
        client.is_connected = False
        # stdout belongs to py4j's consumer thread, which ends at the JVM's exit.
        with suppress(OSError):  # a JVM that died unnoticed: the flush hits a broken pipe
            process.stdin.close()
        self._obj_tree_tempdir.cleanup()


_environ_lock = threading.Lock()


@contextmanager
def _java_tool_options(options: str) -> Iterator[None]:
    """Adds ``options`` to the options of JVMs launched inside the block."""
    with _environ_lock:  # two threads starting JVMs must not restore each other's value
        previous = os.environ.get("JAVA_TOOL_OPTIONS")
        os.environ["JAVA_TOOL_OPTIONS"] = f"{previous} {options}" if previous else options
        try:
            yield
        finally:
            if previous is None:
                del os.environ["JAVA_TOOL_OPTIONS"]
            else:
                os.environ["JAVA_TOOL_OPTIONS"] = previous
