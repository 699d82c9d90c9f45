"""What a run records about itself: the memory figures' unit, what a phase leaves behind, the
machine each start ran on, and which saved config a resumed run runs."""

import gc
import json
import os
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from agentq.bookkeeping import (
    cpu_model,
    locate,
    peak_rss_gb,
    record_run_info,
    release_memory,
    rss_gb,
)
from agentq.layout import RunLayout
from agentq.models.loading import native_bf16


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


def test_each_start_of_a_run_names_the_machine_it_ran_on(tmp_path):
    import torch

    layout = RunLayout(tmp_path)
    record_run_info(layout, seed=3)
    record_run_info(layout, seed=3)  # a resume adds a start: it may be on another machine
    starts = json.loads(layout.run_info.read_text())["starts"]
    assert len(starts) == 2
    machine = starts[-1]["machine"]
    assert machine["cores"] == os.cpu_count()
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert native_bf16("cpu") == (machine["avx512_bf16"] or machine["amx"])
    if Path("/proc/cpuinfo").exists():
        assert machine["cpu"] and machine["cpu"] in Path("/proc/cpuinfo").read_text()


def test_the_cpu_model_is_cpuinfos_model_name(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\nflags\t: avx512_bf16\n")
    assert cpu_model(cpuinfo) == "AMD EPYC 9R14"


def test_extend_to_needs_a_saved_run_and_at_least_its_iterations(tmp_path):
    (tmp_path / "config.yaml").write_text("iterations: 2\nseed: 0\n")
    fresh = OmegaConf.create({"resume": None, "extend_to": 3, "paths": {"run_dir": str(tmp_path)}})
    with pytest.raises(ValueError, match="extend_to=3 continues a saved run"):
        locate(fresh)
    with pytest.raises(ValueError, match=r"extend_to must be an integer >= 2, got 1"):
        locate(OmegaConf.create({"resume": str(tmp_path), "extend_to": 1}))
    cfg, layout, resuming = locate(OmegaConf.create({"resume": str(tmp_path), "extend_to": 3}))
    assert (cfg.iterations, layout.root, resuming) == (3, tmp_path, True)
    assert locate(OmegaConf.create({"resume": str(tmp_path), "extend_to": None}))[0].iterations == 2


def test_a_copied_run_folder_resumes_with_its_paths_in_the_copy(tmp_path):
    saved = {"paths": {"run_dir": "runs/a"}, "logger": {"csv": {"save_dir": "runs/a"}}, "iterations": 1}
    saved |= {"notes": ["runs/a/trees", "runs/ab", "elsewhere/runs/a"]}
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    cfg = locate(OmegaConf.create({"resume": str(tmp_path)}))[0]
    assert cfg.paths.run_dir == cfg.logger.csv.save_dir == str(tmp_path)
    assert list(cfg.notes) == [f"{tmp_path}/trees", "runs/ab", "elsewhere/runs/a"]  # only paths into the folder
