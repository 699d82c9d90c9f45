"""Scale-out presets: ddp_cpu (run here, two CPU processes), ddp_gpu and fsdp_gpu
(compose and build only: no GPU here)."""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from hydra.utils import instantiate
from lightning.pytorch.strategies import FSDPStrategy
from omegaconf import OmegaConf
from safetensors.torch import load_file
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from agentq import components, loop
from agentq.models import TinyRandomModel, completion_logprobs, pad_pairs
from agentq.objectives import DPOLoss, SFTLoss
from agentq.training.fit import (
    STEP_HISTORY,
    check_strategy,
    fit,
    merge_adapter,
    trains_in_workers,
    with_strategy,
)
from agentq.training.module import PreferenceModule, SFTModule
from tests.test_training import _lora, _sft_examples, _step_pairs


def _lightning(cfg) -> dict:
    return OmegaConf.to_container(cfg.trainer.lightning, resolve=True)


# --- presets compose and build --------------------------------------------------------------


def test_ddp_cpu_is_cpu_with_two_spawned_processes(make_cfg):
    ddp = make_cfg("+experiment=smoke", "trainer=ddp_cpu")
    cpu = make_cfg("+experiment=smoke")
    assert _lightning(ddp) == _lightning(cpu) | {"strategy": "ddp_spawn", "devices": 2}
    # Everything else (optimizer, LoRA, the smoke batch size) comes from cpu.yaml and the experiment.
    rest = {k: v for k, v in OmegaConf.to_container(ddp.trainer).items() if k != "lightning"}
    assert rest == {k: v for k, v in OmegaConf.to_container(cpu.trainer).items() if k != "lightning"}
    parts = components.build(ddp)
    parts.env.close()


def test_ddp_cpu_trains_in_spawned_workers_and_plain_ddp_is_refused(make_cfg):
    spawn = L.Trainer(**_lightning(make_cfg("trainer=ddp_cpu")), logger=False)
    assert spawn.world_size == 2 and trains_in_workers(spawn)
    assert not trains_in_workers(L.Trainer(**_lightning(make_cfg("trainer=cpu")), logger=False))
    # Plain ddp would re-execute `python run.py ...`, i.e. the whole run, for rank 1.
    rerun = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    with pytest.raises(ValueError, match="re-executing the command line"):
        trains_in_workers(rerun)


def test_gpu_presets_compose(make_cfg):
    ddp = _lightning(make_cfg("trainer=ddp_gpu"))
    assert ddp | {"accelerator": "gpu", "precision": "bf16-mixed"} == ddp
    assert ddp["strategy"] == "ddp_spawn" and ddp["devices"] == 2
    # An evaluation-only run never builds a Trainer: GPU presets build anywhere.
    parts = components.build(make_cfg("+experiment=smoke", "trainer=fsdp_gpu", "iterations=0"))
    parts.env.close()
    # A run that trains is refused in build, before the base evaluation and collection.
    with pytest.raises(ValueError, match="trainer.lightning.strategy: FSDPStrategy shards the weights"):
        components.build(make_cfg("+experiment=smoke", "trainer=fsdp_gpu"))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"trainer.lightning \(accelerator='gpu'"):
            components.build(make_cfg("+experiment=smoke", "trainer=ddp_gpu"))


def test_fsdp_strategy_builds_on_cpu_with_the_peft_wrap(make_cfg):
    lightning = with_strategy(_lightning(make_cfg("trainer=fsdp_gpu")))
    strategy = lightning["strategy"]
    assert isinstance(strategy, FSDPStrategy)
    assert lightning["accelerator"] == "gpu" and lightning["precision"] == "bf16-mixed"
    # Frozen base and trainable LoRA weights share each decoder layer's flat parameter.
    assert strategy.kwargs["use_orig_params"] is True
    policy = strategy.kwargs["auto_wrap_policy"]
    assert isinstance(policy, ModuleWrapPolicy) and policy._module_classes == {LlamaDecoderLayer}
    # Lightning itself refuses FSDP without a GPU, so it cannot be run here.
    with pytest.raises(ValueError, match="requires a GPU"):
        L.Trainer(**(lightning | {"accelerator": "cpu"}), logger=False)


def test_sharded_strategies_are_refused_before_any_model_work(make_cfg):
    lightning = _lightning(make_cfg("trainer=fsdp_gpu"))
    with pytest.raises(ValueError, match="shards the weights"):
        check_strategy(with_strategy(lightning)["strategy"])
    with pytest.raises(ValueError, match="shards the weights"):
        fit(
            None, None, _step_pairs(2), objective=DPOLoss(), optimizer=None, lora=None,
            lightning=lightning, out_dir=None,
        )
    check_strategy("ddp_spawn")
    check_strategy(None)


# --- metrics combined over ranks ------------------------------------------------------------


def test_history_over_ranks_averages_metrics_and_sums_token_counts():
    module = SFTModule(torch.nn.Linear(1, 1), SFTLoss(), torch.optim.SGD)
    module._trainer = SimpleNamespace(world_size=2)
    module.history = [{"epoch": 0, "loss": 1.0, "tokens": 10.0}, {"epoch": 1, "loss": 3.0, "tokens": 20.0}]
    other_rank = torch.tensor([[2.0, 30.0], [5.0, 40.0]], dtype=torch.float64)  # (R, M)

    def all_gather(t: torch.Tensor) -> torch.Tensor:  # rank 1 ran as many steps as rank 0
        return torch.stack([t, torch.tensor(2) if t.ndim == 0 else other_rank])

    module.all_gather = all_gather
    assert module.history_over_ranks() == [
        {"epoch": 0, "loss": 1.5, "tokens": 40.0},
        {"epoch": 1, "loss": 4.0, "tokens": 60.0},
    ]
    single = PreferenceModule(torch.nn.Linear(1, 1), DPOLoss(), torch.optim.SGD)
    single._trainer = SimpleNamespace(world_size=1)
    single.history = [{"epoch": 0, "loss": 0.7}]
    assert single.history_over_ranks() == single.history


# --- the smoke run on two CPU processes -----------------------------------------------------


@pytest.mark.slow
def test_ddp_cpu_smoke_run_trains_in_two_processes_and_evaluates_the_trained_weights(make_cfg, monkeypatch):
    cfg = make_cfg(
        "+experiment=smoke", "trainer=ddp_cpu", "eval.base=false", "eval.search=false",
        "trainer.optimizer.lr=1e-2", "trainer.lightning.enable_progress_bar=false",
    )
    evaluated = []
    evaluate = loop.evaluate_iteration

    def spy(parts, book, weights, *args, **kwargs):
        evaluated.append(weights.policy)
        return evaluate(parts, book, weights, *args, **kwargs)

    monkeypatch.setattr(loop, "evaluate_iteration", spy)
    summary = loop.run(cfg)
    folder = Path(cfg.paths.run_dir) / "iter_001"

    record = json.loads((folder / STEP_HISTORY).read_text())
    assert record["world_size"] == 2
    train, num_examples = summary["iterations"][1]["train"], summary["iterations"][1]["num_examples"]
    assert math.isfinite(train["loss"]) and train["loss"] > 0
    # Each rank takes its half of the examples, batch_size at a time.
    assert train["steps"] == len(record["history"]) == math.ceil(math.ceil(num_examples / 2) / cfg.trainer.batch_size)
    # The main process logged the workers' steps (they log nothing themselves).
    metrics_csv = (Path(cfg.paths.run_dir) / "logs" / "metrics.csv").read_text()
    assert "train/loss" in metrics_csv.splitlines()[0] and "eval/zero_shot/success_rate" in metrics_csv

    adapter = load_file(folder / "adapter" / "adapter_model.safetensors")
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and all(v.abs().max() > 0 for v in lora_b)  # rank 0's weights came back

    # The model evaluated after training is the base with the saved adapter merged.
    [model] = evaluated
    base, tokenizer = instantiate(cfg.model).load()
    prompt = tokenizer.encode("Goal: craft a stick.", add_special_tokens=False)
    completion = tokenizer.encode("COMMAND: get 2 planks", add_special_tokens=False)
    batch = pad_pairs([prompt], [completion], pad_id=tokenizer.pad_token_id)
    with torch.no_grad():
        before = completion_logprobs(base, *batch)
        merged = completion_logprobs(merge_adapter(base, folder / "adapter"), *batch)
        used = completion_logprobs(model, *batch)
    torch.testing.assert_close(used, merged, atol=1e-5, rtol=0)
    assert (used - before).abs().item() > 1e-3  # and training moved it


def test_forked_workers_are_refused_when_torch_runs_several_threads():
    threads = torch.get_num_threads()
    fork = L.Trainer(accelerator="cpu", devices=2, strategy="ddp_fork", logger=False)
    try:
        torch.set_num_threads(2)
        with pytest.raises(ValueError, match="forked workers hang"):
            trains_in_workers(fork)
        torch.set_num_threads(1)
        assert trains_in_workers(fork)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_spawned_sft_with_gradient_checkpointing_counts_every_ranks_tokens(tmp_path):
    """Gradient checkpointing is switched on inside the workers (its hook cannot be
    pickled), and token counts are summed over the ranks: the same total as one process."""
    results = {}
    for devices in (1, 2):
        model, tokenizer = TinyRandomModel().load()
        spawn = {"strategy": "ddp_spawn"} if devices > 1 else {}
        _, results[devices] = fit(
            model, tokenizer, _sft_examples(6), objective=SFTLoss(),
            optimizer=partial(torch.optim.AdamW, lr=1e-2), lora=_lora(),
            lightning={"accelerator": "cpu", "devices": devices, "max_epochs": 2, "enable_progress_bar": False, **spawn},
            out_dir=tmp_path / str(devices), batch_size=2, gradient_checkpointing=True,
        )
    assert json.loads((tmp_path / "2" / STEP_HISTORY).read_text())["world_size"] == 2
    assert results[1]["steps"] == 6 and results[2]["steps"] == 4  # 3 examples a rank: 2 steps an epoch
    assert results[2]["tokens"] == results[1]["tokens"] > 0
    assert math.isfinite(results[2]["loss"])
