"""The searches' decode step on an fp32, a bf16 and an int8 copy of the policy: is there speed left
in the weights' number format?

A search's time is its decode steps (docs/scaling.md, "Where the time goes"): with
``engine=hf_batched`` the requests in flight share each step
(:func:`agentq.models.ragged.decode_step`), whose weight products run on ``rows`` token rows. bf16
left the searches as fast as fp32 (experiments/webshop_engine_bf16). This measures the same step on
three copies of the model:

- ``float32``: the engine's default;
- ``bfloat16``: ``engine.dtype=bfloat16``'s copy (the weights cast);
- ``int8``: torch's dynamic quantization of every ``nn.Linear`` (int8 weights, activations
  quantized per step; ``torch.ao.quantization.quantize_dynamic``). No engine option builds it:
  this asks whether one would be worth building.

``--requests`` agent prompts on WebShop training goals (search, results and item pages) are
prefilled into one KV cache each (untimed); then ``--steps`` greedy decode steps run all requests
at once with ``rows`` token rows, timed per step. The copies are interleaved within each repeat
and the median step is reported. Greedy agreement: each request's ``--steps`` greedy tokens on a
copy against fp32's (identical sequences, and the mean share of positions before the first
difference); fp32 against its own first repeat checks that a step is deterministic.

    python -m benchmarks.bench_decode_int8                 # embedded SmolLM2-135M
    python -m benchmarks.bench_decode_int8 --model tiny    # random tiny model: a smoke test
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.common import add_model_argument, cli, load_model

COPIES = ("float32", "bfloat16", "int8")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_argument(parser)
    parser.add_argument("--requests", type=int, default=8, help="requests in flight (one row each)")
    parser.add_argument("--rows", type=int, default=8, help="token rows of every weight product (engine.rows)")
    parser.add_argument("--steps", type=int, default=32, help="greedy decode steps, timed")
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (the copies interleaved)")
    parser.add_argument("--max-prompt-tokens", type=int, default=2048)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return parser.parse_args(argv)


def copies(model) -> dict[str, torch.nn.Module]:
    from torch.ao.quantization import quantize_dynamic

    half = copy.deepcopy(model).to(torch.bfloat16)
    int8 = quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
    return {"float32": model, "bfloat16": half, "int8": int8}


@torch.no_grad()
def decode(model, prompts: list[list[int]], steps: int, rows: int) -> tuple[list[float], list[list[int]]]:
    """Seconds of each shared greedy step, and each request's greedy tokens."""
    from agentq.models.ragged import decode_step

    caches, tokens = [], []
    for ids in prompts:  # the prefill, untimed: the model's own forward, as the engine runs it
        out = model(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=1)
        caches.append(out.past_key_values)
        tokens.append([int(out.logits[0, -1].float().argmax())])
    seconds = []
    for _ in range(steps):
        requests = [(cache, torch.tensor(row[-1:])) for cache, row in zip(caches, tokens, strict=True)]
        started = time.perf_counter()
        logits = decode_step(model, requests, rows=rows)
        seconds.append(time.perf_counter() - started)
        for row, out in zip(tokens, logits, strict=True):
            row.append(int(out[0].float().argmax()))
    return seconds, tokens


def agreement(tokens: list[list[int]], reference: list[list[int]]) -> dict[str, float]:
    same = [next((i for i, (a, b) in enumerate(zip(t, r, strict=True)) if a != b), len(r)) for t, r in zip(tokens, reference, strict=True)]
    return {
        "identical": sum(s == len(r) for s, r in zip(same, reference, strict=True)) / len(reference),
        "equal_prefix": statistics.mean(s / len(r) for s, r in zip(same, reference, strict=True)),
    }


def run(args: argparse.Namespace) -> dict:
    from agentq.agent.policy import encode_chat
    from benchmarks.bench_dpo import webshop_prompts

    model, tokenizer = load_model(args.model, "float32")
    model.eval()
    prompts = [encode_chat(tokenizer, p, args.max_prompt_tokens) for p in webshop_prompts(args.requests, (0, 1, 2))]
    models = copies(model)
    steps: dict[str, list[float]] = {name: [] for name in COPIES}
    tokens: dict[str, list[list[list[int]]]] = {name: [] for name in COPIES}
    for _ in range(args.repeats):
        for name, m in models.items():
            seconds, greedy = decode(m, prompts, args.steps, args.rows)
            steps[name].append(statistics.median(seconds))
            tokens[name].append(greedy)
    fp32 = tokens["float32"][0]
    return {
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "requests": args.requests, "rows": args.rows, "steps": args.steps, "repeats": args.repeats,
        "prompt_tokens": [len(p) for p in prompts],
        "step_ms": {name: 1000 * statistics.median(s) for name, s in steps.items()},
        "speedup": {name: statistics.median(steps["float32"]) / statistics.median(s) for name, s in steps.items()},
        "agreement": {name: agreement(t[0], fp32) for name, t in tokens.items() if name != "float32"}
        | {"float32, its repeats": agreement(tokens["float32"][-1], fp32)},
    }  # fmt: skip


def report(r: dict) -> str:
    lines = [
        f"{r['requests']} requests ({min(r['prompt_tokens'])}-{max(r['prompt_tokens'])} prompt tokens), rows={r['rows']}, "
        f"{r['steps']} greedy steps, {r['threads']} threads, {r['cpu_capability']}; median of {r['repeats']} interleaved repeats",
        "| copy | ms per shared step | fp32 / copy |",
        "|---|---|---|",
        *(f"| {name} | {r['step_ms'][name]:.1f} | {r['speedup'][name]:.2f}x |" for name in COPIES),
        "",
        "| greedy tokens against fp32's | identical requests | positions before the first difference |",
        "|---|---|---|",
        *(f"| {name} | {a['identical']:.0%} | {a['equal_prefix']:.0%} |" for name, a in r["agreement"].items()),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict:
    return cli(lambda: parse_args(argv), run, report)


if __name__ == "__main__":
    main()
