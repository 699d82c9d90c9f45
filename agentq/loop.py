"""The iterative loop of Agent Q (Algorithm 1, §5 of DESIGN.md)::

    iteration 0: evaluate the base policy
    for i in 1..N:
        pi_ref <- pi_i                        (the adapter of i-1 is merged)
        MCTS on B training tasks -> trees and trajectories in the buffer
        step pairs with theta
        optimise pi_i with the objective against pi_ref (fresh LoRA adapter)
        evaluate on held-out tasks: zero-shot and with search

Every phase writes its results before the next starts, so a run killed at any
point and started again with ``resume=<run dir>`` continues where it stopped:
collected tasks are skipped, training resumes from its last checkpoint,
evaluated tasks are skipped. ``summary.json`` is rebuilt from those files.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import random
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.progress import track

from agentq import evaluate as ev
from agentq.data.buffer import ReplayBuffer, read_json, write_json
from agentq.training.fit import fit_preferences, merge_adapter

log = logging.getLogger(__name__)


@dataclass
class Components:
    """Everything a run needs that can be built without loading weights."""

    model: Any  # a loader with .load() -> (model, tokenizer)
    env: gym.Env
    policy: partial  # (model, tokenizer) -> policy
    critic: partial  # (model, tokenizer) -> critic
    search: Any
    pair_builder: Any
    objective: torch.nn.Module


def build(cfg: DictConfig) -> Components:
    """Instantiate and validate every configured part; a bad value fails here,
    before any model loads, with a message naming its key."""
    for key in ("iterations", "collect.num_tasks", "eval.num_tasks"):
        value = OmegaConf.select(cfg, key)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} must be an integer >= 0, got {value!r}")
    search = instantiate(cfg.search)
    critic = instantiate(cfg.critic)
    max_candidates = getattr(critic.func, "MAX_CANDIDATES", None)
    if max_candidates is not None and cfg.search.num_actions > max_candidates:
        raise ValueError(
            f"search.num_actions={cfg.search.num_actions} exceeds what critic {cfg.critic._target_} "
            f"can rank ({max_candidates})"
        )
    _check_env_id(cfg.env.make.id)
    return Components(
        model=instantiate(cfg.model),
        env=instantiate(cfg.env.make),
        policy=instantiate(cfg.agent),
        critic=critic,
        search=search,
        pair_builder=instantiate(cfg.pairs),
        objective=instantiate(cfg.objective),
    )


def _check_env_id(env_id: str) -> None:
    """``module:name`` ids import their module first (that registers the env)."""
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        gym.spec(name)
    except (ImportError, gym.error.Error) as e:
        raise ValueError(f"env.make.id: unknown environment {env_id!r} ({e})") from e


def run(cfg: DictConfig) -> dict:
    """Run (or resume) the loop; returns the summary written to ``summary.json``."""
    if cfg.get("resume"):
        run_dir = Path(cfg.resume)
        cfg = OmegaConf.load(run_dir / "config.yaml")
        log.info("resuming %s", run_dir)
    else:
        run_dir = Path(cfg.paths.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    parts = build(cfg)
    seed_everything(cfg.seed)
    buffer = ReplayBuffer(run_dir)
    loggers = make_loggers(cfg, run_dir)
    started = time.monotonic()
    previous_wall = _previous_wall(run_dir)
    status = "failed"
    try:
        model, tokenizer = parts.model.load()
        env = parts.env
        train_ids = list(env.unwrapped.task_ids(cfg.collect.split))
        test_ids = list(env.unwrapped.task_ids(cfg.eval.split))[: cfg.eval.num_tasks]
        for iteration in range(cfg.iterations + 1):
            if iteration > 0:
                model = _improve(cfg, parts, model, tokenizer, buffer, iteration, train_ids, loggers)
            _evaluate(cfg, parts, model, tokenizer, buffer, iteration, test_ids, loggers)
            summary = write_summary(cfg, buffer, run_dir, previous_wall + time.monotonic() - started)
        status = "success"
        return summary
    finally:
        parts.env.close()
        for logger in loggers:
            logger.finalize(status)
        _finish_wandb(exit_code=0 if status == "success" else 1)


def _improve(cfg, parts: Components, model, tokenizer, buffer: ReplayBuffer, iteration, train_ids, loggers):
    """Collect, build pairs, train: returns pi_{i+1} (adapter merged)."""
    metrics_path = buffer.train_metrics_path(iteration)
    if metrics_path.exists():  # finished before a restart: replay its adapter
        adapter = buffer.adapter_dir(iteration)
        return merge_adapter(model, adapter) if adapter.exists() else model

    policy = parts.policy(model, tokenizer)
    critic = parts.critic(model, tokenizer)
    rng = np.random.default_rng([cfg.seed, iteration])
    count = min(cfg.collect.num_tasks, len(train_ids))
    tasks = [train_ids[i] for i in rng.choice(len(train_ids), size=count, replace=False)]
    model.eval()
    for task_id in track(tasks, description=f"collect (iter {iteration})", transient=True):
        if buffer.has_search(iteration, task_id):
            continue
        generator = torch.Generator().manual_seed(ev.task_seed(cfg.seed, iteration, task_id))
        with torch.no_grad():
            result = parts.search(parts.env, policy, critic, task_id=task_id, generator=generator)
        buffer.write_search(iteration, task_id, result)

    if not buffer.has_pairs(iteration):
        pairs = [p for r in buffer.searches(iteration) for p in parts.pair_builder(r.tree)]
        buffer.write_pairs(iteration, pairs)
    pairs = buffer.pairs(iteration)
    log.info("iteration %d: %d pairs from %d tasks", iteration, len(pairs), len(tasks))
    if not pairs:
        write_json(metrics_path, {"loss": None, "reward_accuracy": None, "skipped": "no pairs"})
        return model

    t = cfg.trainer
    peft_model, metrics = fit_preferences(
        model,
        tokenizer,
        pairs,
        objective=parts.objective,
        optimizer=instantiate(t.optimizer),
        lora=instantiate(t.lora, _convert_="all"),
        lightning=OmegaConf.to_container(t.lightning, resolve=True),
        out_dir=buffer.iteration_dir(iteration),
        batch_size=t.batch_size,
        max_prompt_tokens=t.max_prompt_tokens,
        use_logged_reference=t.use_logged_reference,
        checkpoint_every_n_steps=t.checkpoint_every_n_steps,
        gradient_checkpointing=t.gradient_checkpointing,
        shared_prefix=t.shared_prefix,
        loggers=loggers,
        seed=cfg.seed + iteration,
    )
    write_json(metrics_path, metrics)
    return peft_model.merge_and_unload()


def _evaluate(cfg, parts: Components, model, tokenizer, buffer, iteration, test_ids, loggers) -> None:
    model.eval()
    policy = parts.policy(model, tokenizer)
    modes = {}
    if cfg.eval.zero_shot:
        modes["zero_shot"] = ev.zero_shot(
            parts.env, policy, max_steps=cfg.eval.max_steps, dense_reward=cfg.search.dense_reward
        )
    if cfg.eval.search:
        search = parts.search
        if cfg.eval.get("num_simulations"):  # an inference budget of its own
            search = dataclasses.replace(search, num_simulations=cfg.eval.num_simulations)
        modes["search"] = ev.with_search(parts.env, policy, parts.critic(model, tokenizer), search)
    for mode, episode in modes.items():
        with torch.no_grad():
            metrics = ev.evaluate(episode, test_ids, buffer=buffer, iteration=iteration, mode=mode, seed=cfg.seed)
        write_json(buffer.iteration_dir(iteration) / "eval" / f"{mode}.json", metrics)
        for logger in loggers:
            logger.log_metrics({f"eval/{mode}/{k}": v for k, v in metrics.items()} | {"iteration": iteration}, step=iteration)
        log.info("iteration %d eval %s: %s", iteration, mode, metrics)


def write_summary(cfg, buffer: ReplayBuffer, run_dir: Path, wall_seconds: float) -> dict:
    """``summary.json`` from the files each phase wrote (so it survives restarts)."""
    iterations = []
    for iteration in range(cfg.iterations + 1):
        folder = buffer.iteration_dir(iteration)
        entry: dict[str, Any] = {"iteration": iteration, "eval": {}}
        for mode in ("zero_shot", "search"):
            path = folder / "eval" / f"{mode}.json"
            if path.exists():
                entry["eval"][mode] = read_json(path)
        if iteration > 0:
            entry["num_pairs"] = len(buffer.pairs(iteration)) if buffer.has_pairs(iteration) else 0
            train = buffer.train_metrics_path(iteration)
            entry["train"] = read_json(train) if train.exists() else None
        if entry["eval"] or iteration == 0 or folder.exists():
            iterations.append(entry)
    summary = {"iterations": iterations, "wall_seconds": round(wall_seconds, 1)}
    write_json(run_dir / "summary.json", summary)
    return summary


def _previous_wall(run_dir: Path) -> float:
    path = run_dir / "summary.json"
    return float(read_json(path).get("wall_seconds", 0.0)) if path.exists() else 0.0


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_loggers(cfg: DictConfig, run_dir: Path) -> list:
    """Lightning loggers from ``cfg.logger`` (a dict of logger configs, any may be null).
    W&B runs offline unless the user has an API key (``logger.wandb.offline: null``)."""
    loggers = []
    for name, spec in (cfg.logger or {}).items():
        if spec is None:
            continue
        kwargs: dict[str, Any] = {}
        if "WandbLogger" in spec.get("_target_", "") and spec.get("offline") is None:
            kwargs["offline"] = not os.environ.get("WANDB_API_KEY")
        logger = instantiate(spec, **kwargs)
        loggers.append(logger)
        log.info("logger %s -> %s", name, type(logger).__name__)
    config = OmegaConf.to_container(cfg, resolve=True)
    for logger in loggers:
        logger.log_hyperparams(config)
    return loggers


def _finish_wandb(exit_code: int) -> None:
    """Hydra multirun runs jobs in one process and a new WandbLogger would silently
    reuse an open run (DESIGN §11): close it at the end of every job."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is not None:
        wandb.finish(exit_code=exit_code)
