"""One training phase: wrap the policy with a fresh LoRA adapter, fit, save, merge.

Merging the adapter into the weights after each iteration makes "the model
with the adapter disabled" equal the policy at the start of the next
iteration, which is exactly Algorithm 1's pi_ref <- pi_i (docs/method.md §5). Only the
adapter is written to disk; the policy of iteration i is the base model plus
the adapters of iterations 1..i-1, merged in order.

:func:`fit` trains on any one kind of example: step pairs or trajectory pairs
with a preference objective, SFT examples with an SFT objective.

Data-parallel training (``trainer=ddp_cpu``: ``strategy: ddp_spawn``). The loop
collects and evaluates in the main process and only ``trainer.fit`` is
distributed, so the strategy must start its workers for ``fit`` alone: a
``_MultiProcessingLauncher`` (``ddp_spawn``) does, and Lightning loads rank 0's
weights back into the main process's module when they join (so the adapter
saved here and the model the loop merges are the trained ones). ``ddp_fork``
starts in under a second instead of ~13 s, but a forked worker hangs once this
process has run multi-threaded (OpenMP) ops, so it is refused unless torch runs
one thread. ``strategy: ddp`` re-executes ``sys.argv`` for every other rank,
which would rerun the whole Hydra job: refused (ranks started by ``torchrun``
pass, but then every rank runs the whole loop). Sharded strategies (FSDP) are
refused: see conf/trainer/fsdp_gpu.yaml. Under a spawning strategy:

- each rank draws ``batch_size`` examples per step (the loader gives each rank
  its share of an epoch as a ``DistributedSampler`` would): the effective batch is
  ``devices x batch_size``, and an epoch is ``ceil(N / devices / batch_size)`` steps;
- the module (peft model, objective, optimiser factory) and the data loader are
  pickled into the workers: the optimiser factory must be picklable (Hydra's
  ``_partial_`` is, a lambda is not), and gradient checkpointing is switched on
  in the worker (``AdapterModule.setup``); rank 0 sends the whole module state
  back through a temporary file (about 540 MB for SmolLM2-135M in fp32);
- the per-step metrics live in the workers: :class:`StepHistory` combines them
  over ranks (:meth:`AdapterModule.history_over_ranks`: mean, or sum for token
  counts) and rank 0 writes them to ``out_dir/train_steps.json``, which is where
  the returned metrics come from (for one process too); the main process's loggers
  receive them after ``fit`` (the workers log nothing themselves, so two processes
  never write one logger's files);
- ``last.ckpt`` (adapter only) is written by rank 0 and read by every rank on
  resume (the steps before the restart then count with rank 0's metrics only).

Resuming. A run killed mid-training and restarted trains exactly the adapter an
uninterrupted run trains (tests/test_resume.py compares them), because
``last.ckpt`` holds, besides the adapter, the optimiser's and any LR scheduler's
state and Lightning's loop counters, and:

- the order of the examples in an epoch depends only on ``(seed, epoch)``
  (:class:`~agentq.training.data.EpochSampler`), and the loader's position in its
  epoch is saved with the checkpoint and restored
  (:class:`~agentq.training.data.ResumableLoader`): the resumed epoch continues
  with the batches not trained on yet, in the same order. (A plain shuffling
  ``DataLoader`` restarted the epoch with a fresh permutation, and Lightning
  warned that the loader is not resumable.)
- every training micro-batch reseeds the global RNGs from ``(seed, epoch, batch,
  rank)`` (:class:`SeedEachBatch`), so LoRA dropout draws the same masks for the
  same batch whatever the process drew before;
- checkpoints are written only right after an optimiser step
  (``every_n_train_steps`` counts optimiser steps), never with the gradients of
  some micro-batches accumulated but not applied; the accumulation windows restart
  with every epoch, and the restored loop counters put the resumed micro-batches in
  the same windows.

The steps between the last checkpoint and the kill are trained again (same
batches, same dropout), so they are lost time, not a different result. A
checkpoint from another world size, batch size, seed or number of examples is
refused rather than resumed inexactly.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
import numpy as np
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.strategies import FSDPStrategy
from lightning.pytorch.strategies.launchers import (
    _MultiProcessingLauncher,
    _SubprocessScriptLauncher,
)
from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn

from agentq.models.loading import native_bf16, on_cpu
from agentq.objectives.base import PreferenceLogps, SequenceLogps
from agentq.records.examples import PREFERENCE, common_kind
from agentq.training.data import (
    Example,
    ExampleDataset,
    ResumableLoader,
    collate_preferences,
    collate_sft,
    derive_seed,
)
from agentq.training.module import AdapterModule, PreferenceModule, SFTModule


class Pipeline(NamedTuple):
    """What an objective trains with: the LightningModule that computes its input, and the collator."""

    module: type[AdapterModule]
    collate: Callable[[list[Any]], Any]


# By the objective's kind, i.e. by the input its forward declares (agentq.objectives.base).
PIPELINES = {
    PreferenceLogps.kind: Pipeline(PreferenceModule, collate_preferences),
    SequenceLogps.kind: Pipeline(SFTModule, collate_sft),
}


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
    on_batch: Callable[[int], None] | None = None,
) -> tuple[PeftModel, dict[str, float]]:
    """Train a fresh adapter on ``examples`` (all StepPair, all TrajectoryPair or
    all SFTExample, matching ``objective.kind``); resume from
    ``out_dir/checkpoints/last.ckpt`` when a killed run left one. Returns the
    (unmerged) peft model and the last epoch's mean metrics; the adapter is
    saved to ``out_dir/adapter``.

    ``batch_size`` is examples per optimiser step; segments are scored
    ``2 * batch_size`` rows per forward pass (the rows of a batch of step
    pairs), so a batch of trajectories takes several passes. ``shared_prefix``
    applies to step pairs: each search node's pairs are batched together and its
    history is scored once for all of them. ``use_logged_reference`` applies to
    preference objectives. ``lightning["precision"]`` may be ``auto``
    (:func:`resolve_precision`): bf16 autocast where the hardware computes bf16.
    ``on_batch(n)`` hears of the micro-batches trained in this process as they end
    (:class:`CountBatches`), not those a killed attempt trained before a resume.
    """
    if batch_size < 1:
        raise ValueError(f"trainer.batch_size must be >= 1, got {batch_size}")
    kind = check_compatible(examples, objective)
    check_shared_prefix(kind, gradient_checkpointing=gradient_checkpointing, shared_prefix=shared_prefix)
    lightning = resolve_precision(lightning, logged_reference=use_logged_reference)
    # The ResumableLoader splits the data over ranks itself: Lightning must not swap its
    # sampler for a DistributedSampler (whose position it cannot checkpoint).
    lightning = with_strategy(lightning) | {"use_distributed_sampler": False}
    check_strategy(lightning.get("strategy"))
    dataset = ExampleDataset(examples, tokenizer, max_prompt_tokens)
    checkpoints = out_dir / "checkpoints"
    history = out_dir / STEP_HISTORY
    history.unlink(missing_ok=True)
    trainer = L.Trainer(
        **lightning,
        logger=list(loggers) if loggers else False,
        callbacks=[
            # every_n_train_steps counts optimiser steps and saves right after one: never
            # with gradients accumulated over some micro-batches but not applied yet.
            ModelCheckpoint(dirpath=checkpoints, save_last=True, every_n_train_steps=checkpoint_every_n_steps),
            SeedEachBatch(seed),
            StepHistory(history),
            CloseProcessGroup(),
        ],
        default_root_dir=str(out_dir),
        enable_model_summary=False,
    )
    in_workers = trains_in_workers(trainer)
    if in_workers:
        trainer.loggers = []  # logged from here after fit (see the module docstring)
    elif on_batch is not None:
        trainer.callbacks.append(CountBatches(on_batch))
    module = adapter_module(
        model, lora, kind, objective, optimizer, seed=seed, rows_per_forward=2 * batch_size,
        gradient_checkpointing=gradient_checkpointing, use_logged_reference=use_logged_reference,
        shared_prefix=shared_prefix,
    )
    peft_model: PeftModel = module.model
    # The order of an epoch depends on (seed, epoch) only, and the loader's position is
    # checkpointed: see "Resuming" in the module docstring. With a shared prefix a search
    # node's pairs come in the same batches, so its history runs once for all of them.
    groups = dataset.prompt_groups() if shared_prefix and kind == PREFERENCE else None
    loader = ResumableLoader(
        dataset, batch_size=batch_size, collate_fn=PIPELINES[kind].collate, seed=seed, groups=groups
    )
    last = checkpoints / "last.ckpt"
    with worker_seed(seed) if in_workers else contextlib.nullcontext():
        trainer.fit(module, loader, ckpt_path=str(last) if last.exists() else None)
    take_history(module, history, loggers=loggers if in_workers else ())
    if in_workers and on_batch is not None:  # a worker's callbacks run in its own process
        on_batch(len(module.history))  # the whole phase's, resumed steps included
    save_adapter(peft_model, out_dir / "adapter")
    shutil.rmtree(checkpoints, ignore_errors=True)  # the adapter is the durable result
    peft_model.eval()
    return peft_model, module.last_epoch_metrics()


def adapter_module(
    model: nn.Module,
    lora: LoraConfig,
    kind: str,
    objective: nn.Module,
    optimizer: Callable[..., torch.optim.Optimizer],
    *,
    seed: int,
    rows_per_forward: int,
    gradient_checkpointing: bool,
    use_logged_reference: bool,
    shared_prefix: bool,
) -> AdapterModule:
    """A fresh LoRA adapter on ``model`` (its A matrices drawn from ``seed``), in
    training mode, inside the LightningModule of ``kind``; ``.model`` is the peft model."""
    torch.manual_seed(seed)  # LoRA A init
    peft_model = get_peft_model(model, lora)
    peft_model.train()
    options = {"use_logged_reference": use_logged_reference, "shared_prefix": shared_prefix} if kind == PREFERENCE else {}
    return PIPELINES[kind].module(
        peft_model, objective, optimizer, rows_per_forward=rows_per_forward,
        gradient_checkpointing=gradient_checkpointing, **options
    )


def take_history(module: AdapterModule, path: Path, *, loggers: Sequence[Any] | bool) -> None:
    """Rank 0's per-step record at ``path`` becomes ``module.history`` (the main
    process's module has not seen the workers' steps) and goes to ``loggers``
    (pass them only when the workers trained: they log nothing themselves)."""
    if path.exists():
        module.history = json.loads(path.read_text())["history"]
    if loggers:
        log_history(loggers, module.history)

# Rank 0's per-step metrics (combined over ranks) and the world size, in fit's out_dir.
STEP_HISTORY = "train_steps.json"


class SeedEachBatch(Callback):
    """Seed torch (every device), NumPy and Python's ``random`` before each training
    micro-batch from ``(seed, epoch, batch index, rank)``: LoRA dropout, and whatever
    else a step draws, depends only on which batch it is, not on what the process
    drew before. So a resumed run draws what the uninterrupted run drew at the same
    batch without restoring RNG states from the checkpoint, which would not be
    enough: a restarted process creates the data loader's iterator (one draw from
    the global generator) at another point than an uninterrupted one does."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        seed = derive_seed(self.seed, 1, trainer.current_epoch, batch_idx, trainer.global_rank)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)


class CountBatches(Callback):
    """Calls ``on_batch(1)`` as each training micro-batch ends in this process: a phase's
    progress line then counts what this attempt trained (a resumed fit's restored history
    ran in the killed one), and a fit stopped midway still reports how far it got."""

    def __init__(self, on_batch: Callable[[int], None]) -> None:
        self.on_batch = on_batch

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self.on_batch(1)


class StepHistory(Callback):
    """At the end of training, write the per-step metrics combined over ranks (and
    the world size) to ``path`` from rank 0: the only way they reach the main
    process when the ranks are spawned workers."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_end(self, trainer: L.Trainer, pl_module: AdapterModule) -> None:
        history = pl_module.history_over_ranks()  # a collective: every rank calls it
        if trainer.is_global_zero:
            record = {"world_size": trainer.world_size, "history": history}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(record))
            tmp.replace(self.path)


class CloseProcessGroup(Callback):
    """Each rank leaves the process group together and destroys it once fit is over.

    A spawned worker that exits with its gloo group still open can abort at
    interpreter exit ("terminate called without an active exception", SIGABRT),
    when the other rank has already gone: seen once in a full CI run of
    tests/test_strategies.py. Nothing after ``teardown`` needs the group (the
    launcher only reads rank 0's state dict)."""

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()


def with_strategy(lightning: Mapping[str, Any]) -> dict[str, Any]:
    """``lightning`` with a ``strategy`` given as a config (``_target_``) instantiated:
    strategies with options (FSDP's wrap policy) are objects, not names."""
    kwargs = dict(lightning)
    strategy = kwargs.get("strategy")
    if isinstance(strategy, Mapping) and "_target_" in strategy:
        kwargs["strategy"] = instantiate(strategy, _convert_="all")
    return kwargs


BF16 = ("bf16-mixed", "bf16-true", "bf16")  # Lightning's bf16 precisions


def resolve_precision(lightning: Mapping[str, Any], *, logged_reference: bool) -> dict[str, Any]:
    """``lightning`` (the Trainer arguments) with ``precision: auto`` made concrete:
    ``bf16-mixed`` where the accelerator computes bf16 natively (:func:`native_bf16`)
    and the reference is the trainer's own forward, else ``32-true``. An explicit
    bf16 precision is refused on a CPU without native bf16 (autocast would emulate
    it, slower than fp32) and with a logged reference.

    ``bf16-mixed`` is Lightning's ``torch.autocast(device, bfloat16)`` around the
    training step, over fp32 weights: the LoRA parameters, their gradients and
    Adam states, the saved adapter and the weights it is merged into stay fp32.
    A logged reference was computed at sampling time in the engine's precision,
    while the policy's log-probs would carry bf16 rounding (up to ~0.5 nats over
    a 40-token action on SmolLM2-135M): Δ would start off zero by that noise.
    """
    if not isinstance(lightning, Mapping):
        return lightning  # validation.check_lightning says what is wrong with it
    kwargs = dict(lightning)
    precision = str(kwargs.get("precision", "32-true"))
    key = f"trainer.lightning.precision={precision}"
    accelerator = kwargs.get("accelerator", "auto")
    if precision == "auto":
        bf16 = native_bf16(accelerator) and not logged_reference
        kwargs["precision"] = "bf16-mixed" if bf16 else "32-true"
    elif precision in BF16 and logged_reference:
        raise ValueError(
            f"{key} scores the policy in bf16 while trainer.use_logged_reference=true takes pi_ref from "
            "the log-probs logged at sampling: set trainer.use_logged_reference=false (the reference then "
            "runs in the same precision as the policy) or trainer.lightning.precision=32-true"
        )
    elif precision in BF16 and on_cpu(accelerator) and not native_bf16("cpu"):
        raise ValueError(
            f"{key}: this CPU has no native bf16 (neither AVX512-BF16 nor AMX), so autocast would emulate "
            "it, slower than fp32: use trainer.lightning.precision=auto or 32-true"
        )
    return kwargs




def check_strategy(strategy: Any) -> None:
    """Refuse sharded strategies: fit saves, merges and evaluates the adapter in the
    process that called it, which needs all of the weights, and FSDP leaves each
    rank a shard (conf/trainer/fsdp_gpu.yaml says what is missing)."""
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    if isinstance(strategy, FSDPStrategy) or name.lower().startswith(("fsdp", "deepspeed")):
        raise ValueError(
            f"trainer.lightning.strategy: {name} shards the weights across ranks, which this loop "
            "cannot use yet (fit merges and evaluates the adapter in-process); use trainer=ddp_gpu "
            "or trainer=ddp_cpu"
        )


def trains_in_workers(trainer: L.Trainer) -> bool:
    """True when ``fit`` runs in worker processes that this process starts and
    joins (``ddp_spawn``, ``ddp_fork``); refuses a strategy that would re-execute
    the command line, i.e. the whole run, once per rank."""
    launcher = trainer.strategy.launcher
    if isinstance(launcher, _SubprocessScriptLauncher):
        name = type(trainer.strategy).__name__
        raise ValueError(
            f"trainer.lightning.strategy: {name} starts its other ranks by re-executing the command line, "
            "which would rerun the whole job (collection, evaluation) in each of them (docs/method.md §11). "
            "Use strategy ddp_spawn: trainer=ddp_cpu, or trainer=ddp_gpu"
        )
    if not isinstance(launcher, _MultiProcessingLauncher):
        return False
    if getattr(launcher, "_start_method", "spawn") == "fork" and torch.get_num_threads() > 1:
        raise ValueError(
            "trainer.lightning.strategy: forked workers hang once this process has used "
            f"{torch.get_num_threads()} OpenMP threads: use ddp_spawn (trainer=ddp_cpu), or threads=1"
        )
    return True


@contextlib.contextmanager
def worker_seed(seed: int) -> Iterator[None]:
    """Spawned workers inherit the environment: Lightning seeds each worker's RNGs
    from ``PL_GLOBAL_SEED`` when it starts (the training steps reseed per batch:
    :class:`SeedEachBatch`)."""
    before = os.environ.get("PL_GLOBAL_SEED")
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PL_GLOBAL_SEED", None)
        else:
            os.environ["PL_GLOBAL_SEED"] = before


def log_history(loggers: Sequence[Any], history: Sequence[dict[str, float]]) -> None:
    """Send per-step metrics to the loggers, as the module's ``self.log`` would have."""
    for step, row in enumerate(history):
        metrics = {f"train/{k}": v for k, v in row.items() if k != "epoch"} | {"epoch": row["epoch"]}
        for logger in loggers:
            logger.log_metrics(metrics, step=step)
    for logger in loggers:
        logger.save()


def check_compatible(examples: Sequence[Example], objective: nn.Module) -> str:
    """The examples' kind, after checking the objective trains on it (and has what it needs)."""
    kind = common_kind(examples, context="fit")
    wants = getattr(objective, "kind", None)
    if wants not in PIPELINES:
        raise TypeError(
            f"fit: objective {type(objective).__name__} declares kind={wants!r}; "
            f"an objective must set kind to one of {sorted(PIPELINES)} (an "
            "agentq.objectives.base.Objective takes it from the input its forward declares)"
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


def check_shared_prefix(kind: str, *, gradient_checkpointing: bool, shared_prefix: bool) -> None:
    """Batches of pairs reuse the prompt's KV cache with ``shared_prefix``, which checkpointing turns off."""
    if kind == PREFERENCE and gradient_checkpointing and shared_prefix:
        raise ValueError(
            "trainer.shared_prefix needs the prompt's KV cache, which gradient checkpointing "
            "turns off: set trainer.gradient_checkpointing=false or trainer.shared_prefix=false"
        )


def save_adapter(peft_model: PeftModel, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    peft_model.save_pretrained(str(tmp))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def merge_adapter(model: nn.Module, adapter_dir: Path) -> nn.Module:
    """The base model with a saved adapter merged into its weights."""
    return PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
