"""Time K-candidate sampling for one search node, three ways, in one run.

(a) ``agentq.models.sample_k``: one prefill, KV cache repeated K times, batched decode;
(b) ``model.generate(num_return_sequences=K)``: prefills the prompt K times, batched decode;
(c) K separate ``model.generate`` calls.

Timed runs sample at ``--temperature`` and all methods produce exactly
``--max-new-tokens`` tokens (end tokens are not allowed to stop any method), so
each does the same work. The methods are interleaved within each repeat so a
busy neighbour on a shared machine slows all of them alike; the median is
reported. A separate greedy run checks that (a), (b) and (c) produce identical
tokens.

    python -m benchmarks.bench_sampling                 # embedded SmolLM2-135M (from the repo root)
    python -m benchmarks.bench_sampling --model tiny    # random tiny model, a smoke test

``run(parse_args([...]))`` returns the figures as a dict (``benchmarks/run_all.py``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
import transformers

from agentq.models import sample_k
from benchmarks.common import add_model_argument, cli, load_model


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_argument(parser)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=800, help="approximate prompt length")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def node_prompt(tokenizer, target_tokens: int) -> list[int]:
    """A WebShop-like agent prompt: instructions, the composite action format, a results page."""
    system = (
        "You are a web shopping agent. At each step reply with THOUGHT (your reasoning), "
        "COMMAND (one of: search[query], click[element], back, next, prev, buy) and "
        "EXPLANATION (what the command does and why). On the first step also give a numbered "
        "PLAN. End with STATUS: CONTINUE, SUCCESS, FAILURE or ASK_USER."
    )
    colours = ["black", "navy", "white", "grey", "olive", "red", "beige", "teal"]
    items = ["hiking boots", "rain jacket", "wool socks", "running shoes", "fleece vest"]
    lines = [
        "Instruction: i need waterproof men's hiking boots, size 10.5, under 90 dollars.",
        "Page 1 of 12. Results:",
    ]
    messages = []
    for i in range(1000):
        colour, item = colours[i % len(colours)], items[i % len(items)]
        lines.append(
            f"[{i + 1}] B0{7 + i % 3}{i:07d} | {colour.title()} {item}, breathable, lightweight, "
            f"non-slip sole | rating {3 + i % 3}.{i % 10} | ${19 + (i * 7) % 110}.99"
        )
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": "\n".join(lines)},
        ]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
        if len(ids) >= target_tokens:
            return ids
    return ids


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Time (a), (b) and (c) and check their greedy tokens; returns the figures (see :func:`report`)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model, tokenizer = load_model(args.model)
    load_seconds = time.perf_counter() - started
    prompt = node_prompt(tokenizer, args.prompt_tokens)
    eos = tokenizer.eos_token_id
    k, n = args.k, args.max_new_tokens
    ids = torch.tensor([prompt])  # (1, P)
    mask = torch.ones_like(ids)

    def generate(num_return_sequences: int, greedy: bool) -> torch.Tensor:
        if greedy:
            # transformers 5.23 refuses num_return_sequences > 1 without sampling; feed the
            # prompt K times instead, which is what num_return_sequences does internally.
            batch = ids.expand(num_return_sequences, -1)
            out = model.generate(
                batch,
                attention_mask=torch.ones_like(batch),
                max_new_tokens=n,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
        else:
            # min_new_tokens = max_new_tokens: the end token cannot stop a timed run early.
            out = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=n,
                min_new_tokens=n,
                num_return_sequences=num_return_sequences,
                do_sample=True,
                temperature=args.temperature,
                top_p=1.0,
                top_k=0,
                pad_token_id=tokenizer.pad_token_id,
            )
        return out[:, len(prompt) :]  # (R, N)

    def ours(greedy: bool) -> list[tuple[int, ...]]:
        samples = sample_k(
            model,
            prompt,
            k,
            tokenizer=tokenizer,
            max_new_tokens=n,
            temperature=0.0 if greedy else args.temperature,
            eos_token_ids={eos} if greedy else (),  # no early stop in timed runs
            generator=torch.Generator().manual_seed(args.seed),
        )
        return [s.token_ids for s in samples]

    methods = {
        "(a) sample_k: one prefill + batch_repeat_interleave": lambda: ours(greedy=False),
        "(b) generate(num_return_sequences=K)": lambda: generate(k, greedy=False),
        "(c) K x generate()": lambda: [generate(1, greedy=False) for _ in range(k)],
    }

    # Greedy check (also warms every code path up before timing).
    greedy_a = ours(greedy=True)
    greedy_b = [tuple(row) for row in generate(k, greedy=True).tolist()]
    greedy_c = [tuple(row) for row in generate(1, greedy=True).tolist()]

    def strip(seq: tuple[int, ...]) -> tuple[int, ...]:  # generate pads after the end token
        return seq[: seq.index(eos) + 1] if eos in seq else seq

    greedy_b, greedy_c = [strip(s) for s in greedy_b], [strip(s) for s in greedy_c]
    identical = greedy_a == greedy_b and greedy_a[0] == greedy_c[0]

    load_before = os.getloadavg()
    times: dict[str, list[float]] = {name: [] for name in methods}
    torch.manual_seed(args.seed)
    for _ in range(args.repeats):
        for name, method in methods.items():
            t0 = time.perf_counter()
            method()
            times[name].append(time.perf_counter() - t0)
    load_after = os.getloadavg()

    median = {name: statistics.median(seconds) for name, seconds in times.items()}
    baseline = next(iter(median.values()))
    return {
        "model": args.model,
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "load_average": [load_before[0], load_after[0]],
        "load_seconds": load_seconds,
        "prompt_tokens": len(prompt),
        "k": k,
        "new_tokens": n,
        "temperature": args.temperature,
        "repeats": args.repeats,
        "identical": identical,
        "median_s": median,
        "min_s": {name: min(seconds) for name, seconds in times.items()},
        "ratio_over_a": {name: m / baseline for name, m in median.items()},
    }


def report(results: dict[str, Any]) -> str:
    """The figures as markdown."""
    lines = [
        f"## K-candidate sampling for one node ({results['model']})\n",
        f"- machine: {results['machine']}, os.cpu_count()={os.cpu_count()}, "
        f"torch threads={results['threads']}, torch {results['versions']['torch']}, "
        f"transformers {results['versions']['transformers']}",
        f"- load average (1 min) before/after timing: {results['load_average'][0]:.2f} / "
        f"{results['load_average'][1]:.2f} (above the core count means other processes shared the CPU)",
        f"- model load: {results['load_seconds']:.2f} s",
        f"- prompt {results['prompt_tokens']} tokens, K={results['k']}, {results['new_tokens']} new tokens each, "
        f"temperature {results['temperature']}, {results['repeats']} repeats (interleaved)",
        f"- greedy tokens identical for (a), (b) and (c): {results['identical']}\n",
        "| method | median s | min s | median / (a) |",
        "|---|---:|---:|---:|",
    ]
    for name, median in results["median_s"].items():
        lines.append(
            f"| {name} | {median:.2f} | {results['min_s'][name]:.2f} | {results['ratio_over_a'][name]:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    results = cli(parse_args, run, report)
    if not results["identical"]:
        raise SystemExit("greedy outputs differ between (a), (b) and (c)")


if __name__ == "__main__":
    main()
