"""A run's config turned into typed components, once, before any model loads.

:func:`build` validates every key (:mod:`agentq.validation`), instantiates the
pluggable parts and refuses combinations that cannot run together, naming the
groups to change. What it returns is all the loop reads: no config node is
passed further down.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from agentq import validation
from agentq.checks import require_int
from agentq.data.pairs import StepPairBuilder
from agentq.layout import RunLayout
from agentq.models.engine import HFEngine
from agentq.models.loading import native_bf16, resolve_dtype
from agentq.modes import COMMITTED, SEARCH_MODES
from envs.contract import check_contract


class IncompatibleConfig(ValueError):
    """A combination of groups that cannot run together (e.g. ToT's state evaluator
    with MCTS, or an SFT objective on preference pairs)."""


@dataclass(frozen=True)
class Committed:
    """The committed mode's per-step search (``eval.committed``)."""

    num_simulations: int
    max_depth: int
    judge: Callable[[Any, Any], Any]  # (model, tokenizer) -> a state's value, blind to the env's reward


@dataclass(frozen=True)
class EvalPlan:
    """What each iteration evaluates (``eval.*``)."""

    split: str
    num_tasks: int
    max_steps: int  # every mode's episode budget, and the oracle's
    base: bool  # evaluate the base policy as iteration 0
    zero_shot: bool
    search_modes: tuple[str, ...]  # empty when eval.search is false
    search_num_tasks: int | None  # the search modes run on the first n held-out tasks (None: all)
    num_simulations: int | None  # the verifier's own budget (None: the search's)
    committed: Committed | None
    recovery: bool
    recovery_fraction: float
    recovery_from: Path | None
    concurrency: int  # episodes in flight at once


@dataclass(frozen=True)
class Training:
    """The trainer group, as :func:`agentq.training.fit.fit` takes it."""

    optimizer: DictConfig  # instantiated afresh for every iteration's fit
    lora: DictConfig
    lightning: dict[str, Any]
    batch_size: int
    max_prompt_tokens: int
    use_logged_reference: bool
    checkpoint_every_n_steps: int
    gradient_checkpointing: bool
    shared_prefix: bool

    def fit_kwargs(self) -> dict[str, Any]:
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return kwargs | {"optimizer": instantiate(self.optimizer), "lora": instantiate(self.lora, _convert_="all")}


@dataclass
class Weights:
    """The run's LLMs: the policy's (pi_i, replaced by each iteration's training), the
    frozen base for the critic and the judge (None: they read the policy's), the tokenizer,
    and the engine that decodes the policy (serving ``policy``'s weights)."""

    policy: Any
    tokenizer: Any
    frozen_base: Any = None
    engine: Any = None

    def train(self, model: Any, adapters: Sequence[Path] = ()) -> None:
        """pi_{i+1} replaces pi_i, in the trainer and in the engine (merging an adapter
        changes the weights in place, so the engine is told even when ``model`` is pi_i).
        ``adapters``: the run's adapters that made ``model`` from the base, in order."""
        self.policy = model
        self.engine.serve(model, adapters)

    @property
    def critic(self) -> Any:
        """The frozen base, else the policy's weights: as the HF engine decodes them
        (its copy in ``engine.dtype``), so the critic runs at the search's precision."""
        if self.frozen_base is not None:
            return self.frozen_base
        return self.engine.model if isinstance(self.engine, HFEngine) else self.policy


@dataclass
class Components:
    """Everything a run needs, built without loading weights."""

    model: Any  # a loader with .load() -> (model, tokenizer)
    engine: Callable  # (model, tokenizer) -> the engine that decodes the policy (agentq.models.engine)
    env: gym.Env
    make_env: Callable[[], gym.Env]  # another instance of the env, for a concurrent search
    policy: Callable  # (model, tokenizer) -> policy
    critic: Callable  # (model, tokenizer) -> critic
    search: Any
    pair_builder: Any  # SearchResult -> training examples (``from_search``)
    objective: torch.nn.Module
    training: Training
    eval: EvalPlan
    seed: int
    iterations: int  # N of Algorithm 1
    collect_split: str
    collect_num_tasks: int  # B
    collect_concurrency: int  # searches in flight at once
    collect_trees_from: RunLayout | None  # a run whose iteration-1 trees this run trains on
    workers: int
    parallel: dict  # conf/parallel: where searches run (backend local or ray, and ray's settings)
    dense_reward: bool
    frozen_critic: bool  # the critic keeps the base LLM (critic_model=base)

    pool: list[gym.Env] = dataclasses.field(default_factory=list)  # the env instances made for lanes

    def envs(self, n: int) -> list[gym.Env]:
        """``n`` instances of the env, one per concurrent search: the run's own, then
        instances kept for the whole run (a JVM or a browser each starts once)."""
        while len(self.pool) < n - 1:
            self.pool.append(self.make_env())
        return [self.env, *self.pool[: n - 1]]

    def close(self) -> None:
        for env in [self.env, *self.pool]:
            env.close()

    def task_ids(self) -> tuple[list[Any], list[Any]]:
        """(training tasks to draw from, the first ``eval.num_tasks`` held-out tasks)."""
        env = self.env.unwrapped
        return list(env.task_ids(self.collect_split)), list(env.task_ids(self.eval.split))[: self.eval.num_tasks]


def build(cfg: DictConfig) -> Components:
    """Instantiate and validate every configured part; a bad value fails here,
    before any model loads, with a message naming its key (agentq/validation.py:
    every _target_ node's keys and types, the loop keys, the trainer group and the
    Lightning Trainer, the model's files, the env's splits)."""
    validation.check_config(cfg)
    check_precision(cfg)
    search = instantiate(cfg.search)
    critic = instantiate(cfg.critic)
    pair_builder = instantiate(cfg.pairs)
    objective = instantiate(cfg.objective)
    check_compatible(cfg, search, critic.func, pair_builder, objective)
    plan = eval_plan(cfg, search)
    validation.check_trainer(cfg, kind=getattr(objective, "kind", None))
    policy = instantiate(cfg.agent)
    engine = instantiate(cfg.engine)
    check_engine(cfg, engine.func)
    model = instantiate(cfg.model)
    if callable(getattr(model, "check", None)):
        model.check()  # the folders and files load() reads, without reading weights
    env = make_env(cfg)
    return Components(
        model=model,
        engine=engine,
        env=env,
        make_env=lambda: instantiate(cfg.env.make),
        policy=policy,
        critic=critic,
        search=search,
        pair_builder=pair_builder,
        objective=objective,
        training=training(cfg.trainer),
        eval=plan,
        seed=cfg.seed,
        iterations=cfg.iterations,
        collect_split=cfg.collect.split,
        collect_num_tasks=cfg.collect.num_tasks,
        collect_concurrency=cfg.collect.get("concurrency", 1),
        collect_trees_from=validation.trees_source(cfg),
        workers=cfg.get("workers", 1),
        parallel=OmegaConf.to_container(cfg.get("parallel") or OmegaConf.create({"backend": "local"}), resolve=True),
        dense_reward=cfg.dense_reward,
        frozen_critic=cfg.get("critic_model", "base") == "base",
    )


def check_precision(cfg: DictConfig) -> None:
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


def check_engine(cfg: DictConfig, engine_cls) -> None:
    """What the chosen engine cannot do, refused with the keys to change (docs/method.md §11)."""
    name = OmegaConf.select(cfg, "engine._target_", default="?").rsplit(".", 1)[-1]
    sampling = cfg.agent.sampling
    if sampling.constrain_command and not engine_cls.constrains:
        raise IncompatibleConfig(
            f"engine {name} does not take the COMMAND constraint (a logits mask at every step): "
            "set agent.sampling.constrain_command=false, or use engine=hf"
        )
    check_sampling = getattr(engine_cls, "check_sampling", None)
    if check_sampling is not None:
        check_sampling(temperature=sampling.temperature, top_p=sampling.top_p)
    concurrent = [k for k in ("collect.concurrency", "eval.concurrency") if OmegaConf.select(cfg, k, default=1) > 1]
    if concurrent and not engine_cls.batches:
        raise IncompatibleConfig(
            f"{' and '.join(concurrent)} > 1 runs searches side by side so that one engine batches their "
            f"model calls, and engine {name} serves one request at a time: use engine=hf_batched, or set them to 1"
        )
    if cfg.get("workers", 1) > 1 and engine_cls.batches:
        raise IncompatibleConfig(
            f"workers={cfg.workers} forks processes, and engine {name} runs a thread of its own that a fork "
            "does not copy: use collect.concurrency and eval.concurrency instead (one engine batches them)"
        )
    dtype = OmegaConf.select(cfg, "engine.dtype", default="float32")
    if dtype != "float32":
        resolve_dtype(dtype, "engine")
        fast = native_bf16("auto") if dtype == "bfloat16" else torch.cuda.is_available()
        if not fast:
            raise IncompatibleConfig(
                f"engine.dtype={dtype}: this machine computes it no faster than float32 (a CPU needs AVX512-BF16 "
                "or AMX for bfloat16, and float16 is a GPU type): use engine.dtype=float32"
            )
    exact = engine_cls.exact and dtype == "float32"
    if cfg.iterations > 0 and cfg.trainer.get("use_logged_reference") and not exact:
        raise IncompatibleConfig(
            f"trainer.use_logged_reference=true takes pi_ref from the log-probs logged at sampling, and engine "
            f"{name} ({dtype}) computes them with other kernels than the trainer: set trainer.use_logged_reference=false "
            "(the trainer's own forward pass gives the reference), or use engine=hf engine.dtype=float32"
        )


def make_env(cfg: DictConfig) -> gym.Env:
    """The configured env, checked against the worker count and the splits the loop reads."""
    _check_env_id(cfg.env.make.id)
    env = instantiate(cfg.env.make)
    workers = cfg.get("workers", 1)  # an integer >= 1: validation.check_loop_keys
    try:
        check_contract(env)  # what the agent side reads of an env (envs/contract.py)
        if workers > 1 and not env.unwrapped.forkable:
            raise IncompatibleConfig(
                f"workers={workers} forks the environment, and {type(env.unwrapped).__name__} holds a "
                "connection to another process (a JVM or a browser) that forked workers cannot share: use workers=1"
            )
        validation.check_env_keys(cfg, env)
    except (ValueError, TypeError):  # TypeError: envs.contract.ContractError
        env.close()
        raise
    return env


def training(trainer: DictConfig) -> Training:
    """``cfg.trainer`` (every key checked by ``validation.check_trainer``, whose
    ``LOOP_READS`` names these fields)."""
    values = {f.name: trainer[f.name] for f in dataclasses.fields(Training)}
    return Training(**values | {"lightning": OmegaConf.to_container(trainer.lightning, resolve=True)})


def eval_plan(cfg: DictConfig, search) -> EvalPlan:
    e = cfg.eval
    if e.get("num_simulations") and not hasattr(search, "num_simulations"):
        raise IncompatibleConfig(
            f"eval.num_simulations is an MCTS budget, and search {type(search).__name__} has none: "
            "set eval.num_simulations=null (or bound any search with search.max_policy_calls)"
        )
    modes = tuple(search_modes(cfg, search)) if e.search else ()
    if not e.search:
        search_modes(cfg, search)  # unknown names are refused even when eval.search is off
    committed = None
    if COMMITTED in modes:
        for key in ("num_simulations", "max_depth"):
            require_int(f"eval.committed.{key}", OmegaConf.select(cfg, f"eval.committed.{key}"), 1)
        # A partial: a bad target or key fails here.
        committed = Committed(e.committed.num_simulations, e.committed.max_depth, instantiate(e.committed.judge))
    return EvalPlan(
        split=e.split,
        num_tasks=e.num_tasks,
        max_steps=e.max_steps,
        base=e.base,
        zero_shot=e.zero_shot,
        search_modes=modes,
        search_num_tasks=e.get("search_num_tasks"),
        num_simulations=e.get("num_simulations"),
        committed=committed,
        recovery=e.recovery,
        recovery_fraction=e.recovery_fraction,
        recovery_from=Path(e.recovery_from) if e.get("recovery_from") else None,
        concurrency=e.get("concurrency", 1),
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
    if cfg.search.get("distinct_actions") and not cfg.agent.sampling.get("constrain_command"):
        raise ValueError(
            "search.distinct_actions=true draws from the valid actions not drawn yet, which needs "
            "agent.sampling.constrain_command=true"
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


def search_modes(cfg: DictConfig, search) -> list[str]:
    """The inference-time search modes of ``eval.search_modes``, checked; null: every
    mode the search supports (committed needs ``search_from``: MCTS)."""
    if cfg.eval.search and getattr(search, "scripted", False):
        raise IncompatibleConfig(
            f"search {type(search).__name__} plays the env's scripted oracle, not the policy: it has no "
            "evaluation row (the oracle row is there already); set eval.search=false"
        )
    modes = cfg.eval.get("search_modes")
    if modes is None:
        return [m for m in SEARCH_MODES if m != COMMITTED or hasattr(search, "search_from")]
    modes = list(modes)
    unknown = [m for m in modes if m not in SEARCH_MODES]
    if unknown:
        raise ValueError(f"eval.search_modes: unknown modes {unknown}, choose from {list(SEARCH_MODES)}")
    if cfg.eval.search and COMMITTED in modes and not hasattr(search, "search_from"):
        raise IncompatibleConfig(
            f"eval.search_modes: the committed mode searches from every state the agent reaches, which search "
            f"{type(search).__name__} cannot do (MCTS can): use eval.search_modes=[verifier] or search=mcts"
        )
    return modes


def _check_env_id(env_id: str) -> None:
    """``module:name`` ids import their module first (that registers the env)."""
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        gym.spec(name)
    except (ImportError, gym.error.Error) as e:
        raise ValueError(f"env.make.id: unknown environment {env_id!r} ({e})") from e
