"""Checks of a composed run config that need no weights (issue 14 §5).

:func:`agentq.components.build` runs them before it loads anything, so a bad value
fails in seconds with a message naming its key instead of after the base
evaluation and the collection:

- every ``_target_`` node anywhere in the config (groups, nested targets,
  partials such as the critic and judges, loggers, the optimiser, LoRA): keys
  its target does not take, and values whose type its signature's annotations
  exclude (:func:`check_targets`); partial targets (built only once a model is
  loaded) also run their class's ``check_args(key, **kwargs)`` when they have one;
- the top-level loop keys (:func:`check_loop_keys`), and the run ``collect.trees_from``
  names (:func:`check_trees_from`);
- the trainer group (:func:`check_trainer`): the arguments of
  :func:`agentq.training.fit.fit`, the optimiser (built and called on a dummy
  parameter), the LoRA config, and the ``lightning.Trainer`` arguments (names,
  types, ranges; for a run that trains, a Trainer is also constructed, which
  takes milliseconds and writes nothing, to catch what only Lightning knows:
  accelerator, devices, strategy, precision);
- the env's splits and ``eval.recovery_from`` (:func:`check_env_keys`, once
  the env exists).

Type checks are deliberately lenient: a value is refused only when the
annotation is made of types this module understands (``int``, ``float``,
``bool``, ``str``, ``None``, ``Literal``, containers of those) and excludes it;
any other class in an annotation accepts anything (the target's own checks, or
Lightning's, decide), unless it stands in a union that also names plain types
(``lr: float | Tensor`` refuses ``"fast"``: a config value is never a Tensor).
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import difflib
import functools
import importlib.util
import inspect
import logging
import sys
import types
import typing
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentq.checks import is_int, is_number, require_bool, require_int
from agentq.layout import RunLayout
from agentq.modes import ZERO_SHOT

# Hydra's own keys in a node with a ``_target_``.
HYDRA_KEYS = frozenset({"_target_", "_partial_", "_convert_", "_recursive_", "_args_"})
# Top-level keys that hold no instantiable config (paths may interpolate hydra:...).
NOT_WALKED = frozenset({"hydra", "paths"})

# ---------------------------------------------------------------- generic type checks


def _hints(target: Callable) -> dict[str, Any]:
    """The parameter annotations of a class's ``__init__`` (a dataclass's fields) or a
    function, resolved; annotations that cannot be resolved are left out."""
    owner = target
    if inspect.isclass(target) and not dataclasses.is_dataclass(target):
        owner = target.__init__
    try:
        return typing.get_type_hints(owner)
    except Exception:  # e.g. a name imported under TYPE_CHECKING: resolve one by one
        pass
    raw = getattr(owner, "__annotations__", {}) or {}
    module = getattr(target, "__module__", None)
    namespace = dict(vars(sys.modules[module])) if module in sys.modules else {}
    resolved = {}
    for name, annotation in raw.items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # noqa: S307 - the target's own annotation text
            except Exception:
                continue
        resolved[name] = annotation
    return resolved


def _is_target(value: Any) -> bool:
    return isinstance(value, Mapping) and "_target_" in value


_CONTAINERS = {
    list: list, tuple: tuple, set: set, frozenset: frozenset,
    collections.abc.Sequence: (list, tuple), collections.abc.MutableSequence: list,
    collections.abc.Iterable: (list, tuple), collections.abc.Collection: (list, tuple),
    collections.abc.Set: (set, frozenset, list), collections.abc.MutableSet: (set, list),
}
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def matches(value: Any, annotation: Any, *, strict: bool = False) -> bool:
    """False only when ``annotation`` certainly excludes ``value`` (see the module docstring).
    ``strict``: ``annotation`` is a member of a union that also names plain types
    (``float | Tensor``), so another class there matches its own instances only."""
    if _is_target(value):  # built by Hydra from its own _target_
        return True
    if annotation in (Any, inspect.Parameter.empty, object) or isinstance(annotation, (str, typing.TypeVar)):
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        names_plain = any(a in (int, float, bool, str) for a in args)
        return any(matches(value, a, strict=names_plain) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin is typing.Annotated:
        return matches(value, args[0])
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    container = _CONTAINERS.get(origin or annotation)
    if container is not None:
        if not isinstance(value, (list, tuple, set, frozenset)):
            return False
        if not args:
            return True
        if (origin or annotation) is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return all(matches(v, args[0]) for v in value)
            return len(args) == len(value) and all(matches(v, a) for v, a in zip(value, args, strict=True))
        return all(matches(v, args[0]) for v in value)
    if (origin or annotation) in _MAPPINGS:
        if not isinstance(value, Mapping):
            return False
        if len(args) == 2:
            return all(matches(k, args[0]) and matches(v, args[1]) for k, v in value.items())
        return True
    if strict and isinstance(annotation, type):
        return isinstance(value, annotation)
    return True  # any other class, protocol or alias: not ours to judge


def describe(annotation: Any) -> str:
    """``int | None``-style text of an annotation."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None) or annotation is None:
        return "None"
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(describe(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(describe(a) for a in args)}]" if args else name
    return getattr(annotation, "__name__", str(annotation))


def _qualname(target: Any) -> str:
    module = getattr(target, "__module__", "")
    return f"{module}.{getattr(target, '__qualname__', repr(target))}".lstrip(".")


def check_kwargs(key: str, target: Callable, kwargs: Mapping[str, Any], *, owner: str | None = None) -> None:
    """Refuse keyword arguments that ``target`` does not take, or whose type its
    annotations exclude; ``key`` is the config key of ``kwargs``."""
    owner = owner or _qualname(target)
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    named = {n for n, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    hints = _hints(target)
    for name, value in kwargs.items():
        if name in HYDRA_KEYS:
            continue
        if name not in named:
            if takes_any:
                continue
            close = difflib.get_close_matches(name, sorted(named), n=1)
            # No close name: most often a key another config of the group set (a study's
            # pairs.min_visits under pairs=revision), which only the command line can delete.
            hint = f" (did you mean {key}.{close[0]}?)" if close else f" (left by another config? drop it with ~{key}.{name})"
            raise ValueError(f"{key}.{name}: {owner} takes no argument {name!r}{hint}")
        annotation = hints.get(name, parameters[name].annotation)
        if not matches(value, annotation):
            raise ValueError(f"{key}.{name}={value!r} is not a valid value: {owner} expects {describe(annotation)}")


def _locate(key: str, path: Any) -> Any:
    from hydra.utils import get_object

    if not isinstance(path, str):
        raise ValueError(f"{key}._target_ must be a dotted import path, got {path!r}")
    try:
        return get_object(path)
    except Exception as e:
        raise ValueError(f"{key}._target_: cannot import {path!r} ({e})") from e


def check_targets(node: Any, key: str) -> None:
    """Walk a resolved config (plain dicts and lists) and check every ``_target_``
    node's arguments against its target (and its ``check_args`` when partial)."""
    if isinstance(node, Mapping):
        if "_target_" in node:
            target = _locate(key, node["_target_"])
            check_kwargs(key, target, node)
            check_args = getattr(target, "check_args", None)
            if node.get("_partial_") and callable(check_args):
                check_args(key, **{k: v for k, v in node.items() if k not in HYDRA_KEYS and not _is_target(v)})
        for name, value in node.items():
            if name not in HYDRA_KEYS:
                check_targets(value, f"{key}.{name}")
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            check_targets(value, f"{key}[{i}]")


# ---------------------------------------------------------------- scalar rules


def check_parallel(select: Callable) -> None:
    """The ``parallel`` group: where searches run (conf/parallel/)."""
    backend = select("parallel.backend", default="local")
    if backend not in ("local", "ray"):
        raise ValueError(f"parallel.backend must be 'local' or 'ray' (parallel=local|ray), got {backend!r}")
    if backend != "ray":
        return
    if importlib.util.find_spec("ray") is None:
        raise ImportError("parallel=ray needs Ray, an optional dependency: pip install -e '.[ray]' (its range is in pyproject.toml)")
    require_int("parallel.workers", select("parallel.workers"), 1)
    require_int("parallel.cpus_per_worker", select("parallel.cpus_per_worker"), 1)
    gpus = select("parallel.gpus_per_worker", default=0)
    if not is_number(gpus) or gpus < 0:
        raise ValueError(f"parallel.gpus_per_worker must be a number >= 0 (Ray GPUs per actor), got {gpus!r}")
    address = select("parallel.address")
    if address is not None and not isinstance(address, str):
        raise ValueError(f"parallel.address must be null (a local Ray cluster) or 'auto' / host:port, got {address!r}")
    evaluate = select("parallel.evaluate", default=False)
    if not isinstance(evaluate, bool):
        raise ValueError(f"parallel.evaluate must be true (episodes on the Ray actors) or false, got {evaluate!r}")
    for key in ("workers", "collect.concurrency", *(["eval.concurrency"] if evaluate else [])):
        if select(key, default=1) != 1:
            raise ValueError(
                f"parallel=ray runs parallel.workers Ray actors, each searching one task at a time: "
                f"leave {key} at 1 (set parallel.workers instead)"
            )


def check_loop_keys(cfg: DictConfig) -> None:
    """The top-level keys of conf/config.yaml that the loop reads itself."""
    select = functools.partial(OmegaConf.select, cfg)
    require_int("seed", select("seed"), 0, maximum=2**32 - 1 - max(0, _int_or(select("iterations"), 0)))
    for key in ("iterations", "collect.num_tasks", "eval.num_tasks"):
        require_int(key, select(key), 0)
    require_int("eval.max_steps", select("eval.max_steps"), 1)
    require_int("workers", select("workers", default=1), 1)
    for key in ("collect.concurrency", "eval.concurrency"):
        require_int(key, select(key, default=1), 1)
    require_int("threads", select("threads"), 1, none_ok=True)
    check_parallel(select)
    for key in ("dense_reward", "eval.base", "eval.zero_shot", "eval.search", "eval.recovery", "tuning"):
        require_bool(key, select(key, default=False))
    for key in ("eval.split", "collect.split"):  # tune on dev, never on test
        if select("tuning", default=False) and select(key) == "test":
            raise ValueError(
                f"tuning=true (an hparams_search sweep) with {key}=test: a sweep chooses on the dev split "
                f"and never reads test goals; set {key}=dev (WebShop: env.make.dev_size > 0)"
            )
    required = select("required", default=[])
    if not isinstance(required, Sequence) or isinstance(required, str):
        raise ValueError(f"required must be a list of config keys, got {required!r}")
    for key in required:
        if select(str(key)) is None:
            raise ValueError(f"{key} must be set: this study lists it under `required` (add {key}=... to the command)")
    require_int("eval.num_simulations", select("eval.num_simulations"), 1, none_ok=True)
    require_int("eval.search_num_tasks", select("eval.search_num_tasks"), 1, none_ok=True)
    for key in ("collect.split", "eval.split"):
        if not isinstance(select(key), str):
            raise ValueError(f"{key} must be the name of one of the env's splits, got {select(key)!r}")
    if select("eval.recovery"):
        fraction = select("eval.recovery_fraction")
        if not is_number(fraction) or not 0.0 < fraction <= 1.0:
            raise ValueError(f"eval.recovery_fraction must be in (0, 1], got {fraction!r}")
        source = select("eval.recovery_from")
        if source is None and not (select("eval.base") and select("eval.zero_shot")):
            raise ValueError(
                "eval.recovery needs the base policy's zero-shot episodes: keep eval.base=true and "
                "eval.zero_shot=true, or point eval.recovery_from at a run that has them"
            )
        if source is not None and not (isinstance(source, str) and Path(source).expanduser().is_dir()):
            raise ValueError(f"eval.recovery_from={source!r} is not a run directory")
    check_trees_from(cfg)


# The keys that decide a run's iteration-1 trees: pi_0 is the base, so two runs equal in these
# search the same trees, whatever they then train on them.
TREE_KEYS = ("seed", "dense_reward", "model", "agent", "env", "critic", "search", "collect.split", "collect.num_tasks")
# Keys added after runs were saved, with the value that ran as those runs did (a saved config
# without them is read with these). `_tree_setting` merges the TREE_KEYS among them ("search");
# "pairs" is here for whoever compares a saved config's pairs, tests/test_protocol.py today.
ADDED_LATER = {
    "search": {"distinct_actions": False},
    "pairs": {"balance_order": False, "observation_contains": None},
}


def trees_source(cfg: DictConfig) -> RunLayout | None:
    """The run ``collect.trees_from`` names (None when unset), as :func:`check_trees_from` checks it."""
    source = OmegaConf.select(cfg, "collect.trees_from")
    if source is None:
        return None
    layout = RunLayout(Path(source).expanduser()) if isinstance(source, str) else None
    if layout is None or not layout.config.is_file():
        raise ValueError(f"collect.trees_from={source!r} is not a run directory (it has no config.yaml)")
    return layout


def check_trees_from(cfg: DictConfig) -> None:
    """``collect.trees_from``: a run directory whose saved config searched what this run would."""
    layout = trees_source(cfg)
    if layout is None:
        return
    source = OmegaConf.select(cfg, "collect.trees_from")
    theirs = OmegaConf.load(layout.config)
    for key in TREE_KEYS:
        if _tree_setting(cfg, key) != _tree_setting(theirs, key):
            raise ValueError(
                f"collect.trees_from={source!r} searched with another {key} than this run's: its trees are "
                f"not the ones this run would search (they must agree on {', '.join(TREE_KEYS)})"
            )


def _tree_setting(cfg: DictConfig, key: str) -> Any:
    value = OmegaConf.select(cfg, key)
    if not OmegaConf.is_config(value):
        return value
    plain = ADDED_LATER.get(key, {}) | OmegaConf.to_container(value, resolve=True)
    if key == "model":  # where converted weights are cached is not which weights
        plain.pop("cache_dir", None)
        plain["adapter"] = _adapter_folders(plain.get("adapter"))
    return plain


def _adapter_folders(adapter: Any) -> Any:
    """``model.adapter`` as the absolute folders it names, in order: one folder or a list of
    one, relative or absolute, name the same weights."""
    chain = [adapter] if isinstance(adapter, str) else adapter
    if not isinstance(chain, list) or not all(isinstance(item, str) for item in chain):
        return adapter  # None, or a value the model's own check refuses
    return [str(Path(item).expanduser().resolve()) for item in chain]


def _int_or(value: Any, default: int) -> int:
    return value if is_int(value) else default


def check_env_keys(cfg: DictConfig, env) -> None:
    """The splits the loop reads task ids from, and ``eval.recovery_from``'s episodes,
    against the built env."""
    for key in ("collect.split", "eval.split"):
        split = OmegaConf.select(cfg, key)
        try:
            env.unwrapped.task_ids(split)
        except (ValueError, KeyError) as e:
            raise ValueError(f"{key}={split!r}: {e}") from e
    source = cfg.eval.get("recovery_from")
    if cfg.eval.get("recovery") and source:
        test_ids = list(env.unwrapped.task_ids(cfg.eval.split))[: cfg.eval.num_tasks]
        layout = RunLayout(source)
        missing = [t for t in test_ids if not layout.episode(0, ZERO_SHOT, t).exists()]
        if missing:
            raise ValueError(
                f"eval.recovery_from={source!r} has no iteration-0 zero-shot episode of "
                f"{len(missing)} of the {len(test_ids)} test tasks (e.g. task {missing[0]!r})"
            )


# ---------------------------------------------------------------- the trainer group

# Trainer arguments that agentq.training.fit.fit passes itself.
FIT_SETS = ("logger", "callbacks", "default_root_dir", "enable_model_summary")
# trainer.* keys that are not plain arguments of fit (they are built first).
TRAINER_NODES = ("optimizer", "lora", "lightning")
# fit arguments the loop supplies itself (not trainer.* keys).
LOOP_SUPPLIES = ("model", "tokenizer", "examples", "objective", "out_dir", "loggers", "seed")
# The trainer.* keys components.training reads (checked here for a message naming the key).
LOOP_READS = (
    "optimizer", "lora", "lightning", "batch_size", "max_prompt_tokens", "use_logged_reference",
    "checkpoint_every_n_steps", "gradient_checkpointing", "shared_prefix",
)

# Lightning integer arguments: (smallest value, None allowed). -1 means "no limit" where allowed.
LIGHTNING_INTS = {
    "max_epochs": (-1, True),
    "min_epochs": (0, True),
    "max_steps": (-1, False),
    "min_steps": (0, True),
    "accumulate_grad_batches": (1, False),
    "num_nodes": (1, False),
    "log_every_n_steps": (0, True),
    "check_val_every_n_epoch": (1, True),
    "num_sanity_val_steps": (-1, True),
    "reload_dataloaders_every_n_epochs": (0, False),
}
LIGHTNING_FRACTIONS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
                       "overfit_batches")


def check_trainer(cfg: DictConfig, *, kind: str | None) -> None:
    """``cfg.trainer``: the arguments the loop passes to :func:`agentq.training.fit.fit`.
    ``kind`` is the objective's (``preference`` or ``sft``). The Trainer itself is
    constructed only when ``cfg.iterations > 0`` (an evaluation-only run never
    trains, and may be composed on a machine without the trainer's GPUs)."""
    from agentq.training.fit import check_shared_prefix, fit, resolve_precision

    trainer = OmegaConf.to_container(cfg.trainer, resolve=True)
    if not isinstance(trainer, dict):
        raise ValueError(f"trainer must be a config group, got {trainer!r}")
    fit_params = inspect.signature(fit).parameters
    expected = [n for n in fit_params if n not in LOOP_SUPPLIES]
    for name in trainer:
        if name not in expected:
            close = difflib.get_close_matches(name, expected, n=1)
            hint = f" (did you mean trainer.{close[0]}?)" if close else ""
            raise ValueError(f"trainer.{name} is not a setting of agentq.training.fit.fit{hint}")
    missing = [n for n in LOOP_READS if n not in trainer]
    if missing:
        raise ValueError(f"trainer.{missing[0]} is missing (the loop passes each of {list(LOOP_READS)} to fit)")
    scalars = {k: v for k, v in trainer.items() if k not in TRAINER_NODES}
    check_kwargs("trainer", fit, scalars, owner="agentq.training.fit.fit")
    require_int("trainer.batch_size", trainer["batch_size"], 1)
    require_int("trainer.max_prompt_tokens", trainer["max_prompt_tokens"], 16)
    require_int("trainer.checkpoint_every_n_steps", trainer["checkpoint_every_n_steps"], 0)
    if kind is not None:
        check_shared_prefix(
            kind, gradient_checkpointing=trainer["gradient_checkpointing"], shared_prefix=trainer["shared_prefix"]
        )
    check_optimizer(cfg.trainer.optimizer)
    check_lora(cfg.trainer.lora)
    lightning = resolve_precision(trainer["lightning"], logged_reference=trainer["use_logged_reference"])
    check_lightning(lightning, construct=cfg.iterations > 0, threads=cfg.get("threads"),
                    checkpoint_every_n_steps=trainer["checkpoint_every_n_steps"])


def check_optimizer(node: DictConfig) -> None:
    """Build the optimiser factory and make one optimiser for a dummy parameter: an
    unknown argument or a bad value (``lr=-1``) fails here, not after collection."""
    import torch
    from hydra.utils import instantiate

    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ValueError("trainer.optimizer must be a config with a _target_ (and _partial_: true)")
    try:
        factory = instantiate(node)
        factory([torch.nn.Parameter(torch.zeros(1))])
    except Exception as e:
        raise ValueError(
            f"trainer.optimizer ({node._target_}): {_root_message(e)}; it must be a factory that "
            "takes the parameters (_partial_: true)"
        ) from e


def check_lora(node: DictConfig) -> None:
    from hydra.utils import instantiate

    try:
        lora = instantiate(node, _convert_="all")
    except Exception as e:
        raise ValueError(f"trainer.lora: {_root_message(e)}") from e
    r = getattr(lora, "r", None)
    require_int("trainer.lora.r", r, 1)
    alpha = getattr(lora, "lora_alpha", None)
    if not is_number(alpha) or alpha <= 0:
        raise ValueError(f"trainer.lora.lora_alpha must be a number > 0, got {alpha!r}")
    dropout = getattr(lora, "lora_dropout", 0.0)
    if not is_number(dropout) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"trainer.lora.lora_dropout must be in [0, 1), got {dropout!r}")
    if getattr(lora, "target_modules", None) in ([], (), set(), ""):
        raise ValueError("trainer.lora.target_modules is empty: name the modules to adapt, e.g. [q_proj, v_proj]")


def check_lightning(
    lightning: Any, *, construct: bool, threads: int | None = None, checkpoint_every_n_steps: int = 10
) -> None:
    """The ``lightning.Trainer`` arguments of ``trainer.lightning``: names and types from
    Trainer's signature, the ranges below, the keys fit sets itself; with
    ``construct``, a Trainer built as fit builds it (no logger, nothing written)."""
    import lightning as L

    key = "trainer.lightning"
    if not isinstance(lightning, Mapping):
        raise ValueError(f"{key} must be a mapping of lightning.Trainer arguments, got {lightning!r}")
    for name in FIT_SETS:
        if name in lightning:
            raise ValueError(f"{key}.{name}: agentq.training.fit.fit sets {name} itself; remove the key")
    if lightning.get("enable_checkpointing") is False:
        raise ValueError(
            f"{key}.enable_checkpointing=false: fit checkpoints the adapter (last.ckpt, to resume a killed "
            "run); use trainer.checkpoint_every_n_steps to space the checkpoints"
        )
    check_kwargs(key, L.Trainer.__init__, lightning, owner="lightning.Trainer")
    for name, (minimum, none_ok) in LIGHTNING_INTS.items():
        if name in lightning:
            require_int(f"{key}.{name}", lightning[name], minimum, none_ok=none_ok)
    for name in LIGHTNING_FRACTIONS:
        value = lightning.get(name)
        if value is None:
            continue
        if isinstance(value, float) and not 0.0 <= value <= 1.0 or is_int(value) and value < 0:
            raise ValueError(f"{key}.{name} must be a fraction in [0, 1] or a number of batches >= 0, got {value!r}")
    clip = lightning.get("gradient_clip_val")
    if clip is not None and (not is_number(clip) or clip < 0):
        raise ValueError(f"{key}.gradient_clip_val must be a number >= 0 or null, got {clip!r}")
    devices = lightning.get("devices", "auto")
    if is_int(devices) and devices != -1 and devices < 1:
        raise ValueError(f"{key}.devices must be >= 1, -1 (all), a list of indices or 'auto', got {devices!r}")
    if isinstance(devices, list) and (not devices or not all(is_int(d) and d >= 0 for d in devices)):
        raise ValueError(f"{key}.devices as a list must hold device indices >= 0, got {devices!r}")
    if construct:
        construct_trainer(lightning, threads=threads, checkpoint_every_n_steps=checkpoint_every_n_steps)


def construct_trainer(lightning: Mapping[str, Any], *, threads: int | None, checkpoint_every_n_steps: int) -> None:
    """Build the Trainer fit would build (its callbacks, no logger) and run fit's
    strategy checks on it. Takes a few milliseconds; creates no directory."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    from agentq.training.fit import check_strategy, trains_in_workers, with_strategy

    key = "trainer.lightning"
    try:
        kwargs = with_strategy(lightning)
    except Exception as e:
        raise ValueError(f"{key}.strategy: {_root_message(e)}") from e
    check_strategy(kwargs.get("strategy"))
    try:
        with _quiet_lightning():
            trainer = L.Trainer(
                **kwargs,
                logger=False,
                callbacks=[ModelCheckpoint(save_last=True, every_n_train_steps=checkpoint_every_n_steps)],
                enable_model_summary=False,
            )
    except Exception as e:
        raise ValueError(f"{_blame(key, lightning, e)}: {_root_message(e)}") from e
    fork = getattr(trainer.strategy.launcher, "_start_method", None) == "fork"
    if fork and (threads or torch.get_num_threads()) == 1:
        return  # fit runs after run() applied `threads`, when the fork check passes
    trains_in_workers(trainer)


def _blame(key: str, kwargs: Mapping[str, Any], error: BaseException) -> str:
    """``key.<name>`` for the first argument the error mentions, else the arguments
    that decide the hardware."""
    text = str(error)
    for name in sorted(kwargs, key=len, reverse=True):
        if name in text:
            return f"{key}.{name}={kwargs[name]!r}"
    hardware = {k: kwargs[k] for k in ("accelerator", "devices", "strategy", "precision") if k in kwargs}
    return f"{key} ({', '.join(f'{k}={v!r}' for k, v in hardware.items())})"


def _root_message(error: BaseException) -> str:
    """The innermost cause's message (Hydra wraps errors of targets)."""
    while error.__cause__ is not None:
        error = error.__cause__
    return f"{type(error).__name__}: {error}"


@contextlib.contextmanager
def _quiet_lightning():
    """Constructing a Trainer logs the devices and may warn; fit will say it all again."""
    names = ("lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


# ---------------------------------------------------------------- everything that needs no object


def check_config(cfg: DictConfig) -> None:
    """Every check that needs neither the env nor the model: the loop keys, every
    ``_target_`` node, the model's dtype, the loggers and the trainer group."""
    check_loop_keys(cfg)
    for key in cfg:
        if key in NOT_WALKED or not OmegaConf.is_config(cfg[key]):
            continue
        if key == "logger":
            check_loggers(cfg)
            continue
        check_targets(OmegaConf.to_container(cfg[key], resolve=True), str(key))
    dtype = OmegaConf.select(cfg, "model.dtype")
    if dtype is not None:
        from agentq.models.loading import resolve_dtype

        resolve_dtype(dtype, "model")


def check_loggers(cfg: DictConfig) -> None:
    """``logger.<name>`` configs (any may be null), as ``bookkeeping.make_loggers`` builds them."""
    for name, spec in (cfg.logger or {}).items():
        if spec is None:
            continue
        node = OmegaConf.to_container(spec, resolve=True)
        if not _is_target(node):
            raise ValueError(f"logger.{name} must be a logger config with a _target_, or null")
        if "WandbLogger" in str(node["_target_"]) and node.get("offline") is None:
            node = {k: v for k, v in node.items() if k != "offline"}  # make_loggers decides it
        check_targets(node, f"logger.{name}")
