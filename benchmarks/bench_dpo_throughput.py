"""Step-DPO pairs per minute: each pair's history once vs each search node's history once, fp32 and bf16.

MCTS pairs a node's sibling actions (``StepPairBuilder``: every two children
whose values differ), so a node with K candidates gives up to K(K-1)/2 pairs
that share one history. The pairs here: ``--nodes`` nodes, each the agent's
real WebShop prompt (search, results and item pages of different goals: ~1,000
to 1,600 tokens, chat-templated; :func:`benchmarks.bench_dpo.webshop_prompts`)
with ``--k`` composite actions the model sampled for it (temperature 0.7,
``--completion-tokens`` each) and all K(K-1)/2 pairs of them. Three sides train
the same fresh LoRA adapter (conf/trainer/cpu.yaml, lora_B drawn from
N(0, ``--lora-b-std``) so the policy differs from the reference), each on its
own copy of the model:

- (a) per pair, fp32: the loader's plain shuffled batches, each pair's history
  scored once for its two actions (``pair_logprobs``): training before node
  grouping;
- (b) node-grouped, bf16: the node-grouped batches (``EpochSampler`` with
  ``groups``: a node's pairs together), each distinct history once for all the
  batch's distinct actions after it (``shared_prompt_logprobs``), inside
  Lightning's ``bf16-mixed`` autocast (fp32 weights);
- (b') node-grouped, fp32: (b)'s batches and scoring without autocast.

A step is what Lightning's automatic optimisation runs:
``PreferenceModule.training_step`` (policy forward, then the reference forward
with the adapter disabled: ``use_logged_reference=false``, the default), backward,
gradient clip, AdamW step. Steps interleave (a, b, b') so a busy neighbour slows
all of them alike; the first step of each side is warm-up. Pairs per minute are
the pairs of the timed steps over their seconds.

Loss agreement, untimed, before any step: on the first ``--check-batches``
batches of (b)'s order, the loss of (a)'s computation, (b') and (b) at the same
weights; |b' - a| is float noise, |b - a| is bf16's.

    python -m benchmarks.bench_dpo_throughput               # embedded SmolLM2-135M, batch sizes 2, 4 and 8
    python -m benchmarks.bench_dpo_throughput --quick       # random tiny model: a smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate

from agentq.records.examples import StepPair
from benchmarks.bench_dpo import compose, copy_adapter, draw_lora_b, webshop_prompts
from benchmarks.common import add_model_argument, cli, load_model

SIDES = ("per_pair_fp32", "grouped_bf16", "grouped_fp32")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_argument(parser)
    parser.add_argument("--quick", action="store_true", help="tiny model, 2 nodes of 3 actions, 1 timed step")
    parser.add_argument("--nodes", type=int, default=4, help="search nodes (distinct histories)")
    parser.add_argument("--k", type=int, default=5, help="sibling actions per node; all K(K-1)/2 pairs")
    parser.add_argument("--batch-sizes", default="2,4,8", help="pairs per optimiser step, comma-separated")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side (after one warm-up step)")
    parser.add_argument("--check-batches", type=int, default=2, help="batches of the loss agreement check")
    parser.add_argument("--completion-tokens", type=int, default=40, help="sampled tokens per action")
    parser.add_argument("--lora-b-std", type=float, default=0.01, help="std of the shared lora_B init")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.nodes, args.k, args.steps = "tiny", 2, 3, 1
        args.batch_sizes, args.check_batches, args.completion_tokens = "2", 1, 8
    return args


# --------------------------------------------------------------------- the pairs


def node_pairs(model, tokenizer, args: argparse.Namespace) -> list[StepPair]:
    """All K(K-1)/2 pairs of K sampled actions after each node's history."""
    from agentq.agent.policy import encode_chat, eos_token_ids
    from agentq.models import sample_k

    generator = torch.Generator().manual_seed(args.seed)
    pairs = []
    for node, messages in enumerate(webshop_prompts(args.nodes, depths=(0, 1, 2))):
        ids = encode_chat(tokenizer, messages, max_tokens=4096)
        actions = sample_k(
            model, ids, args.k, tokenizer=tokenizer, max_new_tokens=args.completion_tokens, temperature=0.7,
            eos_token_ids=eos_token_ids(tokenizer), generator=generator,
        )  # fmt: skip
        for a, b in itertools.combinations(actions, 2):
            pairs.append(
                StepPair(0, node, messages, a.text, b.text, list(a.token_ids), list(b.token_ids), a.logprob,
                         b.logprob, 1.0, 0.0, 1, 1)  # fmt: skip
            )
    return pairs


def batches(dataset, batch_size: int, count: int, *, seed: int, grouped: bool) -> list:
    """The first ``count`` batches the training loader would draw (epochs repeated as needed)."""
    from agentq.training.data import EpochSampler, collate_preferences

    sampler = EpochSampler(len(dataset), seed=seed, groups=dataset.prompt_groups() if grouped else None)
    out = []
    for epoch in itertools.count():
        order = sampler.order(epoch)
        for start in range(0, len(order), batch_size):
            out.append(collate_preferences([dataset[i] for i in order[start : start + batch_size]]))
            if len(out) == count:
                return out
    raise AssertionError("unreachable")


# --------------------------------------------------------------------- the sides


def per_pair_module():
    """PreferenceModule as before node grouping: each pair's history once for its two actions."""
    from agentq.models.logprobs import pair_logprobs
    from agentq.training.module import PreferenceModule

    class PerPair(PreferenceModule):
        def logps(self, batch) -> torch.Tensor:
            b, seg = batch.num_pairs, batch.segments
            chosen, rejected = pair_logprobs(
                self.model, seg.prompt_ids[:b], seg.completion_ids[:b], seg.completion_ids[b:]
            )
            return torch.cat([chosen, rejected])

    return PerPair


class Side:
    """A module on its own model copy, its optimiser, and the context its steps run in."""

    def __init__(self, cfg, model, module_cls, *, autocast: bool, seed: int) -> None:
        from lightning.pytorch.plugins.precision import MixedPrecision
        from peft import get_peft_model

        torch.manual_seed(seed)  # LoRA A init, as fit seeds it
        peft_model = get_peft_model(model, instantiate(cfg.trainer.lora, _convert_="all"))
        peft_model.train()
        self.module = module_cls(
            peft_model, instantiate(cfg.objective), instantiate(cfg.trainer.optimizer), shared_prefix=True
        )
        self.optimizer = self.module.configure_optimizers()
        self.clip = float(cfg.trainer.lightning.gradient_clip_val)
        # What Trainer(precision="bf16-mixed") wraps each training step in.
        self.context: Callable[[], Any] = (
            MixedPrecision("bf16-mixed", "cpu").forward_context if autocast else contextlib.nullcontext
        )

    def loss(self, batch) -> float:
        with torch.no_grad(), self.context():
            return float(self.module.objective(self.module.preference_logps(batch)).loss())

    def step(self, batch) -> float:
        with self.context():
            loss = self.module.training_step(batch, 0)
        loss.backward()
        params = [p for p in self.module.parameters() if p.requires_grad]
        torch.nn.utils.clip_grad_norm_(params, self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())


# --------------------------------------------------------------------- the benchmark


def run_batch_size(args: argparse.Namespace, cfg, dataset, batch_size: int) -> dict[str, Any]:
    from agentq.training.module import PreferenceModule

    steps = args.steps + 1  # the first is warm-up
    orders = {
        "per_pair_fp32": batches(dataset, batch_size, steps, seed=args.seed, grouped=False),
        "grouped_bf16": batches(dataset, batch_size, max(steps, args.check_batches), seed=args.seed, grouped=True),
    }
    orders["grouped_fp32"] = orders["grouped_bf16"]
    kinds = {
        "per_pair_fp32": (per_pair_module(), False),
        "grouped_bf16": (PreferenceModule, True),
        "grouped_fp32": (PreferenceModule, False),
    }
    sides = {}
    for name, (module_cls, autocast) in kinds.items():
        model, _ = load_model(args.model)
        sides[name] = Side(cfg, model, module_cls, autocast=autocast, seed=args.seed)
    source = sides["per_pair_fp32"].module.model
    draw_lora_b(source, args.lora_b_std, args.seed)
    for side in list(sides.values())[1:]:
        copy_adapter(source, side.module.model)  # identical weights on every side

    # The same batches at the same weights, before any step: what each computation makes of them.
    check = orders["grouped_bf16"][: args.check_batches]
    losses = {name: [side.loss(b) for b in check] for name, side in sides.items()}
    per_pair = losses["per_pair_fp32"]

    def gap(name: str) -> float:
        return max(abs(x - y) for x, y in zip(losses[name], per_pair, strict=True))

    times: dict[str, list[float]] = {name: [] for name in sides}
    load_before = os.getloadavg()[0]
    with warnings.catch_warnings():
        # The module logs through self.log, which has no Lightning trainer to write to here.
        warnings.filterwarnings("ignore", message=r".*`self\.log\(\)`.*trainer.*")
        for step in range(steps):
            for name, side in sides.items():
                started = time.perf_counter()
                side.step(orders[name][step])
                times[name].append(time.perf_counter() - started)
    load_after = os.getloadavg()[0]
    timed_pairs = {name: sum(b.num_pairs for b in orders[name][1:steps]) for name in sides}
    pairs_per_min = {name: 60 * timed_pairs[name] / sum(times[name][1:]) for name in sides}
    histories = {  # history forwards per step (policy; the reference runs as many)
        name: sum(b.num_pairs if name == "per_pair_fp32" else len(b.by_prompt.prompt_ids) for b in orders[name][1:steps])
        / args.steps
        for name in sides
    }
    return {
        "batch_size": batch_size,
        "timed_steps": args.steps,
        "seconds": {name: t[1:] for name, t in times.items()},
        "pairs_per_min": pairs_per_min,
        "speedup_grouped_bf16": pairs_per_min["grouped_bf16"] / pairs_per_min["per_pair_fp32"],
        "speedup_grouped_fp32": pairs_per_min["grouped_fp32"] / pairs_per_min["per_pair_fp32"],
        "histories_per_step": histories,
        "check_losses": losses,
        "loss_abs_diff_grouped_fp32": gap("grouped_fp32"),
        "loss_abs_diff_grouped_bf16": gap("grouped_bf16"),
        "load_average": [load_before, load_after],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Sample the pairs once, then time each batch size; returns the figures (see :func:`report`)."""
    from agentq.models.loading import native_bf16
    from agentq.training.data import ExampleDataset

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = compose()
    load_start = os.getloadavg()[0]
    sampler, tokenizer = load_model(args.model)
    started = time.perf_counter()
    pairs = node_pairs(sampler, tokenizer, args)
    prepare = time.perf_counter() - started
    del sampler
    dataset = ExampleDataset(pairs, tokenizer, max_prompt_tokens=4096)
    prompts = sorted({len(item.chosen[0][0]) for item in dataset.items})
    results = {
        "model": args.model,
        "threads": torch.get_num_threads(),
        "native_bf16": native_bf16("cpu"),
        "beta": float(cfg.objective.beta),
        "nodes": args.nodes,
        "k": args.k,
        "pairs": len(pairs),
        "prompt_tokens": prompts,
        "completion_tokens": sorted({len(ids) for p in pairs for ids in (p.chosen_ids, p.rejected_ids)}),
        "prepare_s": prepare,
        "by_batch_size": [run_batch_size(args, cfg, dataset, int(b)) for b in str(args.batch_sizes).split(",")],
    }
    results["load_average"] = [load_start, os.getloadavg()[0]]
    return results


def report(results: dict[str, Any]) -> str:
    """The figures as markdown."""
    lines = [
        f"## Step-DPO pairs per minute: per pair vs node-grouped, fp32 vs bf16 ({results['model']})\n",
        f"- {results['nodes']} nodes x {results['k']} sampled actions, all {results['pairs']} pairs; prompts "
        f"{results['prompt_tokens'][0]}-{results['prompt_tokens'][-1]} tokens, actions "
        f"{results['completion_tokens'][0]}-{results['completion_tokens'][-1]}; beta {results['beta']}; "
        f"torch threads {results['threads']}; native bf16: {results['native_bf16']}; load average "
        f"{results['load_average'][0]:.2f} at the start, {results['load_average'][1]:.2f} at the end",
        "",
        "| batch | (a) per pair fp32 | (b) grouped bf16 | (b') grouped fp32 | (b) / (a) | (b') / (a) "
        "| histories/step a, b | loss \\|b' - a\\| | loss \\|b - a\\| | load average |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["by_batch_size"]:
        ppm, h = r["pairs_per_min"], r["histories_per_step"]
        lines.append(
            f"| {r['batch_size']} | {ppm['per_pair_fp32']:.2f} | {ppm['grouped_bf16']:.2f} | {ppm['grouped_fp32']:.2f} "
            f"| {r['speedup_grouped_bf16']:.2f}x | {r['speedup_grouped_fp32']:.2f}x "
            f"| {h['per_pair_fp32']:.1f}, {h['grouped_bf16']:.1f} | {r['loss_abs_diff_grouped_fp32']:.1e} "
            f"| {r['loss_abs_diff_grouped_bf16']:.1e} | {r['load_average'][0]:.2f} -> {r['load_average'][1]:.2f} |"
        )
    lines.append(
        "\npairs per minute over the timed steps (policy + reference forward, backward, clip, AdamW); loss "
        "differences at the same weights on the first node-grouped batches, before any step."
    )
    return "\n".join(lines)


def main() -> None:
    cli(parse_args, run, report)


if __name__ == "__main__":
    main()
