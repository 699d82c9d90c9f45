"""MCTS simulations per minute on WebShop with three prompt-cache modes, in one run.

(a) none: every prompt of the policy and the critic prefilled from scratch
    (``agent.sampling.reuse_prefix_cache=false``);
(b) last prompt: only the previous prompt's KV cache is kept (a radix tree
    bounded to one leaf, what ``PrefixCache`` did before it was a tree);
(c) tree: the radix tree of KV caches (``agent.sampling.prefix_cache_tokens``).

The settings are those of ``+experiment=webshop_mcts_dpo`` (constrained
command decoding, 48 new tokens, K = ``search.num_actions``, dense reward),
composed with Hydra as ``run.py`` does, with the embedded SmolLM2-135M. Every
mode searches the same tasks with the same seeds; the modes are interleaved
per task, so a busy neighbour on a shared machine slows all of them alike, and
each mode keeps one policy and one critic across tasks, as the loop does.
Wall-clock and process CPU time are both reported: on a crowded machine the
CPU time is the steadier measure of the work done.
Caching must not change the search: the trees (commands, rewards, visits,
critic scores, rollouts) are compared across modes, log-probs to 1e-3.

    python -m benchmarks.bench_mcts                  # embedded SmolLM2-135M (from the repo root)
    python -m benchmarks.bench_mcts --model tiny     # random tiny model, a smoke test

``run(parse_args([...]))`` returns the figures as a dict (for a later
``benchmarks/run_all.py``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import transformers
from hydra import compose, initialize_config_dir

from agentq.components import build
from agentq.evaluate import task_seed
from agentq.models.prefix_cache import PrefixCache

CONF = Path(__file__).resolve().parents[1] / "conf"
MODES = ("none", "last prompt", "tree")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded", help="'embedded' (SmolLM2-135M) or 'tiny'")
    parser.add_argument("--tasks", type=int, default=2, help="training tasks searched per mode")
    parser.add_argument("--simulations", type=int, default=3, help="search.num_simulations")
    parser.add_argument(
        "--override", action="append", default=[], help="extra Hydra override (repeatable)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def compose_config(args: argparse.Namespace):
    overrides = [
        "+experiment=webshop_mcts_dpo",
        f"search.num_simulations={args.simulations}",
        f"seed={args.seed}",
        "paths.run_dir=/tmp/agentq_bench_mcts",  # nothing is written there
        *(["model=tiny"] if args.model == "tiny" else []),
        *args.override,
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides)


def make_agents(parts, model, tokenizer, mode: str):
    """The policy and the critic of one cache mode, each with its own cache (the
    configured tree, or one replaced for the other modes)."""
    policy = parts.policy(model, tokenizer)
    critic = parts.critic(model, tokenizer)
    if mode == "none":
        policy.prefix_cache = PrefixCache(enabled=False)
        critic.prefix_cache = PrefixCache(enabled=False)
    elif mode == "last prompt":
        policy.prefix_cache = PrefixCache(max_leaves=1)
        critic.prefix_cache = PrefixCache(max_leaves=1)
    return policy, critic


def signature(result) -> dict:
    """What caching must not change: the tree and the rollouts (log-probs apart)."""
    keys = ("parent", "command", "action", "reward", "score", "visits", "critic_score", "terminal")
    nodes = [tuple(n[k] for k in keys) for n in result.tree.to_dict()["nodes"]]
    rollouts = [
        ([s.command for s in t.steps], [s.reward for s in t.steps], t.reward)
        for t in result.trajectories
    ]
    logprobs = [n.logprob for n in result.tree.nodes] + [
        s.logprob for t in result.trajectories for s in t.steps
    ]
    return {"nodes": nodes, "rollouts": rollouts, "logprobs": logprobs}


def same(a: dict, b: dict) -> bool:
    close = len(a["logprobs"]) == len(b["logprobs"]) and all(
        abs(x - y) <= 1e-3 for x, y in zip(a["logprobs"], b["logprobs"], strict=True)
    )
    return a["nodes"] == b["nodes"] and a["rollouts"] == b["rollouts"] and close


def run(args: argparse.Namespace) -> dict:
    """Search the same tasks in every mode; the figures per mode, and whether the trees agree."""
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = compose_config(args)
    parts = build(cfg)
    started = time.perf_counter()
    model, tokenizer = parts.model.load()
    load_seconds = time.perf_counter() - started
    model.eval()
    env = parts.env
    task_ids = list(env.unwrapped.task_ids(cfg.collect.split))[: args.tasks]
    agents = {m: make_agents(parts, model, tokenizer, m) for m in MODES}
    figures = {
        m: {
            "seconds": 0.0,
            "cpu_seconds": 0.0,
            "simulations": 0,
            "policy_calls": 0,
            "critic_calls": 0,
        }
        for m in MODES
    }
    signatures: dict[str, list[dict]] = {m: [] for m in MODES}

    load_before = os.getloadavg()
    for task_id in task_ids:
        for mode in MODES:  # interleaved per task
            policy, critic = agents[mode]
            generator = torch.Generator().manual_seed(task_seed(cfg.seed, 1, task_id))
            t0, cpu0 = time.perf_counter(), time.process_time()
            with torch.no_grad():
                result = parts.search(env, policy, critic, task_id=task_id, generator=generator)
            figures[mode]["seconds"] += time.perf_counter() - t0
            figures[mode]["cpu_seconds"] += time.process_time() - cpu0
            for key in ("simulations", "policy_calls", "critic_calls"):
                figures[mode][key] += getattr(result.stats, key)
            signatures[mode].append(signature(result))
            print(  # progress, and the figures so far should the run be cut short
                f"task {task_id}, {mode}: {result.stats.simulations} simulations, "
                f"{time.perf_counter() - t0:.0f} s, {time.process_time() - cpu0:.0f} CPU s; so far "
                f"policy prompt tokens computed / reused {policy.prefix_cache.computed_tokens} / "
                f"{policy.prefix_cache.reused_tokens}, critic {critic.prefix_cache.computed_tokens} / "
                f"{critic.prefix_cache.reused_tokens}",
                file=sys.stderr,
                flush=True,
            )
    load_after = os.getloadavg()
    env.close()

    for mode, (policy, critic) in agents.items():
        f = figures[mode]
        f["sims_per_min"] = 60 * f["simulations"] / f["seconds"]
        f["sims_per_cpu_min"] = 60 * f["simulations"] / f["cpu_seconds"]
        for who, cache in (("policy", policy.prefix_cache), ("critic", critic.prefix_cache)):
            f[f"{who}_computed_tokens"] = cache.computed_tokens
            f[f"{who}_reused_tokens"] = cache.reused_tokens
            f[f"{who}_evicted_tokens"] = cache.evicted_tokens
            f[f"{who}_cached_mb"] = cache.num_bytes / 2**20
    for f in figures.values():
        f["speedup"] = f["sims_per_min"] / figures["none"]["sims_per_min"]
        f["cpu_speedup"] = f["sims_per_cpu_min"] / figures["none"]["sims_per_cpu_min"]
    identical = {
        m: all(same(a, b) for a, b in zip(signatures["none"], signatures[m], strict=True))
        for m in MODES[1:]
    }
    return {
        "model": args.model,
        "tasks": task_ids,
        "simulations": args.simulations,
        "num_actions": cfg.search.num_actions,
        "max_new_tokens": cfg.agent.sampling.max_new_tokens,
        "prefix_cache_tokens": cfg.agent.sampling.prefix_cache_tokens,
        "load_seconds": load_seconds,
        "load_average": (load_before[0], load_after[0]),
        "threads": torch.get_num_threads(),
        "modes": figures,
        "identical": identical,
    }


def report(out: dict) -> str:
    lines = []
    lines.append(f"\n## MCTS on WebShop: prompt-cache modes ({out['model']})\n")
    lines.append(
        f"- machine: {platform.processor() or platform.machine()}, os.cpu_count()={os.cpu_count()}, "
        f"torch threads={out['threads']}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    lines.append(
        f"- load average (1 min) before/after: {out['load_average'][0]:.2f} / {out['load_average'][1]:.2f} "
        "(above the core count means other processes shared the CPU)"
    )
    lines.append(
        f"- model load {out['load_seconds']:.1f} s; tasks {out['tasks']}, {out['simulations']} simulations "
        f"each, K={out['num_actions']}, {out['max_new_tokens']} new tokens, constrained commands, "
        f"tree bound {out['prefix_cache_tokens']} tokens; modes interleaved per task"
    )
    verdict = ", ".join(f"{m}: {'yes' if ok else 'NO'}" for m, ok in out["identical"].items())
    lines.append(f"- trees identical to mode 'none': {verdict}\n")
    lines.append(
        "| cache | sims | s | sims/min | vs none | CPU s | sims/CPU-min | vs none "
        "| policy prompt tokens computed / reused | critic computed / reused | evicted | cached MB |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, f in out["modes"].items():
        lines.append(
            f"| {mode} | {f['simulations']} | {f['seconds']:.0f} | {f['sims_per_min']:.2f} "
            f"| {f['speedup']:.2f}x | {f['cpu_seconds']:.0f} | {f['sims_per_cpu_min']:.2f} "
            f"| {f['cpu_speedup']:.2f}x | {f['policy_computed_tokens']} / {f['policy_reused_tokens']} "
            f"| {f['critic_computed_tokens']} / {f['critic_reused_tokens']} "
            f"| {f['policy_evicted_tokens'] + f['critic_evicted_tokens']} "
            f"| {f['policy_cached_mb'] + f['critic_cached_mb']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    out = run(parse_args())
    print(report(out))
    if not all(out["identical"].values()):
        raise SystemExit("the prompt cache changed the search")


if __name__ == "__main__":
    main()
