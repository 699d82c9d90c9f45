"""What a run records about itself: the memory figures' unit, and what a phase leaves behind."""

import gc
from pathlib import Path

import numpy as np

from agentq.bookkeeping import peak_rss_gb, release_memory, rss_gb


def status_gb(field: str) -> float:
    """A memory line of /proc/self/status, in GB (the kernel's "kB" there are KiB)."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(f"{field}:"))
    return int(line.split()[1]) * 1024 / 1e9


def test_memory_figures_are_the_kernels_in_gigabytes():
    # Past 1 GB resident, KiB read as kB (2.4 % low) is further off than the rounding to 0.01.
    block = np.ones(int(max(0.0, 1.1 - status_gb("VmRSS")) * 1e9) // 8 + 1)  # every page written
    assert abs(rss_gb() - status_gb("VmRSS")) < 0.01
    assert abs(peak_rss_gb() - status_gb("VmHWM")) < 0.01  # the high-water mark, not bytes
    assert float(block[-1]) == 1.0


def test_peak_rss_rises_by_what_takes_the_process_past_its_peak():
    excess = 0.2
    size = status_gb("VmHWM") - status_gb("VmRSS") + excess
    before = peak_rss_gb()
    block = np.ones(int(size * 1e9) // 8)  # every page written
    assert float(block[-1]) == 1.0
    assert peak_rss_gb() - before >= excess - 0.05


class Node:
    """One end of a reference cycle, as Lightning's trainer and module make."""


def test_release_memory_frees_what_a_phase_left_in_reference_cycles():
    enabled = gc.isenabled()
    gc.disable()  # else the collector may run on its own between the lines below
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a
        a.block = np.ones(int(0.4e9) // 8)  # 0.4 GB, every page written
        del a, b  # unreachable, but the cycle keeps the block alive until a collection
        held = rss_gb()
        release_memory()
        assert held - rss_gb() >= 0.35
    finally:
        if enabled:
            gc.enable()
