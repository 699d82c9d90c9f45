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

import copy
import dataclasses
import importlib
import logging
import os
import random
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from agentq import evaluate as ev
from agentq import oracle, tracking, validation
from agentq.data.buffer import ReplayBuffer, read_json, write_json
from agentq.data.pairs import StepPairBuilder
from agentq.data.trajectory import Trajectory
from agentq.parallel import for_each_task
from agentq.training.fit import fit, merge_adapter

log = logging.getLogger(__name__)


@dataclass
class Components:
    """Everything a run needs that can be built without loading weights."""

    model: Any  # a loader with .load() -> (model, tokenizer)
    env: gym.Env
    policy: partial  # (model, tokenizer) -> policy
    critic: partial  # (model, tokenizer) -> critic
    search: Any
    pair_builder: Any  # SearchResult -> training examples (``from_search``)
    objective: torch.nn.Module


class IncompatibleConfig(ValueError):
    """A combination of groups that cannot run together (e.g. ToT's state evaluator
    with MCTS, or an SFT objective on preference pairs)."""


def build(cfg: DictConfig) -> Components:
    """Instantiate and validate every configured part; a bad value fails here,
    before any model loads, with a message naming its key (agentq/validation.py:
    every _target_ node's keys and types, the loop keys, the trainer group and the
    Lightning Trainer, the model's files, the env's splits)."""
    validation.check_config(cfg)
    dtype = OmegaConf.select(cfg, "model.dtype", default="float32")
    if cfg.iterations > 0 and dtype != "float32":
        # Each trained adapter is merged into the base weights; in 16 bits most of its
        # small deltas round away (bench_precision: 90% of entries after a few DPO steps).
        raise IncompatibleConfig(
            f"model.dtype={dtype} would merge each trained adapter into {dtype} weights, which rounds most "
            "of its update away: train with model.dtype=float32 (16-bit weights suit iterations=0 runs; "
            "on GPUs, trainer precision bf16-mixed keeps fp32 weights)"
        )
    if cfg.get("critic_model", "base") not in ("base", "policy"):
        raise ValueError(f"critic_model must be 'base' or 'policy', got {cfg.critic_model!r}")
    search = instantiate(cfg.search)
    critic = instantiate(cfg.critic)
    pair_builder = instantiate(cfg.pairs)
    objective = instantiate(cfg.objective)
    check_compatible(cfg, search, critic.func, pair_builder, objective)
    check_search_modes(cfg, search)
    if cfg.eval.get("num_simulations") and not hasattr(search, "num_simulations"):
        raise IncompatibleConfig(
            f"eval.num_simulations is an MCTS budget, and search {type(search).__name__} has none: "
            "set eval.num_simulations=null (or bound any search with search.max_policy_calls)"
        )
    validation.check_trainer(cfg, kind=getattr(objective, "kind", None))
    policy = instantiate(cfg.agent)
    model = instantiate(cfg.model)
    if callable(getattr(model, "check", None)):
        model.check()  # the folders and files load() reads, without reading weights
    _check_env_id(cfg.env.make.id)
    env = instantiate(cfg.env.make)
    workers = cfg.get("workers", 1)
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if workers > 1 and not getattr(env.unwrapped, "forkable", False):
        env.close()
        raise IncompatibleConfig(
            f"workers={workers} forks the environment, and {type(env.unwrapped).__name__} holds a connection "
            "to another process (a JVM or a browser) that forked workers cannot share: use workers=1"
        )
    try:
        validation.check_env_keys(cfg, env)
    except ValueError:
        env.close()
        raise
    return Components(
        model=model,
        env=env,
        policy=policy,
        critic=critic,
        search=search,
        pair_builder=pair_builder,
        objective=objective,
    )


def check_compatible(cfg: DictConfig, search, critic_cls, pair_builder, objective) -> None:
    """Refuse combinations that cannot work, naming the groups to change."""
    names = {
        group: OmegaConf.select(cfg, f"{group}._target_", default="?").rsplit(".", 1)[-1]
        for group in ("search", "critic", "pairs", "objective")
    }
    wants = getattr(search, "critic_kind", None)
    has = getattr(critic_cls, "kind", None)
    if wants is not None and has != wants:
        raise IncompatibleConfig(
            f"search {names['search']} needs a {wants!r} critic but critic {names['critic']} is a {has!r} one: "
            f"use critic={'llm_rank' if wants == 'rank' else 'llm_value or critic=llm_vote'}"
        )
    max_candidates = getattr(critic_cls, "MAX_CANDIDATES", None)
    if wants == "rank" and max_candidates is not None and cfg.search.num_actions > max_candidates:
        raise ValueError(
            f"search.num_actions={cfg.search.num_actions} exceeds what critic {names['critic']} "
            f"can rank ({max_candidates})"
        )
    if cfg.iterations == 0:
        return  # nothing is trained: any objective goes
    if getattr(pair_builder, "kind", None) != getattr(objective, "kind", None):
        raise IncompatibleConfig(
            f"objective {names['objective']} trains on {getattr(objective, 'kind', '?')} examples but pairs "
            f"{names['pairs']} builds {getattr(pair_builder, 'kind', '?')} examples (each objective config selects "
            "its own pairs: drop the pairs= override)"
        )
    if isinstance(pair_builder, StepPairBuilder) and wants is None:
        raise IncompatibleConfig(
            f"step pairs compare sibling values, which search {names['search']} does not record: "
            "use search=mcts, tot_bfs or tot_dfs, or objective=traj_dpo / sft"
        )
    if getattr(objective, "needs_visits", False) and not getattr(search, "has_visits", False):
        raise IncompatibleConfig(
            f"objective {names['objective']} weighs pairs by MCTS visit counts, which search "
            f"{names['search']} does not have: use search=mcts"
        )


def check_search_modes(cfg: DictConfig, search) -> None:
    """``eval.search_modes`` and the committed mode's budget, before any model loads."""
    modes = search_modes(cfg, search)
    unknown = [m for m in modes if m not in ev.SEARCH_MODES]
    if unknown:
        raise ValueError(f"eval.search_modes: unknown modes {unknown}, choose from {list(ev.SEARCH_MODES)}")
    if not (cfg.eval.search and "committed" in modes):
        return
    if not hasattr(search, "search_from"):
        raise IncompatibleConfig(
            f"eval.search_modes: the committed mode searches from every state the agent reaches, which search "
            f"{type(search).__name__} cannot do (MCTS can): use eval.search_modes=[verifier] or search=mcts"
        )
    for key in ("num_simulations", "max_depth"):
        value = OmegaConf.select(cfg, f"eval.committed.{key}")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"eval.committed.{key} must be an integer >= 1, got {value!r}")
    instantiate(cfg.eval.committed.judge)  # a partial: a bad target or key fails here


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
    resuming = bool(cfg.get("resume"))
    if resuming:
        run_dir = Path(cfg.resume)
        cfg = OmegaConf.load(run_dir / "config.yaml")
        log.info("resuming %s", run_dir)
    else:
        run_dir = Path(cfg.paths.run_dir)
    parts = build(cfg)  # before config.yaml: a refused config leaves nothing to resume
    if not resuming:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    seed_everything(cfg.seed, parts.env)
    record_run_info(run_dir, cfg)
    buffer = ReplayBuffer(run_dir)
    loggers = make_loggers(cfg, run_dir)
    started = time.monotonic()
    previous_wall = _previous_wall(run_dir)
    status = "failed"
    try:
        model, tokenizer = parts.model.load()
        critic_model = base_critic_model(cfg, model)
        env = parts.env
        train_ids = list(env.unwrapped.task_ids(cfg.collect.split))
        test_ids = list(env.unwrapped.task_ids(cfg.eval.split))[: cfg.eval.num_tasks]
        oracle.write_oracle(cfg, env, test_ids, run_dir)  # the scripted oracle on the same goals and budget
        for iteration in range(cfg.iterations + 1):
            if iteration > 0:
                model = _improve(cfg, parts, model, critic_model or model, tokenizer, buffer, iteration, train_ids, loggers)
                tracking.log_iteration(loggers, buffer, iteration)
            if iteration > 0 or cfg.eval.base:
                _evaluate(cfg, parts, model, critic_model or model, tokenizer, buffer, iteration, test_ids, loggers)
            summary = write_summary(cfg, buffer, run_dir, previous_wall + time.monotonic() - started)
        status = "success"
        return summary
    finally:
        parts.env.close()
        for logger in loggers:
            logger.finalize(status)
        _finish_wandb(exit_code=0 if status == "success" else 1)


def base_critic_model(cfg: DictConfig, model):
    """A frozen copy of the base LLM for the critic, or None when the critic uses the policy's model.

    DESIGN §3: the critic is "the same base LLM". Training merges each adapter into
    the policy's weights in place, so after iteration 1 the base survives only as a
    copy (one model's weights more in memory). It is made only when a trained
    policy's search would use it: MCTS at evaluation, or collection after iteration 1.
    ``critic_model=policy`` lets the critic follow the trained policy instead.
    """
    trained_search = cfg.iterations > 1 or (cfg.iterations == 1 and cfg.eval.search)
    if cfg.get("critic_model", "base") != "base" or not trained_search:
        return None
    frozen = copy.deepcopy(model).eval()
    frozen.requires_grad_(False)
    return frozen


def _improve(cfg, parts: Components, model, critic_model, tokenizer, buffer: ReplayBuffer, iteration, train_ids, loggers):
    """Collect, build pairs, train: returns pi_{i+1} (adapter merged)."""
    metrics_path = buffer.train_metrics_path(iteration)
    if metrics_path.exists():  # finished before a restart: replay its adapter
        adapter = buffer.adapter_dir(iteration)
        return merge_adapter(model, adapter) if adapter.exists() else model

    policy = parts.policy(model, tokenizer)
    critic = parts.critic(critic_model, tokenizer)
    rng = np.random.default_rng([cfg.seed, iteration])
    count = min(cfg.collect.num_tasks, len(train_ids))
    tasks = [train_ids[i] for i in rng.choice(len(train_ids), size=count, replace=False)]
    model.eval()
    with phase_timer(buffer, iteration, "collect"):

        def search(task_id) -> None:
            generator = torch.Generator().manual_seed(ev.task_seed(cfg.seed, iteration, task_id))
            with torch.no_grad():
                result = parts.search(parts.env, policy, critic, task_id=task_id, generator=generator)
            buffer.write_search(iteration, task_id, result)

        todo = [t for t in tasks if not buffer.has_search(iteration, t)]
        for_each_task(search, todo, workers=cfg.get("workers", 1), description=f"collect (iter {iteration})")

        if not buffer.has_examples(iteration):
            with torch.no_grad():
                searches = buffer.searches(iteration)
                examples = [e for r in searches for e in parts.pair_builder.from_search(r, policy)]
            buffer.write_examples(iteration, examples)
    examples = buffer.examples(iteration)
    log.info("iteration %d: %d training examples from %d tasks", iteration, len(examples), len(tasks))
    if not examples:
        write_json(metrics_path, {"loss": None, "skipped": "no training examples"})
        return model

    t = cfg.trainer
    with phase_timer(buffer, iteration, "train"):
        peft_model, metrics = fit(
            model,
            tokenizer,
            examples,
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


def _evaluate(cfg, parts: Components, model, critic_model, tokenizer, buffer, iteration, test_ids, loggers) -> None:
    model.eval()
    policy = parts.policy(model, tokenizer)
    if cfg.eval.zero_shot:
        episode = ev.zero_shot(parts.env, policy, max_steps=cfg.eval.max_steps, dense_reward=cfg.dense_reward)
        _evaluate_mode(cfg, buffer, iteration, "zero_shot", episode, test_ids, loggers)
    if cfg.eval.search:
        critic = parts.critic(critic_model, tokenizer)
        modes = search_modes(cfg, parts.search)
        if "committed" in modes:  # headline: the agent acts with search, blind to the env's reward
            committed = cfg.eval.committed
            search = dataclasses.replace(
                parts.search, num_simulations=committed.num_simulations, max_depth=committed.max_depth
            )
            judge = instantiate(committed.judge)(critic_model, tokenizer)
            episode = ev.committed(
                parts.env, policy, critic, judge, search, max_steps=cfg.eval.max_steps, dense_reward=cfg.dense_reward
            )
            _evaluate_mode(cfg, buffer, iteration, "committed", episode, test_ids, loggers)
        if "verifier" in modes:  # best rollout by the env's reward: an upper bound
            # The episode budget of every other row (and of the oracle's), not the collection depth.
            search = dataclasses.replace(parts.search, max_depth=cfg.eval.max_steps)
            if cfg.eval.get("num_simulations"):  # an inference budget of its own
                search = dataclasses.replace(search, num_simulations=cfg.eval.num_simulations)
            episode = ev.verifier(parts.env, policy, critic, search)
            _evaluate_mode(cfg, buffer, iteration, "verifier", episode, test_ids, loggers)
    if cfg.eval.recovery:  # after zero_shot: iteration 0's failures are the prefixes
        prefixes = _recovery_prefixes(cfg, buffer, test_ids)
        episode = ev.recovery(parts.env, policy, prefixes, max_steps=cfg.eval.max_steps, dense_reward=cfg.dense_reward)
        _evaluate_mode(cfg, buffer, iteration, "recovery", episode, list(prefixes), loggers)


def search_modes(cfg: DictConfig, search) -> list[str]:
    """The inference-time search modes (``ev.SEARCH_MODES``) of ``eval.search_modes``;
    null: every mode the search supports (committed needs ``search_from``: MCTS)."""
    modes = cfg.eval.get("search_modes")
    if modes is None:
        return [m for m in ev.SEARCH_MODES if m != "committed" or hasattr(search, "search_from")]
    return list(modes)


def _evaluate_mode(cfg, buffer, iteration, mode, episode, task_ids, loggers) -> None:
    with torch.no_grad(), phase_timer(buffer, iteration, f"eval_{mode}"):
        metrics = ev.evaluate(
            episode, task_ids, buffer=buffer, iteration=iteration, mode=mode, seed=cfg.seed, workers=cfg.get("workers", 1)
        )
    write_json(buffer.iteration_dir(iteration) / "eval" / f"{mode}.json", metrics)
    for logger in loggers:
        logger.log_metrics({f"eval/{mode}/{k}": v for k, v in metrics.items()} | {"iteration": iteration}, step=iteration)
    log.info("iteration %d eval %s: %s", iteration, mode, metrics)


def _recovery_prefixes(cfg, buffer: ReplayBuffer, test_ids) -> dict:
    """Agent-R's recovery test: failed prefixes of the base policy's greedy episodes
    (iteration 0 of this run, or of ``eval.recovery_from``, so that several runs
    are tested on the same prefixes)."""
    source = ReplayBuffer(cfg.eval.recovery_from) if cfg.eval.recovery_from else buffer
    paths = [source.eval_path(0, "zero_shot", task_id) for task_id in test_ids]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(
            f"eval.recovery needs the base policy's zero-shot episodes, missing e.g. {missing[0]}: "
            "keep eval.base=true and eval.zero_shot=true, or point eval.recovery_from at a run that has them"
        )
    trajectories = [Trajectory.from_dict(read_json(p)["trajectory"]) for p in paths]
    prefixes, skipped = ev.failed_prefixes(trajectories, cfg.eval.recovery_fraction)
    log.info("recovery: %d failed prefixes, %d tasks without a failure skipped", len(prefixes), len(skipped))
    return prefixes


def write_summary(cfg, buffer: ReplayBuffer, run_dir: Path, wall_seconds: float) -> dict:
    """``summary.json`` from the files each phase wrote (so it survives restarts)."""
    iterations = []
    for iteration in range(cfg.iterations + 1):
        folder = buffer.iteration_dir(iteration)
        entry: dict[str, Any] = {"iteration": iteration, "eval": {}}
        for mode in ev.MODES:
            path = folder / "eval" / f"{mode}.json"
            if path.exists():
                entry["eval"][mode] = read_json(path)
        if iteration > 0:
            entry["num_examples"] = buffer.num_examples(iteration)
            train = buffer.train_metrics_path(iteration)
            entry["train"] = read_json(train) if train.exists() else None
        seconds = folder / "seconds.json"
        if seconds.exists():
            entry["seconds"] = read_json(seconds)
        if entry["eval"] or iteration == 0 or folder.exists():
            iterations.append(entry)
    summary = {"iterations": iterations, "wall_seconds": round(wall_seconds, 1)}
    if (run_dir / oracle.FILE).exists():  # eval split, budget, success rate and n of the scripted oracle
        summary["oracle"] = oracle.summary_entry(read_json(run_dir / oracle.FILE))
    write_json(run_dir / "summary.json", summary)
    return summary


def _previous_wall(run_dir: Path) -> float:
    path = run_dir / "summary.json"
    return float(read_json(path).get("wall_seconds", 0.0)) if path.exists() else 0.0


@contextmanager
def phase_timer(buffer: ReplayBuffer, iteration: int, phase: str):
    """Add the wall time of a phase to ``iter_XXX/seconds.json`` (a resumed phase adds
    to what the killed run recorded; time spent in the killed attempt is lost)."""
    path = buffer.iteration_dir(iteration) / "seconds.json"
    started = time.monotonic()
    yield
    seconds = read_json(path) if path.exists() else {}
    seconds[phase] = round(seconds.get(phase, 0.0) + time.monotonic() - started, 1)
    write_json(path, seconds)


def record_run_info(run_dir: Path, cfg: DictConfig) -> None:
    """What reproducing this run needs beyond config.yaml: the code revision and the
    versions of the packages that decide the numbers; one entry per (re)start."""
    root = Path(__file__).resolve().parent.parent
    try:
        git = ["git", "-C", str(root), "describe", "--always", "--dirty"]
        revision = subprocess.run(git, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        revision = ""
    packages = ("torch", "transformers", "peft", "lightning", "hydra-core", "gymnasium", "trl", "wandb")
    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    path = run_dir / "run_info.json"
    starts = read_json(path)["starts"] if path.exists() else []
    starts.append(
        {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "git_revision": revision or None,
            "python": sys.version.split()[0],
            "packages": versions,
            "seed": cfg.seed,
            "threads": torch.get_num_threads(),
        }
    )
    write_json(path, {"starts": starts})


def seed_everything(seed: int, env: gym.Env | None = None) -> None:
    """Python, NumPy, torch and the env's own generator from one key. (The loop
    always names the task it resets to, so the env draws from it only for tasks
    it picks itself; search and evaluation seed per task, see ``ev.task_seed``.)"""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if env is not None:
        env.unwrapped.np_random = gym.utils.seeding.np_random(seed)[0]


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
