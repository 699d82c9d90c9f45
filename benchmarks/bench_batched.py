"""Shared decode steps (``engine=hf_batched``) against today's sequential HF path, on
WebShop, in one run.

Both sides decode the same fp32 weights with the same COMMAND constraint, prompt
cache, temperature and search budgets (the headline's: 5 simulations, K=3,
depth 6, temperature 0.7, the LLM critic); only the engine and the number of
searches in flight differ:

(1) greedy agreement: the first action of ``--agreement`` WebShop states (half
    search pages, half result pages), HF vs hf_batched: identical completions,
    identical commands, the mean log-prob gap;
(2) MCTS simulations per minute and per CPU-minute: HF one search at a time on
    ``--hf-goals`` training goals, hf_batched with ``--concurrency`` searches in
    flight on ``--goals``;
(3) zero-shot evaluation episodes per minute: HF on ``--hf-eval-goals`` test
    goals, hf_batched on ``--eval-goals``, with the episodes' rewards;
(4) where the hf_batched engine thread's time went in (2) and (3): shared
    steps (decode steps and jump-forward runs), prefills and the critic's
    forwards, and the tokens each ran through the weights;
(5) the ceiling: the rate of (2) and (3) if every one of those tokens cost what
    a token of a 256-token prefill costs (the model's best per-token cost on this
    CPU: its weight products run at the CPU's arithmetic rate there, not at the
    rate weights are read) and nothing else took time but the critic's forwards
    as measured. No batching of these tokens can beat it.

The sides run in this process one after the other, never beside each other; the
load average is reported around each.

    python -m benchmarks.bench_batched            # embedded SmolLM2-135M
    python -m benchmarks.bench_batched --quick    # tiny model, few goals: a smoke test
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from agentq.components import Weights
from agentq.models.batched_engine import Profile
from agentq.models.engine import HFEngine
from benchmarks.bench_engine import agreement, compose_parts, episodes, searches
from benchmarks.common import cli


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, few goals")
    parser.add_argument("--agreement", type=int, default=50, help="states compared greedily")
    parser.add_argument("--hf-goals", type=int, default=4, help="training goals searched by the HF path")
    parser.add_argument("--goals", type=int, default=16, help="training goals searched by hf_batched")
    parser.add_argument("--hf-eval-goals", type=int, default=8, help="test goals evaluated by the HF path")
    parser.add_argument("--eval-goals", type=int, default=50, help="test goals evaluated by hf_batched")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rows", type=int, default=16, help="engine.rows of hf_batched")
    parser.add_argument("--simulations", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.agreement, args.hf_goals, args.goals, args.hf_eval_goals, args.eval_goals, args.concurrency = 4, 1, 4, 2, 4, 4
    return args


def run(args: argparse.Namespace) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    lanes = f"collect.concurrency={args.concurrency}", f"eval.concurrency={args.concurrency}"
    today = compose_parts(args)
    batched = compose_parts(args, "engine=hf_batched", f"engine.rows={args.rows}", *lanes)
    model, tokenizer = today.model.load()
    model.eval()
    engine = batched.engine(model, tokenizer)
    out = {"threads": torch.get_num_threads(), "rows": args.rows, "token_seconds": token_seconds(model)}
    out["agreement"] = agreement(batched, model, tokenizer, engine, args.agreement)
    train_ids = list(today.env.unwrapped.task_ids("train"))
    test_ids = list(today.env.unwrapped.task_ids("test"))
    hf = Weights(model, tokenizer, engine=HFEngine(model, tokenizer))
    shared = Weights(model, tokenizer, engine=engine)
    out["mcts"] = {"hf": searches(today, hf, train_ids[: args.hf_goals], 1)}
    engine.profile = Profile()
    out["mcts"]["hf_batched"] = searches(batched, shared, train_ids[: args.goals], args.concurrency)
    out["mcts"]["hf_batched"]["engine"] = engine.profile.summary()
    out["eval"] = {"hf": episodes(today, hf, test_ids[: args.hf_eval_goals], 1)}
    engine.profile = Profile()
    out["eval"]["hf_batched"] = episodes(batched, shared, test_ids[: args.eval_goals], args.concurrency)
    out["eval"]["hf_batched"]["engine"] = engine.profile.summary()
    m, e = out["mcts"], out["eval"]
    m["ceiling"] = ceiling(m["hf_batched"], m["hf_batched"]["simulations"], out["token_seconds"], out["threads"])
    e["ceiling"] = ceiling(e["hf_batched"], e["hf_batched"]["goals"], out["token_seconds"], out["threads"])
    m["ceiling"]["ratio_cpu"] = m["ceiling"]["per_cpu_min"] / m["hf"]["sims_per_cpu_min"]
    e["ceiling"]["ratio"] = e["ceiling"]["per_min"] / e["hf"]["episodes_per_min"]
    m["ratio_wall"] = m["hf_batched"]["sims_per_min"] / m["hf"]["sims_per_min"]
    m["ratio_cpu"] = m["hf_batched"]["sims_per_cpu_min"] / m["hf"]["sims_per_cpu_min"]
    e["ratio"] = e["hf_batched"]["episodes_per_min"] / e["hf"]["episodes_per_min"]
    e["ratio_steps"] = e["hf_batched"]["steps_per_min"] / e["hf"]["steps_per_min"]
    engine.close()
    today.close()
    batched.close()
    return out


@torch.no_grad()
def token_seconds(model, tokens: int = 256, repeats: int = 3) -> float:
    """Seconds per token of a forward of ``tokens`` new tokens (no cache), the fastest
    of ``repeats``: the model's best per-token cost on this CPU (its weight products
    have enough rows to run at the arithmetic rate: (5) of the module docstring)."""
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        model(input_ids=ids.to(model.device), logits_to_keep=1)
        best = min(best, time.perf_counter() - started)
    return best / tokens


def ceiling(side: dict, done: int, token_s: float, threads: int) -> dict:
    """The rate of ``side`` (``done`` simulations or episodes) had each token its engine
    ran cost ``token_s`` and nothing else taken time but the critic's forwards."""
    tokens = sum(side["engine"]["tokens"].values())
    seconds = tokens * token_s + side["engine"]["seconds"].get("critic", 0.0)
    return {"tokens": tokens, "seconds": seconds, "per_min": 60 * done / seconds, "per_cpu_min": 60 * done / (seconds * threads)}


def report(r: dict) -> str:
    a, m, e = r["agreement"], r["mcts"], r["eval"]
    gap = f"{a['mean_logprob_gap']:.2e}" if a["mean_logprob_gap"] is not None else "-"

    def load(side: dict) -> str:
        return f"load {side['load_average'][0]:.2f}->{side['load_average'][1]:.2f}"

    lines = [
        f"\n## Shared decode steps (hf_batched, rows {r['rows']}) vs the sequential HF engine\n",
        f"- torch threads {r['threads']}; greedy agreement on {a['states']} WebShop states: identical completions "
        f"{a['identical_completions']}, identical commands {a['identical_commands']}; mean |log-prob gap| {gap} nats",
    ]
    for name in ("hf", "hf_batched"):
        s, v = m[name], e[name]
        lines.append(
            f"- {name} x{s['concurrency']}: MCTS {s['sims_per_min']:.2f} sims/min, {s['sims_per_cpu_min']:.2f} sims/CPU-min "
            f"({s['simulations']} simulations, {s['goals']} goals, {load(s)}); zero-shot {v['episodes_per_min']:.2f} "
            f"episodes/min ({v['goals']} goals, {v['avg_steps']:.1f} steps each, average reward {v['avg_reward']:.3f}, {load(v)})"
        )
    for phase, side in (("MCTS", m["hf_batched"]), ("zero-shot", e["hf_batched"])):
        p = side["engine"]
        spent = ", ".join(
            f"{kind} {seconds:.0f} s" + (f" ({p['tokens'][kind]:,} tokens)" if kind in p["tokens"] else "")
            for kind, seconds in sorted(p["seconds"].items(), key=lambda kv: -kv[1])
        )
        lines.append(
            f"- hf_batched engine thread, {phase} ({side['seconds']:.0f} s wall): {spent}; {p['steps']} shared steps, "
            f"{p['requests_per_step']:.1f} requests and {p['rows_per_step']:.1f} rows per step"
        )
    mc, ec = m["ceiling"], e["ceiling"]
    lines.append(
        f"- ceiling at the model's best per-token cost ({1000 * r['token_seconds']:.2f} ms/token, a 256-token forward): "
        f"MCTS {mc['per_min']:.1f} sims/min, {mc['per_cpu_min']:.1f} sims/CPU-min ({mc['tokens']:,} tokens + the critic "
        f"in {mc['seconds']:.0f} s) = {mc['ratio_cpu']:.1f}x the HF path per CPU-min; zero-shot {ec['per_min']:.1f} "
        f"episodes/min ({ec['tokens']:,} tokens in {ec['seconds']:.0f} s) = {ec['ratio']:.1f}x"
    )
    lines.append(
        f"- hf_batched / hf: MCTS {m['ratio_wall']:.2f}x sims/min, {m['ratio_cpu']:.2f}x sims/CPU-min; "
        f"episodes {e['ratio']:.2f}x, steps {e['ratio_steps']:.2f}x"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    cli(parse_args, run, report)
