"""The scripted oracle row of every evaluation (docs/method.md §8).

Each env package has a scripted solver, ``envs.<name>.oracle.play(env, task_id,
max_steps) -> envs.OracleResult``. Here it plays exactly the evaluated goals
(``eval.split``, the first ``eval.num_tasks``) under exactly the evaluation's
step budget (``eval.max_steps``, in an env made from ``env.make``, whose own
``max_steps`` also applies). Its success rate is the ceiling of that protocol:
below 95% the evaluation measures the budget, not the agent.

A row is computed once per (env and its make kwargs, env code, split, budget,
task ids) and cached as JSON under ``paths.cache_dir`` (``oracle/<key>.json``);
the run writes it to ``<run_dir>/oracle.json`` and ``summary.json`` carries it
without the per-task episodes. ScienceWorld builds gold paths (seconds per
task) and OpenTable drives a browser (seconds per task), so the cache matters.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from omegaconf import DictConfig, OmegaConf

from agentq.intervals import wilson_interval
from agentq.layout import read_json, write_json
from envs.demonstrations import oracle_of

log = logging.getLogger(__name__)

LABEL = "scripted oracle"
MIN_SUCCESS = 0.95  # docs/method.md §8: below this the evaluation protocol is wrong
DEFAULT_CACHE_DIR = "~/.cache/agentq"


def env_package(env_id: str) -> str:
    """``"envs.textcraft:agentq/TextCraft-v0"`` -> ``"envs.textcraft"``: the package whose
    ``oracle`` module plays it (ids without a module are looked up by entry point)."""
    module, _, name = env_id.rpartition(":")
    if not module:
        entry = gym.spec(name).entry_point
        module = entry.rpartition(":")[0] if isinstance(entry, str) else entry.__module__
        module = module.rsplit(".env", 1)[0] if module.endswith(".env") else module
    return module


def _code_fingerprint(package: str) -> str:
    """A hash of the env package's sources and data files (WebShop's word tables are
    JSON): a changed env or oracle is a new cache key."""
    folder = Path(importlib.import_module(package).__file__).parent
    digest = hashlib.sha256()
    for path in sorted([*folder.glob("*.py"), *folder.glob("*.json")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_key(make: dict[str, Any], split: str, task_ids: Sequence[Any], max_steps: int) -> str:
    package = env_package(make["id"])
    spec = {
        "make": make,
        "code": _code_fingerprint(package),
        "split": split,
        "max_steps": max_steps,
        "task_ids": list(task_ids),
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:24]


def play_tasks(env: gym.Env, task_ids: Sequence[Any], max_steps: int) -> list[dict[str, Any]]:
    """The oracle's episode on each task: task id, success, score, steps, furthest milestone
    (None for an env without milestones)."""
    play = oracle_of(env)
    episodes = []
    for task_id in task_ids:
        result = play(env, task_id, max_steps)
        episodes.append(
            {
                "task_id": task_id,
                "success": bool(result.success),
                "score": float(result.score),
                "steps": int(result.steps),
                "milestone": result.milestone,
            }
        )
    return episodes


def summarize(episodes: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """Success rate with a Wilson 95% interval, average reward and steps, plus ``fields``."""
    n = len(episodes)
    successes = sum(e["success"] for e in episodes)
    lo, hi = wilson_interval(successes, n)
    return {
        "policy": LABEL,
        **fields,
        "num_tasks": n,
        "success_rate": successes / n if n else 0.0,
        "success_ci": [lo, hi],
        "avg_reward": sum(e["score"] for e in episodes) / n if n else 0.0,
        "avg_steps": sum(e["steps"] for e in episodes) / n if n else 0.0,
        "episodes": episodes,
    }


def oracle_row(
    env: gym.Env,
    make: dict[str, Any],
    *,
    split: str,
    task_ids: Sequence[Any],
    max_steps: int,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """The oracle on ``task_ids`` of ``split`` in ``env`` (made from ``make``) within ``max_steps``,
    read from ``cache_dir`` when it was computed before."""
    task_ids = list(task_ids)
    key = cache_key(make, split, task_ids, max_steps)
    path = None if cache_dir is None else Path(cache_dir).expanduser() / "oracle" / f"{key}.json"
    if path is not None and path.exists():
        try:
            return read_json(path)
        except (OSError, ValueError):
            log.warning("oracle cache %s unreadable; computing again", path)
    started = time.monotonic()
    episodes = play_tasks(env, task_ids, max_steps)
    row = summarize(
        episodes,
        env=make["id"],
        env_max_steps=make.get("max_steps"),
        split=split,
        max_steps=max_steps,
        seconds=round(time.monotonic() - started, 2),
        cache_key=key,
        milestones=list(getattr(env.unwrapped, "milestones", ())),  # names of info["milestone"] (envs/contract.py)
    )
    if path is not None:
        write_json(path, row)
    return row


def cache_dir_of(cfg: DictConfig) -> str:
    return OmegaConf.select(cfg, "paths.cache_dir", default=None) or DEFAULT_CACHE_DIR


def make_kwargs(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg.env.make, resolve=True)


def write_oracle(cfg: DictConfig, env: gym.Env, test_ids: Sequence[Any], path: Path) -> dict[str, Any]:
    """The oracle row of this run's evaluation, written to ``path`` (``RunLayout.oracle``)."""
    row = oracle_row(
        env,
        make_kwargs(cfg),
        split=cfg.eval.split,
        task_ids=test_ids,
        max_steps=cfg.eval.max_steps,
        cache_dir=cache_dir_of(cfg),
    )
    write_json(path, row)
    message = (
        f"{LABEL}: {row['success_rate']:.0%} of {row['num_tasks']} {row['split']} tasks "
        f"in {row['max_steps']} steps (avg reward {row['avg_reward']:.3f})"
    )
    if row["num_tasks"] and row["success_rate"] < MIN_SUCCESS:
        log.warning(
            "%s: below %.0f%%, so this evaluation cannot tell a good agent from the budget",
            message,
            100 * MIN_SUCCESS,
        )
    else:
        log.info(message)
    return row


def for_config(cfg: DictConfig, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """The oracle row of a composed config's evaluation (its own env, made and closed here)."""
    from hydra.utils import instantiate

    make = make_kwargs(cfg)
    env = instantiate(cfg.env.make)
    try:
        task_ids = list(env.unwrapped.task_ids(cfg.eval.split))[: cfg.eval.num_tasks]
        return oracle_row(
            env,
            make,
            split=cfg.eval.split,
            task_ids=task_ids,
            max_steps=cfg.eval.max_steps,
            cache_dir=cache_dir,
        )
    finally:
        env.close()


def summary_entry(row: dict[str, Any]) -> dict[str, Any]:
    """What ``summary.json`` keeps: everything but the per-task episodes."""
    return {k: v for k, v in row.items() if k != "episodes"}
