"""Search and evaluate tasks side by side: in threads sharing one engine, or in
worker processes.

**Lanes (threads).** With a batching engine (``engine=hf_batched``, ``openvino``), N tasks run
at once in N threads, each with its own env, policy and critic (a *lane*):
their model calls wait in the one engine, which decodes them together. The
threads spend their time waiting for the engine (whose work runs outside the
GIL), so N lanes keep one engine busy at batch N. A task's result depends on
its own seed and the engine, never on its lane: ``hf_batched`` computes a
request alike whatever ran beside it (bitwise), ``openvino`` up to rounding,
which now and then changes a sampled token (tests/test_concurrency.py).

**Worker processes** (``workers``, HF engine only).

Decoding a small model on a CPU is bound by per-token overhead, not by the
cores: SmolLM2-135M decodes at ~70 ms/token with one thread or two, so two
single-thread processes do nearly twice the work of one two-thread process
(docs/scaling.md, "Parallel task workers"). Tasks are independent (each draws from its own seeded
generator, see ``evaluate.task_seed``) and each writes its own result file, so
workers need nothing but a shared counter: they are forked after the model is
loaded (copy-on-write, no second load), take the next unfinished task until
none is left, and die with the parent. The parent reads the files afterwards,
so a killed run resumes from whatever the workers finished.

Forking copies the environment object too, which is only sound for
environments that live in this process (WebShop, TextCraft): a JVM
(ScienceWorld) or browser (OpenTable) connection cannot be shared, so those
declare ``forkable = False`` and are refused (``components.make_env``).
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from agentq.console import phase


def for_each_task(
    fn: Callable[[Any], None] | Sequence[Callable[[Any], None]],
    task_ids: Sequence[Any],
    *,
    workers: int = 1,
    description: str,
    unit: str = "episodes",
) -> None:
    """Call ``fn(task_id)`` for every task: given a list of functions (one per lane),
    in that many threads; with ``workers > 1``, in that many forked processes.

    ``fn`` must leave its result on disk: nothing is returned from the workers.
    One progress bar (and one summary line with the rate in ``unit``/min) per call.
    Raises RuntimeError if a worker failed (the tasks others finished are kept).
    """
    if not callable(fn):
        lanes = list(fn)
        if len(lanes) > 1 and len(task_ids) > 1:
            if workers > 1:
                raise ValueError("for_each_task: lanes run in threads of one process; workers must be 1")
            return _in_lanes(lanes, task_ids, description=description, unit=unit)
        fn = lanes[0]
    workers = min(workers, len(task_ids))
    if workers <= 1:
        with phase(description, total=len(task_ids), unit=unit) as advance:
            for task_id in task_ids:
                fn(task_id)
                advance(1)
        return
    ctx = mp.get_context("fork")
    next_task, done = ctx.Value("i", 0), ctx.Value("i", 0)
    threads = max(1, torch.get_num_threads() // workers)
    processes = [
        ctx.Process(target=_work, args=(fn, task_ids, next_task, done, threads), name=f"{description} worker {i}")
        for i in range(workers)
    ]
    for p in processes:
        p.start()
    try:
        with phase(description, total=len(task_ids), unit=unit) as advance:
            shown = 0
            while shown < len(task_ids) and any(p.is_alive() for p in processes):
                time.sleep(0.5)
                now = done.value
                advance(now - shown)
                shown = now
            advance(done.value - shown)
    finally:
        for p in processes:  # on KeyboardInterrupt too: no orphan keeps writing
            if p.is_alive():
                p.terminate()
            p.join()
    failed = [p for p in processes if p.exitcode != 0]
    if failed:
        codes = ", ".join(f"{p.name}: exit {p.exitcode}" for p in failed)
        raise RuntimeError(
            f"{description}: {len(failed)} of {workers} workers failed ({codes}; traceback above). "
            "Finished tasks are on disk: resume the run to redo only the rest."
        )


def _in_lanes(lanes: Sequence[Callable[[Any], None]], task_ids: Sequence[Any], *, description: str, unit: str) -> None:
    """Each lane in a thread of its own takes the next task until none is left; the
    first failure stops the lanes after their current task and is raised here."""
    tasks = iter(task_ids)
    lock = threading.Lock()
    failures: list[BaseException] = []
    done = [0]

    def lane(fn: Callable[[Any], None]) -> None:
        while not failures:
            with lock:
                task_id = next(tasks, _NONE)
            if task_id is _NONE:
                return
            try:
                fn(task_id)
            except BaseException as e:  # noqa: BLE001  (raised again in the caller's thread)
                failures.append(e)
                return
            with lock:
                done[0] += 1

    threads = [
        threading.Thread(target=lane, args=(fn,), name=f"{description} lane {i}", daemon=True)
        for i, fn in enumerate(lanes[: len(task_ids)])
    ]
    for t in threads:
        t.start()
    with phase(description, total=len(task_ids), unit=unit) as advance:
        shown = 0
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=0.25)
            advance(done[0] - shown)
            shown = done[0]
        advance(done[0] - shown)
    if failures:
        raise RuntimeError(
            f"{description}: a task failed ({failures[0]!r}); finished tasks are on disk: resume the run "
            "to redo only the rest"
        ) from failures[0]


_NONE = object()


def _work(fn, task_ids, next_task, done, threads: int) -> None:
    _die_with_parent()
    torch.set_num_threads(threads)
    while True:
        with next_task.get_lock():
            index = next_task.value
            next_task.value += 1
        if index >= len(task_ids):
            return
        fn(task_ids[index])
        with done.get_lock():
            done.value += 1


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the parent dies (a killed run leaves no writer behind)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # not glibc: the parent's finally still stops workers on ordinary exits
        return
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
