"""Collection and evaluation on Ray (``parallel=ray``, agentq/on_ray.py): a local
cluster of 2 actors searches the same trees and plays the same episodes as one
process, in both iterations (the second rebuilt from the adapter the first trained),
leaves no Ray process behind, and bad settings are refused before any model loads."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentq.components import build
from agentq.loop import run
from agentq.on_ray import RayPool, running, wait_for_exit
from tests.test_concurrency import records, same
from tests.test_loop import check_summary
from tests.test_resume import kill_when, resume, snapshot

BUDGETS = ["+experiment=smoke", "eval.base=false", "eval.num_tasks=1", "eval.search=false"]


def ray_processes() -> set[str]:
    """PIDs and command lines of Ray's own daemons and workers on this machine."""
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended while we looked
            continue
        if any(name in line for name in ("raylet", "gcs_server", "ray::", "default_worker.py")):
            found.add(f"{cmdline.parent.name} {line}")
    return found


@pytest.mark.slow
def test_two_ray_workers_search_and_evaluate_as_one_process_and_leave_no_process(make_cfg, tmp_path, monkeypatch):
    others = ray_processes()  # a cluster of the user's own is left alone
    phases, starts = [], []
    run_calls, start_actors = RayPool.run, RayPool.start_actors
    monkeypatch.setattr(RayPool, "run", lambda self, j, calls, **k: phases.append((calls[0][0], j)) or run_calls(self, j, calls, **k))

    def start(self, policy_iteration, count):
        if policy_iteration != self.policy_iteration:
            starts.append(policy_iteration)
        start_actors(self, policy_iteration, count)

    monkeypatch.setattr(RayPool, "start_actors", start)
    budgets = [
        *BUDGETS, "iterations=2", "collect.num_tasks=4", "eval.num_tasks=2",
        "eval.search=true", "eval.search_num_tasks=1", "eval.search_modes=[committed]",
    ]  # fmt: skip
    run(make_cfg(*budgets, f"paths.run_dir={tmp_path / 'local'}"))
    summary = run(make_cfg(*budgets, "parallel=ray", "parallel.workers=2", f"paths.run_dir={tmp_path / 'ray'}"))
    # Each phase went to Ray with its policy: pi_0 collects, pi_1 is evaluated and collects, pi_2 is evaluated.
    assert phases == [("search", 0), ("evaluate", 1), ("evaluate", 1), ("search", 1), ("evaluate", 2), ("evaluate", 2)]
    assert starts == [0, 1, 2]  # actors started once per policy, kept across its phases
    check_summary(summary, iterations=2, modes=("zero_shot", "committed"), base=False)
    for iteration in (1, 2):
        for folder, count in (("collect", 4), ("eval/zero_shot", 2), ("eval/committed", 1)):
            local = records(tmp_path / "local" / f"iter_{iteration:03d}" / folder)
            on_ray = records(tmp_path / "ray" / f"iter_{iteration:03d}" / folder)
            assert len(local) == count, folder
            assert same(local, on_ray) == [], folder  # floats to 1e-4: 1 torch thread per actor instead of 2
    assert (tmp_path / "ray" / "iter_001" / "adapter").exists()  # iteration 2's actors merged it
    assert ray_processes() <= others  # the local cluster stopped with the run


def test_stopping_waits_for_the_stopped_processes_to_end_and_counts_a_zombie_as_ended():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert running(child.pid)
        started = time.monotonic()
        wait_for_exit([child.pid], timeout=0.5)  # still alive: gives up after its timeout
        assert time.monotonic() - started >= 0.5
        child.kill()  # not yet reaped (no wait): a zombie, whose memory is already back
        started = time.monotonic()
        wait_for_exit([child.pid], timeout=30)
        assert time.monotonic() - started < 10
        assert not running(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not running(child.pid)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["parallel.workers=0"], "parallel.workers"),
        (["parallel.cpus_per_worker=half"], "parallel.cpus_per_worker"),
        (["parallel.gpus_per_worker=-1"], "parallel.gpus_per_worker"),
        (["collect.concurrency=2"], "collect.concurrency"),
        (["workers=2"], "leave workers at 1"),
        (["parallel.backend=slurm"], "parallel.backend"),
        (["eval.concurrency=2"], "eval.concurrency"),
        (["parallel.evaluate=yes"], "parallel.evaluate"),
    ],
)
def test_bad_ray_settings_are_refused_before_any_model_loads(make_cfg, overrides, named):
    with pytest.raises(ValueError, match=named):
        build(make_cfg("+experiment=smoke", "parallel=ray", *overrides))


@pytest.mark.slow
def test_a_killed_ray_collection_leaves_no_process_and_resumes_to_the_same_trees(make_cfg, tmp_path):
    budgets = [*BUDGETS, "collect.num_tasks=6"]
    others = ray_processes()
    run(make_cfg(*budgets, f"paths.run_dir={tmp_path / 'reference'}"))  # one process, uninterrupted

    run_dir = tmp_path / "run"
    collected = run_dir / "iter_001" / "collect"
    kill_when(run_dir, [*budgets, "parallel=ray"], lambda: any(collected.glob("task_*.json")))
    first = snapshot(collected.glob("task_*.json"))
    assert 1 <= len(first) < 6, "the run was not killed during collection"
    # The local cluster dies with its driver: raylet, GCS and actors at once; the node's
    # two agents notice about 60 s later (measured) and exit by themselves.
    deadline = time.monotonic() + 120
    while not ray_processes() <= others and time.monotonic() < deadline:
        time.sleep(1)
    assert ray_processes() <= others

    resume(run_dir, tmp_path / "log")
    after = snapshot(collected.glob("task_*.json"))
    for name, before in first.items():  # finished trees were not searched again
        assert after[name] == before
    assert same(records(collected), records(tmp_path / "reference" / "iter_001" / "collect")) == []
    assert ray_processes() <= others
