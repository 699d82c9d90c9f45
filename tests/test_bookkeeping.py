"""What a run records about itself: the peak memory figure's unit."""

from pathlib import Path

import numpy as np

from agentq.bookkeeping import peak_rss_gb


def status_gb(field: str) -> float:
    """A memory line of /proc/self/status (kB), in GB."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(f"{field}:"))
    return int(line.split()[1]) / 1e6


def test_peak_rss_is_the_kernels_high_water_mark_in_gigabytes():
    assert abs(peak_rss_gb() - status_gb("VmHWM")) < 0.02  # the same figure, in GB (not kB, not bytes)
    # A block that takes the process past its earlier peak raises the figure by the excess.
    excess = 0.2
    size = status_gb("VmHWM") - status_gb("VmRSS") + excess
    before = peak_rss_gb()
    block = np.ones(int(size * 1e9) // 8)  # every page written
    assert float(block[-1]) == 1.0
    assert peak_rss_gb() - before >= excess - 0.05
