"""The HF engine in bf16 against fp32 on WebShop, end to end, in one run.

``engine.dtype=bfloat16`` decodes a bf16 copy of the policy (and runs the critic
on it); training keeps fp32. What it buys and what it changes, on the same goals:

(1) greedy agreement: the first action of ``--agreement`` WebShop states (half
    search pages, half result pages), fp32 vs bf16, both with the headline's
    COMMAND constraint: identical completions, identical commands;
(2) MCTS simulations per minute, the headline's search (5 simulations, K=3,
    depth 6, temperature 0.7, the critic on the same weights) on ``--goals``
    training goals, fp32 then bf16;
(3) zero-shot evaluation episodes per minute on ``--eval-goals`` test goals,
    fp32 then bf16 (greedy, the 15-step budget), with the episodes' rewards.

Both sides run in this process, one after the other, never beside each other;
the load average is reported around each.

    python -m benchmarks.bench_hf_dtype            # embedded SmolLM2-135M
    python -m benchmarks.bench_hf_dtype --quick    # tiny model, few goals: a smoke test
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from agentq.components import Weights
from agentq.models.engine import HFEngine
from benchmarks.bench_engine import agreement, compose_parts, episodes, searches
from benchmarks.common import cli

DTYPES = ("float32", "bfloat16")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, few goals")
    parser.add_argument("--agreement", type=int, default=50, help="states compared greedily")
    parser.add_argument("--goals", type=int, default=3, help="training goals searched by each side")
    parser.add_argument("--eval-goals", type=int, default=10, help="test goals evaluated by each side")
    parser.add_argument("--simulations", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.agreement, args.goals, args.eval_goals, args.simulations = 4, 1, 2, 2
    return args


def run(args: argparse.Namespace) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parts = compose_parts(args)
    model, tokenizer = parts.model.load()
    model.eval()
    engines = {dtype: HFEngine(model, tokenizer, dtype=dtype) for dtype in DTYPES}
    weights = {dtype: Weights(model, tokenizer, engine=engine) for dtype, engine in engines.items()}
    train_ids = list(parts.env.unwrapped.task_ids("train"))[: args.goals]
    test_ids = list(parts.env.unwrapped.task_ids("test"))[: args.eval_goals]
    out = {"threads": torch.get_num_threads(), "agreement": agreement(parts, model, tokenizer, engines["bfloat16"], args.agreement)}
    out["mcts"] = {dtype: searches(parts, weights[dtype], train_ids, 1) for dtype in DTYPES}
    out["eval"] = {dtype: episodes(parts, weights[dtype], test_ids, 1) for dtype in DTYPES}
    out["mcts"]["ratio"] = out["mcts"]["bfloat16"]["sims_per_min"] / out["mcts"]["float32"]["sims_per_min"]
    out["eval"]["ratio"] = out["eval"]["bfloat16"]["episodes_per_min"] / out["eval"]["float32"]["episodes_per_min"]
    out["eval"]["ratio_steps"] = out["eval"]["bfloat16"]["steps_per_min"] / out["eval"]["float32"]["steps_per_min"]
    parts.close()
    return out


def report(r: dict) -> str:
    a, m, e = r["agreement"], r["mcts"], r["eval"]
    lines = [
        "\n## The HF engine: bf16 copy vs fp32 (the same weights, the same goals)\n",
        f"- torch threads {r['threads']}; greedy agreement on {a['states']} WebShop states: identical completions "
        f"{a['identical_completions']}, identical commands {a['identical_commands']}",
    ]
    for dtype in DTYPES:
        s, v = m[dtype], e[dtype]
        lines.append(
            f"- {dtype}: MCTS {s['sims_per_min']:.2f} sims/min ({s['simulations']} simulations, {s['goals']} goals, load "
            f"{s['load_average'][0]:.2f}->{s['load_average'][1]:.2f}); zero-shot {v['episodes_per_min']:.2f} episodes/min "
            f"({v['goals']} goals, {v['avg_steps']:.1f} steps each, average reward {v['avg_reward']:.3f}, load "
            f"{v['load_average'][0]:.2f}->{v['load_average'][1]:.2f})"
        )
    lines.append(f"- bf16 / fp32: MCTS {m['ratio']:.2f}x, episodes {e['ratio']:.2f}x, steps {e['ratio_steps']:.2f}x")
    return "\n".join(lines)


if __name__ == "__main__":
    cli(parse_args, run, report)
