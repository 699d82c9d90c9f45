"""A run killed with SIGKILL at any phase resumes with ``resume=<run dir>``: nothing
finished is redone or lost, and deterministic results equal an uninterrupted run's."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_loop import check_summary

pytestmark = pytest.mark.slow
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def _run_py(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "run.py"), *args]


def kill_when(run_dir: Path, overrides: list[str], ready: Callable[[], bool], timeout: float = 300) -> None:
    """Start a run and SIGKILL it as soon as ``ready()`` holds."""
    proc = subprocess.Popen(
        _run_py(*overrides, f"hydra.run.dir={run_dir}"), cwd=ROOT, env=ENV,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "the kill point was not reached in time"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def resume(run_dir: Path, log_dir: Path) -> dict:
    done = subprocess.run(
        _run_py("+experiment=smoke", f"resume={run_dir}", f"hydra.run.dir={log_dir}"),
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(run_dir.rglob("*.tmp")), "a half-written file was left behind"
    return json.loads((run_dir / "summary.json").read_text())


def snapshot(files) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def test_killed_during_collection(tmp_path):
    run_dir = tmp_path / "run"
    collected = run_dir / "iter_001" / "collect"
    kill_when(run_dir, ["+experiment=smoke", "collect.num_tasks=3"], lambda: any(collected.glob("task_*.json")))
    first = snapshot(collected.glob("task_*.json"))
    assert 1 <= len(first) < 3, "the run was not killed during collection"

    check_summary(resume(run_dir, tmp_path / "log"), iterations=1)
    after = snapshot(collected.glob("task_*.json"))
    assert len(after) == 3
    for name, before in first.items():  # finished tasks were not collected again
        assert after[name] == before


def test_killed_during_training(tmp_path):
    run_dir = tmp_path / "run"
    overrides = [
        "+experiment=smoke", "eval.base=false", "trainer.batch_size=1",
        "trainer.checkpoint_every_n_steps=1", "trainer.lightning.max_epochs=3",
    ]
    checkpoint = run_dir / "iter_001" / "checkpoints" / "last.ckpt"
    kill_when(run_dir, overrides, checkpoint.exists)
    assert not (run_dir / "iter_001" / "train.json").exists(), "the run was not killed during training"
    collected = snapshot((run_dir / "iter_001" / "collect").glob("task_*.json"))
    examples = (run_dir / "iter_001" / "examples.jsonl").read_bytes()

    summary = resume(run_dir, tmp_path / "log")
    check_summary(summary, iterations=1, base=False)
    assert snapshot((run_dir / "iter_001" / "collect").glob("task_*.json")) == collected
    assert (run_dir / "iter_001" / "examples.jsonl").read_bytes() == examples
    # Training continued from its checkpoint: the steps of both attempts make one full run.
    num_examples = summary["iterations"][1]["num_examples"]
    assert summary["iterations"][1]["train"]["steps"] == 3 * num_examples


def test_killed_during_evaluation_matches_an_uninterrupted_run(tmp_path):
    # Longer episodes than smoke's, so the kill can land between two tasks.
    overrides = ["+experiment=smoke", "eval.base=false", "eval.num_tasks=6", "eval.search=false"]
    overrides += ["eval.max_steps=5", "agent.sampling.max_new_tokens=32"]
    reference = tmp_path / "reference"
    args = _run_py(*overrides, f"hydra.run.dir={reference}")
    subprocess.run(args, cwd=ROOT, env=ENV, check=True, capture_output=True, timeout=900)

    run_dir = tmp_path / "run"
    evaluated = run_dir / "iter_001" / "eval" / "zero_shot"
    kill_when(run_dir, overrides, lambda: any(evaluated.glob("task_*.json")))
    first = snapshot(evaluated.glob("task_*.json"))
    assert 1 <= len(first) < 6, "the run was not killed during evaluation"

    resume(run_dir, tmp_path / "log")
    after = snapshot(evaluated.glob("task_*.json"))
    assert len(after) == 6 and all(after[name] == before for name, before in first.items())
    # Same seed, greedy evaluation of the same merged adapter: the same episodes.
    for name in after:
        ours = json.loads((evaluated / name).read_text())["trajectory"]
        theirs = json.loads((reference / "iter_001" / "eval" / "zero_shot" / name).read_text())["trajectory"]
        assert [s["action"] for s in ours["steps"]] == [s["action"] for s in theirs["steps"]]
        assert ours["success"] == theirs["success"] and ours["score"] == theirs["score"]
