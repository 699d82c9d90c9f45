"""bf16 against fp32 on CPU (``model.dtype``): speed, greedy agreement, and training.

Two copies of the model are loaded, one per dtype (``EmbeddedSmolLM2(dtype=...)``,
what ``model.dtype=bfloat16`` builds), and measured side by side, the dtypes
interleaved within each repeat so a busy neighbour slows both alike; medians
are reported.

- prefill: one forward of a ``--prefill-tokens`` prompt with ``use_cache`` and
  logits at the last position only (how ``sample_k`` prefills); the prompt is
  the agent's prompt on a WebShop results page, its newest tokens kept;
- decode: per-token time of ``--new-tokens`` greedy steps from that KV cache;
- composite action: ``agentq.models.sample_k`` on the same prompt, greedy,
  exactly ``--new-tokens`` tokens (end tokens do not stop it), as one call;
- greedy agreement: on ``--prompts`` agent prompts (WebShop search, results and
  item pages of different goals), the greedy completion (``--new-tokens``,
  stopping at the end token) of each dtype: the fraction of prompts whose
  completions are identical, and the mean fraction of the fp32 completion's
  positions that bf16 matches before the first divergence; plus both models'
  summed log-prob of the fp32 completion (teacher-forced), whose difference is
  what a bf16-logged reference would put into DPO's Δ;
- training (``--train-steps``, 0 skips it): our step-DPO training step
  (:func:`benchmarks.bench_dpo.our_side`: LoRA, shared prefix, logged
  reference) on a bf16 model vs an fp32 one, interleaved; whether loss and
  gradients stay finite, the LoRA parameters' dtype (peft keeps the adapter in
  fp32 over a bf16 base), how far lora_B moved, and how much of the adapter's
  weight delta survives ``merge_and_unload`` into the bf16 weights (the loop
  merges after every iteration); then one call of ``agentq.training.fit``
  (Lightning) on the bf16 model.

    python -m benchmarks.bench_precision                 # embedded SmolLM2-135M
    python -m benchmarks.bench_precision --model tiny    # random tiny model: a smoke test
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from benchmarks.bench_dpo import (
    compose,
    our_side,
    reference_logps,
    sample_pairs,
    webshop_prompts,
)
from benchmarks.common import add_model_argument, cli, load_model

DTYPES = ("float32", "bfloat16")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_argument(parser)
    parser.add_argument("--prefill-tokens", type=int, default=1500)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (interleaved)")
    parser.add_argument("--prompts", type=int, default=12, help="prompts for greedy agreement")
    parser.add_argument("--train-steps", type=int, default=3, help="timed DPO steps per dtype (0: skip)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return parser.parse_args(argv)


# --------------------------------------------------------------------- inference


def prefill(model, ids: list[int]):
    """KV cache and last-position logits (1, V) of ``ids``, as ``sample_k`` prefills."""
    out = model(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=1)
    return out.past_key_values, out.logits[:, -1]


def seconds(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    started = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - started


def decode(model, ids: list[int], new_tokens: int) -> float:
    """Seconds per greedy token from a prefilled cache (the prefill is not timed)."""
    cache, logits = prefill(model, ids)
    started = time.perf_counter()
    for _ in range(new_tokens):
        next_id = logits.float().argmax(dim=-1, keepdim=True)  # (1, 1)
        logits = model(input_ids=next_id, past_key_values=cache, use_cache=True).logits[:, -1]
    return (time.perf_counter() - started) / new_tokens


def greedy(model, tokenizer, ids: list[int], new_tokens: int, *, stop: bool) -> tuple[int, ...]:
    """One greedy composite action through ``sample_k``; ``stop=False`` ignores end tokens."""
    from agentq.agent.policy import eos_token_ids
    from agentq.models import sample_k

    (sample,) = sample_k(
        model, ids, 1, tokenizer=tokenizer, max_new_tokens=new_tokens, temperature=0.0,
        eos_token_ids=eos_token_ids(tokenizer) if stop else (),
    )  # fmt: skip
    return sample.token_ids


def interleaved(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """The median of what each callable returns (seconds), the callables interleaved within each repeat."""
    measured: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            measured[name].append(fn())
    return {name: statistics.median(values) for name, values in measured.items()}


def agreement(models: dict[str, Any], tokenizer, prompts: Sequence[list[int]], new_tokens: int) -> dict[str, Any]:
    """Greedy completions of fp32 and bf16 on each prompt, compared token by token."""
    from agentq.models import completion_logprobs, pad_pairs

    rows = []
    for ids in prompts:
        full = greedy(models["float32"], tokenizer, ids, new_tokens, stop=True)
        half = greedy(models["bfloat16"], tokenizer, ids, new_tokens, stop=True)
        same = next((i for i, (a, b) in enumerate(zip(full, half, strict=False)) if a != b), min(len(full), len(half)))
        batch = pad_pairs([ids], [list(full)], pad_id=0)
        with torch.no_grad():
            logps = {d: float(completion_logprobs(m, *batch)[0]) for d, m in models.items()}
        rows.append(
            {
                "prompt_tokens": len(ids),
                "tokens": len(full),
                "identical": full == half,
                "equal_prefix": same,
                "logp_fp32": logps["float32"],
                "logp_bf16": logps["bfloat16"],
            }
        )
    gaps = [abs(r["logp_bf16"] - r["logp_fp32"]) for r in rows]
    return {
        "prompts": len(rows),
        "identical_fraction": sum(r["identical"] for r in rows) / len(rows),
        "equal_prefix_fraction": statistics.mean(r["equal_prefix"] / r["tokens"] for r in rows),
        "logp_abs_diff_mean": statistics.mean(gaps),
        "logp_abs_diff_max": max(gaps),
        "logp_abs_diff_per_token": sum(gaps) / sum(r["tokens"] for r in rows),
        "logps_finite": all(math.isfinite(r["logp_bf16"]) for r in rows),
        "rows": rows,
    }


# --------------------------------------------------------------------- training


def merge_fidelity(peft_model) -> dict[str, float]:
    """How much of the adapter's weight delta ``merge_and_unload`` keeps in the base dtype.

    ``||(W_merged - W) - ΔW|| / ||ΔW||`` over all adapted layers (ΔW = scale · B A in
    fp32), and the fraction of ΔW's non-zero entries that left W unchanged.
    """
    from peft.tuners.lora import LoraLayer

    layers = [m for m in peft_model.modules() if isinstance(m, LoraLayer)]
    before = [layer.get_base_layer().weight.detach().clone() for layer in layers]
    deltas = [layer.get_delta_weight("default").detach().float() for layer in layers]
    merged = peft_model.merge_and_unload()
    del merged  # the layers were merged in place: read the weights from the base layers
    error = norm = lost = nonzero = 0.0
    for layer, w0, delta in zip(layers, before, deltas, strict=True):
        applied = layer.get_base_layer().weight.detach().float() - w0.float()
        error += float((applied - delta).pow(2).sum())
        norm += float(delta.pow(2).sum())
        mask = delta != 0
        lost += float(((applied == 0) & mask).sum())
        nonzero += float(mask.sum())
    return {"relative_error": math.sqrt(error / norm) if norm else 0.0, "lost_fraction": lost / nonzero if nonzero else 0.0}


def training(args: argparse.Namespace, tokenizer, pairs_prompts) -> dict[str, Any]:
    """Our DPO step on fp32 and bf16 models, interleaved; then one Lightning fit in bf16."""
    from agentq.agent.policy import encode_chat
    from agentq.records.examples import StepPair
    from agentq.training.data import TokenizedPreference, collate_preferences
    from agentq.training.fit import fit

    cfg = compose()
    sampler, _ = load_model(args.model, "float32")
    pairs = sample_pairs(sampler, tokenizer, pairs_prompts, 40, args.seed)
    del sampler
    # The ids as sampled, as the loop trains on them.
    ids = [(encode_chat(tokenizer, p.prompt, 4096), list(p.chosen_ids), list(p.rejected_ids)) for p in pairs]
    sides, batches = {}, {}
    for dtype in DTYPES:
        model, _ = load_model(args.model, dtype)
        ref_c, ref_r = reference_logps(model, ids)  # each dtype's own logged reference
        items = [
            TokenizedPreference(chosen=[(p, c)], rejected=[(p, r)], chosen_logprob=a, rejected_logprob=b)
            for (p, c, r), a, b in zip(ids, ref_c, ref_r, strict=True)
        ]
        batches[dtype] = [collate_preferences([item]) for item in items]
        sides[dtype] = our_side(cfg, model, shared_prefix=True, batch_size=1, seed=args.seed)

    step_seconds: dict[str, list[float]] = {d: [] for d in DTYPES}
    losses: dict[str, list[float]] = {d: [] for d in DTYPES}
    grads_finite = {d: True for d in DTYPES}
    with warnings.catch_warnings():
        # The module logs through self.log, which has no Lightning trainer to write to here.
        warnings.filterwarnings("ignore", message=r".*`self\.log\(\)`.*trainer.*")
        for step in range(len(pairs)):
            for dtype, side in sides.items():
                batch = batches[dtype][step]
                started = time.perf_counter()
                loss = side.module.training_step(batch, step)
                loss.backward()
                params = [p for p in side.module.parameters() if p.requires_grad]
                grads_finite[dtype] &= all(bool(torch.isfinite(p.grad).all()) for p in params)
                torch.nn.utils.clip_grad_norm_(params, side.clip)
                side.optimizer.step()
                side.optimizer.zero_grad(set_to_none=True)
                step_seconds[dtype].append(time.perf_counter() - started)
                losses[dtype].append(float(loss.detach()))

    result: dict[str, Any] = {"steps": len(pairs) - 1}
    for dtype, side in sides.items():
        peft_model = side.module.model
        lora = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
        result[dtype] = {
            "median_s": statistics.median(step_seconds[dtype][1:]),  # the first step is warm-up
            "losses": losses[dtype],
            "loss_finite": all(math.isfinite(x) for x in losses[dtype]),
            "grads_finite": grads_finite[dtype],
            "lora_dtype": str(lora[0].dtype).removeprefix("torch."),
            "base_dtype": str(peft_model.get_base_model().dtype).removeprefix("torch."),
            "lora_b_absmax": max(float(p.detach().abs().max()) for p in lora),
            "merge": merge_fidelity(peft_model),
        }

    # The Lightning path the loop takes (agentq.training.fit), on a fresh bf16 model.
    model, _ = load_model(args.model, "bfloat16")
    steps = [
        StepPair(0, i, p.prompt, p.chosen, p.rejected, list(p.chosen_ids), list(p.rejected_ids), 0.0, 0.0, 1.0, 0.0, 1, 1)
        for i, p in enumerate(pairs[:2])
    ]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            peft_model, metrics = fit(
                model, tokenizer, steps, objective=instantiate(cfg.objective),
                optimizer=instantiate(cfg.trainer.optimizer), lora=instantiate(cfg.trainer.lora, _convert_="all"),
                lightning={**OmegaConf.to_container(cfg.trainer.lightning, resolve=True), "max_epochs": 1, "enable_progress_bar": False},
                out_dir=Path(tmp), batch_size=1, use_logged_reference=False, shared_prefix=True,
            )  # fmt: skip
            result["fit_bf16"] = {"ok": True, "metrics": metrics, "loss_finite": math.isfinite(metrics["loss"])}
        except Exception as error:  # report what breaks instead of hiding the other figures
            result["fit_bf16"] = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    return result


# --------------------------------------------------------------------- the benchmark


def run(args: argparse.Namespace) -> dict[str, Any]:
    from agentq.agent.policy import encode_chat

    if args.threads:
        torch.set_num_threads(args.threads)
    models, tokenizer = {}, None
    for dtype in DTYPES:
        models[dtype], tokenizer = load_model(args.model, dtype)
    goals = args.prompts + 1
    messages = webshop_prompts(goals, depths=(1, 0, 2))  # the first: a results page (~1,600 tokens)
    long_prompt = encode_chat(tokenizer, messages[0], max_tokens=args.prefill_tokens)
    prompts = [encode_chat(tokenizer, m, max_tokens=4096) for m in messages[1:]]

    n = args.new_tokens
    load_before = os.getloadavg()[0]
    with torch.no_grad():
        for model in models.values():  # warm-up: first calls allocate
            greedy(model, tokenizer, long_prompt, 2, stop=False)
        runs: dict[str, Callable[[], float]] = {}
        for dtype, model in models.items():
            runs[f"prefill/{dtype}"] = lambda m=model: seconds(prefill, m, long_prompt)
            runs[f"decode/{dtype}"] = lambda m=model: decode(m, long_prompt, n)
            runs[f"composite/{dtype}"] = lambda m=model: seconds(greedy, m, tokenizer, long_prompt, n, stop=False)
        timing = interleaved(runs, args.repeats)
        agree = agreement(models, tokenizer, prompts, n)
    load_after = os.getloadavg()[0]
    del models

    results: dict[str, Any] = {
        "model": args.model,
        "threads": torch.get_num_threads(),
        "prefill_tokens": len(long_prompt),
        "new_tokens": n,
        "repeats": args.repeats,
        "timing": timing,
        "agreement": agree,
        "load_average": [load_before, load_after],
    }
    for what in ("prefill", "decode", "composite"):
        results[f"{what}_speedup"] = timing[f"{what}/float32"] / timing[f"{what}/bfloat16"]
    if args.train_steps > 0:
        results["training"] = training(args, tokenizer, webshop_prompts(args.train_steps + 1, first_task=goals))
    return results


def report(results: dict[str, Any]) -> str:
    t, a = results["timing"], results["agreement"]
    lines = [
        f"## bf16 vs fp32 on CPU ({results['model']}, torch threads {results['threads']})\n",
        f"- load average (1 min) before/after: {results['load_average'][0]:.2f} / {results['load_average'][1]:.2f}",
        f"- prompt {results['prefill_tokens']} tokens, {results['new_tokens']} new tokens, "
        f"median of {results['repeats']} interleaved repeats\n",
        "| measure | fp32 | bf16 | fp32 / bf16 |",
        "|---|---:|---:|---:|",
        f"| prefill {results['prefill_tokens']} tokens (s) | {t['prefill/float32']:.2f} | "
        f"{t['prefill/bfloat16']:.2f} | {results['prefill_speedup']:.2f} |",
        f"| decode (ms / token) | {1e3 * t['decode/float32']:.1f} | {1e3 * t['decode/bfloat16']:.1f} | "
        f"{results['decode_speedup']:.2f} |",
        f"| composite action, sample_k greedy {results['new_tokens']} tokens (s) | {t['composite/float32']:.2f} | "
        f"{t['composite/bfloat16']:.2f} | {results['composite_speedup']:.2f} |",
    ]
    train = results.get("training")
    if train:
        lines.append(
            f"| DPO step, batch 1, shared prefix (s, median of {train['steps']}) | "
            f"{train['float32']['median_s']:.2f} | {train['bfloat16']['median_s']:.2f} | "
            f"{train['float32']['median_s'] / train['bfloat16']['median_s']:.2f} |"
        )
    lines += [
        "",
        f"- greedy agreement over {a['prompts']} WebShop prompts: identical completions "
        f"{a['identical_fraction']:.0%}; positions equal before the first divergence {a['equal_prefix_fraction']:.0%}",
        f"- log-prob of the fp32 greedy completion, |bf16 - fp32|: mean {a['logp_abs_diff_mean']:.3f} nats per "
        f"completion (max {a['logp_abs_diff_max']:.3f}), {a['logp_abs_diff_per_token']:.4f} per token; "
        f"bf16 log-probs finite: {a['logps_finite']}",
    ]
    if train:
        half = train["bfloat16"]
        lines.append(
            f"- bf16 training: losses finite {half['loss_finite']}, gradients finite {half['grads_finite']}, "
            f"base {half['base_dtype']} with LoRA in {half['lora_dtype']}, lora_B |max| {half['lora_b_absmax']:.1e} "
            f"after {train['steps'] + 1} steps; merge into bf16 keeps the adapter delta with relative error "
            f"{half['merge']['relative_error']:.2f} ({half['merge']['lost_fraction']:.0%} of its entries rounded away; "
            f"fp32: {train['float32']['merge']['relative_error']:.1e})"
        )
        fit_bf16 = train["fit_bf16"]
        lines.append(
            "- agentq.training.fit (Lightning) on the bf16 model: "
            + (f"ran, loss {fit_bf16['metrics']['loss']:.4f}" if fit_bf16["ok"] else f"failed: {fit_bf16['error']}")
        )
    return "\n".join(lines)


def main() -> None:
    cli(parse_args, run, report)


if __name__ == "__main__":
    main()
