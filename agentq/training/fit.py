"""One training phase: wrap the policy with a fresh LoRA adapter, fit, save, merge.

Merging the adapter into the weights after each iteration makes "the model
with the adapter disabled" equal the policy at the start of the next
iteration, which is exactly Algorithm 1's pi_ref <- pi_i (DESIGN §5). Only the
adapter is written to disk; the policy of iteration i is the base model plus
the adapters of iterations 1..i-1, merged in order.
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

from agentq.data.pairs import StepPair
from agentq.training.data import PairCollator, PairDataset
from agentq.training.module import PreferenceModule


def fit_preferences(
    model: nn.Module,
    tokenizer,
    pairs: Sequence[StepPair],
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
    """Train a fresh adapter on ``pairs``; resume from ``out_dir/checkpoints/last.ckpt``
    when a killed run left one. Returns the (unmerged) peft model and the
    last epoch's mean metrics; the adapter is saved to ``out_dir/adapter``."""
    if batch_size < 1:
        raise ValueError(f"trainer.batch_size must be >= 1, got {batch_size}")
    torch.manual_seed(seed)  # LoRA A init
    peft_model = get_peft_model(model, lora)
    if gradient_checkpointing and shared_prefix:
        raise ValueError(
            "trainer.shared_prefix needs the prompt's KV cache, which gradient checkpointing "
            "turns off: set trainer.gradient_checkpointing=false or trainer.shared_prefix=false"
        )
    if gradient_checkpointing:  # activations of long prompts dominate memory: recompute them
        peft_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        peft_model.enable_input_require_grads()
    peft_model.train()
    module = PreferenceModule(
        peft_model, objective, optimizer, use_logged_reference=use_logged_reference, shared_prefix=shared_prefix
    )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    loader = DataLoader(
        PairDataset(pairs, tokenizer, max_prompt_tokens),
        batch_size=batch_size,
        shuffle=True,
        collate_fn=PairCollator(pad_id),
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


def save_adapter(peft_model: PeftModel, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    peft_model.save_pretrained(str(tmp))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def merge_adapter(model: nn.Module, adapter_dir: Path) -> nn.Module:
    """The base model with a saved adapter merged into its weights."""
    return PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
