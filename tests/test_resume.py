"""A run killed with SIGKILL at any phase resumes with ``resume=<run dir>``: nothing
finished is redone or lost, and deterministic results equal an uninterrupted run's."""

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentq.layout import RunLayout, read_json, write_json
from tests.conftest import ROOT, fit_tiny_dpo
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


def test_killed_during_collection_matches_an_uninterrupted_run(tmp_path):
    overrides = ["+experiment=smoke", "collect.num_tasks=3", "eval.base=false"]
    reference = tmp_path / "reference"
    args = _run_py(*overrides, f"hydra.run.dir={reference}")
    subprocess.run(args, cwd=ROOT, env=ENV, check=True, capture_output=True, timeout=900)

    run_dir = tmp_path / "run"
    collected = run_dir / "iter_001" / "collect"
    kill_when(run_dir, overrides, lambda: any(collected.glob("task_*.json")))
    first = snapshot(collected.glob("task_*.json"))
    assert 1 <= len(first) < 3, "the run was not killed during collection"

    check_summary(resume(run_dir, tmp_path / "log"), iterations=1, base=False)
    after = snapshot(collected.glob("task_*.json"))
    assert len(after) == 3
    for name, before in first.items():  # finished tasks were not collected again
        assert after[name] == before
    # Each tree is a function of the weights, seed, task and config, not of which
    # tasks the process searched before it: byte for byte the uninterrupted run's.
    uninterrupted = snapshot((reference / "iter_001" / "collect").glob("task_*.json"))
    assert {name: data for name, (data, _) in after.items()} == {
        name: data for name, (data, _) in uninterrupted.items()
    }


def test_killed_during_training_matches_an_uninterrupted_run(tmp_path):
    # Two epochs of two examples a batch, two batches an optimiser step, LoRA dropout:
    # killed just after the first checkpoint (step 1), i.e. early in epoch 0.
    overrides = [
        "+experiment=smoke", "collect.num_tasks=1", "eval.base=false", "eval.search=false", "eval.num_tasks=1",
        "trainer.batch_size=2", "trainer.checkpoint_every_n_steps=1", "trainer.lightning.max_epochs=2",
        "trainer.lightning.accumulate_grad_batches=2", "trainer.lora.lora_dropout=0.1",
    ]
    reference = tmp_path / "reference"
    args = _run_py(*overrides, f"hydra.run.dir={reference}")
    subprocess.run(args, cwd=ROOT, env=ENV, check=True, capture_output=True, timeout=900)

    run_dir = tmp_path / "run"
    checkpoint = run_dir / "iter_001" / "checkpoints" / "last.ckpt"
    kill_when(run_dir, overrides, checkpoint.exists)
    assert not (run_dir / "iter_001" / "train.json").exists(), "the run was not killed during training"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    done = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["completed"]
    num_examples = len((run_dir / "iter_001" / "examples.jsonl").read_text().splitlines())
    assert 0 < done < -(-num_examples // 2), "the last checkpoint is not inside an epoch"
    collected = snapshot((run_dir / "iter_001" / "collect").glob("task_*.json"))
    examples = (run_dir / "iter_001" / "examples.jsonl").read_bytes()
    # The killed run's summary counted its wall time up to its last phase, collection.
    killed = read_json(run_dir / "summary.json")
    collect_seconds = killed["iterations"][1]["seconds"]["collect"]
    assert killed["wall_seconds"] >= collect_seconds > 0

    summary = resume(run_dir, tmp_path / "log")
    check_summary(summary, iterations=1, modes=("zero_shot",), base=False)
    assert summary["wall_seconds"] > killed["wall_seconds"]  # the resumed run added to it
    assert snapshot((run_dir / "iter_001" / "collect").glob("task_*.json")) == collected
    assert (run_dir / "iter_001" / "examples.jsonl").read_bytes() == examples
    # Training continued from its checkpoint: the steps of both attempts make one full run ...
    assert summary["iterations"][1]["num_examples"] == num_examples
    assert summary["iterations"][1]["train"]["steps"] == 2 * -(-num_examples // 2)
    # ... which is the uninterrupted run, to the last bit of the adapter.
    ours, theirs = (load_file(d / "iter_001" / "adapter" / "adapter_model.safetensors") for d in (run_dir, reference))
    assert ours.keys() == theirs.keys()
    diff = max((ours[k] - theirs[k]).abs().max().item() for k in ours)
    assert diff <= 1e-6, f"the resumed adapter differs from the uninterrupted one by {diff:.3g}"
    assert summary["iterations"][1]["train"] == pytest.approx(
        json.loads((reference / "summary.json").read_text())["iterations"][1]["train"], abs=1e-6
    )


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


# --- fit: a kill mid-epoch resumes to exactly the uninterrupted run ------------------------


class Killed(Exception):
    """Stands in for SIGKILL inside the process: training stops at once, and only what
    the checkpoints hold survives (fit neither saves the adapter nor cleans up)."""


def _tiny_pairs(n: int, per_node: int = 1) -> list:
    """``n`` step pairs, ``per_node`` of them after each history."""
    from agentq.records.examples import StepPair

    return [
        StepPair(0, i, [{"role": "user", "content": f"Goal: craft {i // per_node} sticks."}],
                 f"COMMAND: get {i} planks", f"COMMAND: jump {i % 3}", [], [], -5.0, -6.0, 1.0, 0.0, 1, 1)
        for i in range(n)
    ]


def _fit_with_kill(
    out_dir: Path, monkeypatch, *, every_n_steps: int, kill_at: int | None = None, grouped: bool = False, on_batch=None
):
    """14 pairs, 2 a batch: 7 batches an epoch; two batches an optimiser step (the last
    batch of an epoch steps alone): 4 steps an epoch, 3 epochs; LoRA dropout 0.1.
    ``kill_at``: raise in the training step of that batch (counted over the whole run).
    ``grouped``: 3 pairs a history and a shared prefix, so batches follow the histories."""
    from agentq.models.loading import TinyRandomModel
    from agentq.training.module import PreferenceModule

    model, tokenizer = TinyRandomModel().load()
    train = dict(
        max_epochs=3, lora_dropout=0.1, lightning={"accelerator": "cpu", "accumulate_grad_batches": 2},
        checkpoint_every_n_steps=every_n_steps, seed=3, shared_prefix=grouped, on_batch=on_batch,
    )
    pairs = _tiny_pairs(14, per_node=3 if grouped else 1)
    if kill_at is None:
        return fit_tiny_dpo(model, tokenizer, pairs, out_dir, **train)
    calls = []
    step = PreferenceModule.training_step

    def dies(self, batch, batch_idx):
        calls.append(batch_idx)
        if len(calls) > kill_at:
            raise Killed
        return step(self, batch, batch_idx)

    with monkeypatch.context() as m:
        m.setattr(PreferenceModule, "training_step", dies)
        with pytest.raises(Killed):
            fit_tiny_dpo(model, tokenizer, pairs, out_dir, **train)
    return calls


def _adapter(out_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(out_dir / "adapter" / "adapter_model.safetensors")


@pytest.mark.parametrize(
    ("every_n_steps", "kill_at", "saved_at", "grouped"),
    [
        # Last checkpoint at step 6 (epoch 1, after its 4th batch); killed in epoch 1's 6th
        # batch, with the 5th batch's gradient accumulated and not yet applied.
        (3, 12, (1, 6), False),
        # Last checkpoint at step 4, after the last batch of epoch 0; killed in epoch 1's 3rd batch.
        (4, 9, (0, 4), False),
        # The first case with batches that follow the search nodes (a shared prefix).
        (3, 12, (1, 6), True),
    ],
    ids=["mid-accumulation", "after-epoch", "grouped"],
)
def test_fit_killed_mid_epoch_resumes_to_the_uninterrupted_adapter(
    tmp_path, monkeypatch, every_n_steps, kill_at, saved_at, grouped
):
    from agentq.training.fit import STEP_HISTORY

    reference = tmp_path / "reference"
    counted = {"reference": [], "killed": [], "resumed": []}  # what each attempt told on_batch
    _, ref_metrics = _fit_with_kill(
        reference, monkeypatch, every_n_steps=every_n_steps, grouped=grouped, on_batch=counted["reference"].append
    )

    run = tmp_path / "run"
    calls = _fit_with_kill(
        run, monkeypatch, every_n_steps=every_n_steps, kill_at=kill_at, grouped=grouped, on_batch=counted["killed"].append
    )
    assert len(calls) == kill_at + 1 and calls[-1] not in (0, 6), "the kill fell on an epoch boundary"
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert (checkpoint["epoch"], checkpoint["global_step"]) == saved_at
    # A new process's global RNGs are in another state: training must not depend on them.
    torch.manual_seed(1234)
    _, metrics = _fit_with_kill(
        run, monkeypatch, every_n_steps=every_n_steps, grouped=grouped, on_batch=counted["resumed"].append
    )
    # Each attempt's progress counts the micro-batches it trained: the killed one up to the
    # batch that raised, the resumed one all but those its checkpoint restored.
    restored = len(checkpoint["step_metrics"])
    assert 0 < restored < kill_at
    assert {k: sum(v) for k, v in counted.items()} == {"reference": 21, "killed": kill_at, "resumed": 21 - restored}

    ours, theirs = _adapter(run), _adapter(reference)
    assert ours.keys() == theirs.keys()
    diff = max((ours[k] - theirs[k]).abs().max().item() for k in ours)
    assert diff <= 1e-6, f"the resumed adapter differs from the uninterrupted one by {diff:.3g}"
    # Step by step the same run: the steps replayed after the checkpoint repeat the lost ones.
    history = json.loads((run / STEP_HISTORY).read_text())["history"]
    ref_history = json.loads((reference / STEP_HISTORY).read_text())["history"]
    assert len(history) == len(ref_history) == 21
    for row, ref in zip(history, ref_history, strict=True):
        assert row == pytest.approx(ref, abs=1e-6)
    assert metrics == pytest.approx(ref_metrics, abs=1e-6)


def test_epoch_order_depends_on_seed_and_epoch_only_and_the_loader_resumes_inside_an_epoch(monkeypatch):
    from agentq.training import data

    sampler = data.EpochSampler(10, seed=5)
    sampler.set_epoch(2)
    order = list(sampler)
    assert sorted(order) == list(range(10))
    fresh = data.EpochSampler(10, seed=5)
    fresh.set_epoch(2)  # without drawing epochs 0 and 1 first
    assert list(fresh) == order
    fresh.set_epoch(3)
    assert list(fresh) != order
    sampler.offset = 4  # skips once
    assert list(sampler) == order[4:] and list(sampler) == order

    # Data-parallel ranks split it as DistributedSampler does (padded from the start).
    shards = []
    for rank in range(3):
        monkeypatch.setattr(data, "data_parallel_rank", lambda rank=rank: (3, rank))
        ranked = data.EpochSampler(10, seed=5)
        ranked.set_epoch(2)
        assert len(ranked) == 4
        shards.append(list(ranked))
    monkeypatch.undo()
    assert shards == [(order + order[:2])[k::3] for k in range(3)]

    # The loader's state: its epoch and how many of its examples were handed out.
    loader = data.ResumableLoader(list(range(10)), batch_size=3, collate_fn=list, seed=5)
    loader.sampler.set_epoch(2)
    batches = iter(loader)
    assert [next(batches), next(batches)] == [order[0:3], order[3:6]]
    state = loader.state_dict()
    assert (state["epoch"], state["examples_done"]) == (2, 6)
    restarted = data.ResumableLoader(list(range(10)), batch_size=3, collate_fn=list, seed=5)
    restarted.load_state_dict(state)
    restarted.sampler.set_epoch(2)
    assert list(restarted) == [order[6:9], order[9:]]
    assert restarted.state_dict()["examples_done"] == 10
    restarted.sampler.set_epoch(3)  # the next epoch starts at its beginning
    assert sum(list(restarted), []) == list(fresh)
    with pytest.raises(ValueError, match="seed=5"):
        data.ResumableLoader(list(range(10)), batch_size=3, collate_fn=list, seed=6).load_state_dict(state)


def test_grouped_epochs_keep_each_group_together_resume_inside_it_and_split_ranks_in_blocks(monkeypatch):
    from agentq.training import data

    groups = [0, 1, 0, 2, 1, 0, 2, 2, 1, 0]  # three search nodes' pairs, interleaved
    sampler = data.EpochSampler(10, seed=5, groups=groups)
    sampler.set_epoch(2)
    order = list(sampler)
    assert sorted(order) == list(range(10))
    runs = [group for group, _ in itertools.groupby(groups[i] for i in order)]
    assert sorted(runs) == [0, 1, 2]  # each group's members one after another
    fresh = data.EpochSampler(10, seed=5, groups=groups)
    fresh.set_epoch(2)
    assert list(fresh) == order
    fresh.set_epoch(3)
    assert list(fresh) != order
    sampler.offset = 4
    assert list(sampler) == order[4:] and list(sampler) == order

    # Ranks take contiguous blocks of the padded order, so a group stays on one rank.
    shards = []
    for rank in range(3):
        monkeypatch.setattr(data, "data_parallel_rank", lambda rank=rank: (3, rank))
        ranked = data.EpochSampler(10, seed=5, groups=groups)
        ranked.set_epoch(2)
        assert len(ranked) == 4
        shards.append(list(ranked))
    monkeypatch.undo()
    padded = order + order[:2]
    assert shards == [padded[0:4], padded[4:8], padded[8:12]]

    # The loader resumes a grouped epoch like any other, and refuses an ungrouped checkpoint.
    loader = data.ResumableLoader(list(range(10)), batch_size=3, collate_fn=list, seed=5, groups=groups)
    loader.sampler.set_epoch(2)
    batches = iter(loader)
    assert next(batches) == order[0:3]
    state = loader.state_dict()
    restarted = data.ResumableLoader(list(range(10)), batch_size=3, collate_fn=list, seed=5, groups=groups)
    restarted.load_state_dict(state)
    restarted.sampler.set_epoch(2)
    assert sum(list(restarted), []) == order[3:]
    with pytest.raises(ValueError, match="grouped=True"):
        data.ResumableLoader(list(range(10)), batch_size=3, collate_fn=list, seed=5).load_state_dict(state)


def test_resuming_removes_only_the_files_a_killed_writer_left_half_written(tmp_path):
    layout = RunLayout(tmp_path)
    done = layout.collect(1) / "task_3.json"
    write_json(done, {"reward": 1.0})
    partial = layout.collect(1) / ".task_4.json.x1y2.tmp"  # as atomic_write_text names it while writing
    partial.write_text('{"rew')
    kept = tmp_path / "notes.tmp"  # not one of ours: no leading dot
    kept.write_text("mine")
    assert layout.remove_partial_writes() == 1
    assert not partial.exists() and read_json(done) == {"reward": 1.0} and kept.exists()


def test_a_resumed_run_keeps_the_killed_attempts_csv_metrics(tmp_path):
    from omegaconf import OmegaConf

    from agentq.bookkeeping import make_loggers

    cfg = OmegaConf.create({"logger": {"csv": {
        "_target_": "lightning.pytorch.loggers.CSVLogger", "save_dir": str(tmp_path), "name": "logs", "version": "",
    }}})  # fmt: skip

    def attempt(loss: float, resuming: bool) -> bool:
        """Log one loss; whether Lightning warned that earlier log files will be deleted."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (logger,) = make_loggers(cfg, resuming=resuming)
        logger.log_metrics({"train/loss": loss}, step=0)
        logger.save()
        return any("will be deleted" in str(w.message) for w in caught)

    attempt(0.7, resuming=False)
    assert not attempt(0.6, resuming=True)  # the warning would be false: nothing is deleted
    assert not attempt(0.5, resuming=True)
    logs = tmp_path / "logs"
    # Without the move, Lightning deletes the earlier file: only 0.5 would be left.
    assert "0.7" in (logs / "metrics.attempt-1.csv").read_text()
    assert "0.6" in (logs / "metrics.attempt-2.csv").read_text()
    assert "0.5" in (logs / "metrics.csv").read_text() and "0.6" not in (logs / "metrics.csv").read_text()
    assert attempt(0.4, resuming=False)  # a fresh run in the folder starts a fresh file, as Lightning does (and says)
    assert not (logs / "metrics.attempt-3.csv").exists()


def test_a_finished_run_extended_to_more_iterations_is_the_run_that_asked_for_them(tmp_path):
    overrides = ["+experiment=smoke", "collect.num_tasks=1", "eval.base=false", "eval.search=false", "eval.num_tasks=1"]
    reference = tmp_path / "reference"
    args = _run_py(*overrides, "iterations=2", f"hydra.run.dir={reference}")
    subprocess.run(args, cwd=ROOT, env=ENV, check=True, capture_output=True, timeout=900)
    run_dir = tmp_path / "run"
    subprocess.run(_run_py(*overrides, f"hydra.run.dir={run_dir}"), cwd=ROOT, env=ENV, check=True, capture_output=True, timeout=900)
    first = snapshot((run_dir / "iter_001" / "collect").glob("task_*.json"))
    logged = snapshot((run_dir / "logs").iterdir())
    # Extended in a copy of its folder: the copy logs into itself and the original is untouched.
    original, run_dir = run_dir, shutil.copytree(run_dir, tmp_path / "copy")

    done = subprocess.run(
        _run_py("+experiment=smoke", f"resume={run_dir}", "extend_to=2", f"hydra.run.dir={tmp_path / 'log'}"),
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert snapshot((original / "logs").iterdir()) == logged and not (original / "iter_002").exists()
    assert "iteration" in (run_dir / "logs" / "metrics.csv").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    check_summary(summary, iterations=2, modes=("zero_shot",), base=False)
    assert snapshot((run_dir / "iter_001" / "collect").glob("task_*.json")) == first  # iteration 1 was not redone
    assert "iterations: 2" in (run_dir / "config.yaml").read_text().splitlines()  # resume= alone now runs to 2
    # Iteration 2 searched with the replayed pi_1 and trained against it: the reference's.
    for name, (data, _) in snapshot((reference / "iter_002" / "collect").glob("task_*.json")).items():
        assert (run_dir / "iter_002" / "collect" / name).read_bytes() == data
    ours, theirs = (load_file(d / "iter_002" / "adapter" / "adapter_model.safetensors") for d in (run_dir, reference))
    assert ours.keys() == theirs.keys()
    assert max((ours[k] - theirs[k]).abs().max().item() for k in ours) <= 1e-6
