"""Does a request on the OpenVINO engine depend on the requests beside it?

Each of N WebShop prompts (the engine benchmark's states: half search pages, half
result pages) is sampled with its own seed, K samples of at most 48 tokens at
temperature 1: once alone, one request after another, twice (are sequential
requests reproducible?), then all N at once, ``--rounds`` times (as concurrent
searches send them). A sample of the concurrent rounds is compared with the same
request's sample alone: identical tokens and log-prob, identical tokens with
another log-prob (rounding), or other tokens (rounding that moved the seed's draw
across the boundary between two tokens).

    python -m benchmarks.bench_openvino_batches              # embedded SmolLM2-135M
    python -m benchmarks.bench_openvino_batches --model tiny # the tiny random model
"""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import torch

from agentq.models.openvino_engine import OpenVINOEngine
from benchmarks.bench_engine import compose_parts, states
from benchmarks.common import add_model_argument, cli, load_model

COUNTS = ("samples", "identical", "other_logprob", "other_tokens")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(parser)
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def draws(engine: OpenVINOEngine, prompts: list[list[int]], ks: list[int], eos: set[int], together: bool) -> list[list]:
    """Every prompt's samples (tokens, log-prob), its seed its index: one after another or all at once."""
    out: list = [None] * len(prompts)

    def draw(i: int) -> None:
        samples = engine.sample(prompts[i], ks[i], max_new_tokens=48, temperature=1.0, top_p=1.0,
                                eos_token_ids=eos, generator=torch.Generator().manual_seed(i))  # fmt: skip
        out[i] = [(s.token_ids, s.logprob) for s in samples]

    if not together:
        for i in range(len(prompts)):
            draw(i)
        return out
    threads = [threading.Thread(target=draw, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def compare(alone: list[list], other: list[list]) -> dict:
    counts = dict.fromkeys(COUNTS, 0) | {"max_logprob_gap": 0.0}
    for a, b in zip(alone, other, strict=True):
        for (tokens_a, logprob_a), (tokens_b, logprob_b) in zip(a, b, strict=True):
            counts["samples"] += 1
            if tokens_a != tokens_b:
                counts["other_tokens"] += 1
            elif logprob_a != logprob_b:
                counts["other_logprob"] += 1
                counts["max_logprob_gap"] = max(counts["max_logprob_gap"], abs(logprob_a - logprob_b))
            else:
                counts["identical"] += 1
    return counts


def run(args: argparse.Namespace) -> dict:
    parts = compose_parts(argparse.Namespace(simulations=1, quick=args.model == "tiny"), "engine=openvino", "agent.sampling.temperature=1.0",
                          "trainer.use_logged_reference=false")
    model, tokenizer = load_model(args.model)
    policy = parts.policy(model, tokenizer)
    test_ids = list(parts.env.unwrapped.task_ids("test"))[: args.prompts]
    prompts = [policy.encode(policy.prompt(history)) for history in states(parts.env, test_ids)]
    engine = parts.engine(model.eval(), tokenizer)
    results = {"model": args.model, "prompt_tokens": [len(p) for p in prompts], "load_average": os.getloadavg()}
    try:
        for name, ks in {"k=1": [1] * len(prompts), "k=3": [3] * len(prompts), "k=1..3": [1 + i % 3 for i in range(len(prompts))]}.items():
            alone = draws(engine, prompts, ks, policy.eos_token_ids, together=False)
            rounds = [compare(alone, draws(engine, prompts, ks, policy.eos_token_ids, together=True)) for _ in range(args.rounds)]
            concurrent = {key: sum(c[key] for c in rounds) for key in COUNTS} | {"max_logprob_gap": max(c["max_logprob_gap"] for c in rounds)}
            results[name] = {"sequential_again": compare(alone, draws(engine, prompts, ks, policy.eos_token_ids, together=False)),
                             "concurrent": concurrent}  # fmt: skip
    finally:
        engine.close()
    results["load_average_after"] = os.getloadavg()
    return results


def report(r: dict) -> str:
    lines = [f"model {r['model']}, prompts of {min(r['prompt_tokens'])}-{max(r['prompt_tokens'])} tokens, "
             f"load average {r['load_average'][0]:.2f} -> {r['load_average_after'][0]:.2f}"]  # fmt: skip
    for name in ("k=1", "k=3", "k=1..3"):
        for how in ("sequential_again", "concurrent"):
            c = r[name][how]
            lines.append(f"{name:7} {how:17} {c['samples']:5} samples: {c['identical']} identical, "
                         f"{c['other_logprob']} same tokens other log-prob (at most {c['max_logprob_gap']:.1e} nats apart), "
                         f"{c['other_tokens']} other tokens")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    cli(parse_args, run, report)
