"""One training phase: wrap the policy with a fresh LoRA adapter, fit, save, merge.

Merging the adapter into the weights after each iteration makes "the model
with the adapter disabled" equal the policy at the start of the next
iteration, which is exactly Algorithm 1's pi_ref <- pi_i (DESIGN §5). Only the
adapter is written to disk; the policy of iteration i is the base model plus
the adapters of iterations 1..i-1, merged in order.

:func:`fit` trains on any one kind of example: step pairs or trajectory pairs
with a preference objective, SFT examples with an SFT objective.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn
from torch.utils.data import DataLoader

from agentq.training.data import (
    Example,
    ExampleDataset,
    collate_preferences,
    collate_sft,
    example_kind,
)
from agentq.training.module import AdapterModule, PreferenceModule, SFTModule

# What each kind of objective trains with: its LightningModule and its collator.
PIPELINES = {"preference": (PreferenceModule, collate_preferences), "sft": (SFTModule, collate_sft)}


def fit(
    model: nn.Module,
    tokenizer,
    examples: Sequence[Example],
    *,
    objective: nn.Module,
    optimizer: Callable[..., torch.optim.Optimizer],
    lora: LoraConfig,
    lightning: dict[str, Any],
    out_dir: Path,
    batch_size: int = 4,
    max_prompt_tokens: int = 2048,
    use_logged_reference: bool = False,
    checkpoint_every_n_steps: int = 10,
    gradient_checkpointing: bool = False,
    shared_prefix: bool = False,
    loggers: Sequence[Any] | bool = False,
    seed: int = 0,
) -> tuple[PeftModel, dict[str, float]]:
    """Train a fresh adapter on ``examples`` (all StepPair, all TrajectoryPair or
    all SFTExample, matching ``objective.kind``); resume from
    ``out_dir/checkpoints/last.ckpt`` when a killed run left one. Returns the
    (unmerged) peft model and the last epoch's mean metrics; the adapter is
    saved to ``out_dir/adapter``.

    ``batch_size`` is examples per optimiser step; segments are scored
    ``2 * batch_size`` rows per forward pass (the rows of a batch of step
    pairs), so a batch of trajectories takes several passes. ``shared_prefix``
    applies to batches of step pairs; ``use_logged_reference`` to preference
    objectives.
    """
    if batch_size < 1:
        raise ValueError(f"trainer.batch_size must be >= 1, got {batch_size}")
    kind = check_compatible(examples, objective)
    if kind == "preference" and gradient_checkpointing and shared_prefix:
        raise ValueError(
            "trainer.shared_prefix needs the prompt's KV cache, which gradient checkpointing "
            "turns off: set trainer.gradient_checkpointing=false or trainer.shared_prefix=false"
        )
    dataset = ExampleDataset(examples, tokenizer, max_prompt_tokens)
    torch.manual_seed(seed)  # LoRA A init
    peft_model = get_peft_model(model, lora)
    if gradient_checkpointing:  # activations of long prompts dominate memory: recompute them
        peft_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        peft_model.enable_input_require_grads()
    peft_model.train()
    module_cls, collate = PIPELINES[kind]
    options = {"use_logged_reference": use_logged_reference, "shared_prefix": shared_prefix} if kind == "preference" else {}
    module: AdapterModule = module_cls(
        peft_model, objective, optimizer, rows_per_forward=2 * batch_size, **options
    )
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        collate_fn=collate,
        generator=torch.Generator().manual_seed(seed),
    )
    checkpoints = out_dir / "checkpoints"
    trainer = L.Trainer(
        **lightning,
        logger=list(loggers) if loggers else False,
        callbacks=[
            ModelCheckpoint(dirpath=checkpoints, save_last=True, every_n_train_steps=checkpoint_every_n_steps)
        ],
        default_root_dir=str(out_dir),
        enable_model_summary=False,
    )
    last = checkpoints / "last.ckpt"
    trainer.fit(module, loader, ckpt_path=str(last) if last.exists() else None)
    save_adapter(peft_model, out_dir / "adapter")
    shutil.rmtree(checkpoints, ignore_errors=True)  # the adapter is the durable result
    if gradient_checkpointing:
        peft_model.gradient_checkpointing_disable()
    peft_model.eval()
    return peft_model, module.last_epoch_metrics()


# The step-pair entry point this module started with.
fit_preferences = fit


def check_compatible(examples: Sequence[Example], objective: nn.Module) -> str:
    """The examples' kind, after checking the objective trains on it (and has what it needs)."""
    kind = example_kind(examples)
    wants = getattr(objective, "kind", None)
    if wants not in PIPELINES:
        raise TypeError(
            f"fit: objective {type(objective).__name__} declares kind={wants!r}; "
            f"an objective must set kind to one of {sorted(PIPELINES)}"
        )
    if wants != kind:
        raise ValueError(
            f"fit: objective {type(objective).__name__} trains on {wants} examples but got "
            f"{len(examples)} {type(examples[0]).__name__} ({kind}); each objective config selects "
            "its example builder (conf/objective/*.yaml overrides /pairs)"
        )
    if getattr(objective, "needs_visits", False) and not all(
        getattr(e, "visits_chosen", None) is not None for e in examples
    ):
        raise ValueError("conservative_dpo needs MCTS visit counts: use pairs=step with search=mcts")
    return kind


def save_adapter(peft_model: PeftModel, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    peft_model.save_pretrained(str(tmp))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def merge_adapter(model: nn.Module, adapter_dir: Path) -> nn.Module:
    """The base model with a saved adapter merged into its weights."""
    return PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
