"""Giving back a thread's OpenMP team, so idle teams do not slow the thread that computes.

torch's CPU wheels run their parallel regions on GNU OpenMP (libgomp), which keeps a
team of worker threads for every thread that has started a parallel region, for as
long as that thread lives. When the process holds more such workers than the
machine has cores, libgomp cuts how long idle workers spin before they sleep, and
every parallel region of the busy thread then waits on futex wake-ups. A thread
that hands its compute to another (a search handing its model calls to the
engine's thread, the main thread once training is over) gives its team back first:
a decode step ran 1.28x as long beside another thread's idle team as alone, and
0.96x once that thread had given it back (``benchmarks/bench_idle_thread.py``,
docs/results.md).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path

import torch  # loads the libgomp this module looks for

_OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: free the threads, keep nothing else to restore


@functools.cache
def _pause_all() -> Callable[[int], int] | None:
    """libgomp's ``omp_pause_resource_all``, from the copy torch loaded; None where torch
    does not run on libgomp (LLVM's and Intel's runtimes pause the whole runtime, not
    the caller's team, so they are left alone)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux
        return None
    paths = {line.split()[-1] for line in maps.splitlines() if "/libgomp" in line}
    if not paths:
        return None
    torch_dir = str(Path(torch.__file__).parent)  # also the prefix of pip wheels' torch.libs/
    path = min(paths, key=lambda p: (not p.startswith(torch_dir), p))  # torch's own copy first
    pause = ctypes.CDLL(path).omp_pause_resource_all
    pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
    return pause


def release_openmp_team() -> bool:
    """End the calling thread's OpenMP worker threads; its next parallel region makes
    them again (about 80 us more than a parallel op on a kept team, AMD EPYC). libgomp's ``omp_pause_resource_all`` frees the
    caller's pool only, so other threads' teams, the engine's among them, keep theirs.

    Returns whether a libgomp runtime took the request (False: nothing to give back
    here, e.g. not Linux, or called inside a parallel region).
    """
    pause = _pause_all()
    return pause is not None and pause(_OMP_PAUSE_SOFT) == 0
