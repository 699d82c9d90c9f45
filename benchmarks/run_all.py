"""Every benchmark in one command, and one table of what each measured.

    python -m benchmarks.run_all                        # all, with the ~10 min peak-memory run
    python -m benchmarks.run_all --skip-run             # all but the peak-memory run
    python -m benchmarks.run_all --quick                # tiny model, fewer repeats: a smoke check
    python -m benchmarks.run_all --only dpo,precision   # some of them (names below)
    python -m benchmarks.run_all --only mcts --update   # re-run some, keep the others' saved figures
    python -m benchmarks.run_all --render experiments/benchmarks/table.json  # re-judge saved figures

Writes ``experiments/benchmarks/table.md`` (``--quick``: ``table.quick.md``):
the machine (CPU, cores, RAM, versions, torch threads, date, git revision),
the command, one row per benchmark (target, measured figures, ratio, met or
not, and why not), then each benchmark's own report; the raw figures go to
``table.json`` beside it. Each benchmark is a module with
``parse_args(argv)`` and ``run(args) -> dict``, imported only when it runs; a
module that is missing, or lacks ``run``, is reported as not available, and a
benchmark that fails is reported with its error while the others go on.

The machine is shared: timings are noisy, which is why every benchmark
interleaves what it compares and the table reports ratios.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "experiments" / "benchmarks"


@dataclass(frozen=True)
class Row:
    """One line of the table: what was measured against the target."""

    measured: str
    ratio: str
    met: bool | None  # None: the target does not apply (see reason)
    reason: str = ""


@dataclass(frozen=True)
class Benchmark:
    """A benchmark module, its arguments (full and ``--quick``), its target and how to judge it."""

    name: str
    title: str
    module: str
    target: str
    argv: Callable[[bool], list[str]]
    row: Callable[[dict[str, Any]], Row]


# --------------------------------------------------------------------- judging each benchmark


def dpo_row(r: dict[str, Any]) -> Row:
    rows = r["by_batch_size"]
    measured = "; ".join(
        f"batch {b['batch_size']}: ours {b['median_s']['ours']:.2f} s, TRL {b['median_s']['trl']:.2f} s"
        + (f", ours w/o shared prefix {b['median_s']['ours_unshared']:.2f} s" if "ours_unshared" in b["median_s"] else "")
        + f" (step-1 loss |diff| {b['loss_abs_diff']:.1e})"
        for b in rows
    )
    ratio = ", ".join(f"{b['ratio_trl_over_ours']:.2f}x (batch {b['batch_size']})" for b in rows)
    fast = all(b["ratio_trl_over_ours"] >= 3 for b in rows)
    agree = all(b["loss_abs_diff"] <= 1e-4 for b in rows)
    reasons = []
    if not fast:
        slow = min(rows, key=lambda b: b["ratio_trl_over_ours"])
        unshared = slow["ratio_unshared_over_ours"]
        reasons.append(
            f"TRL / ours is {slow['ratio_trl_over_ours']:.2f}x at batch {slow['batch_size']}"
            + (f"; the shared prefix alone is worth {unshared:.2f}x (ours without it)" if unshared else "")
            + ". Both sides skip the reference forward, so what remains is the policy forward + backward: "
            "sharing the ~1,000-token history halves the decoder's tokens (at most 2x), and scoring only "
            "the action tokens removes TRL's full-vocabulary head on every position"
        )
    if not agree:
        reasons.append("step-1 losses differ by more than 1e-4")
    return Row(measured, ratio, fast and agree, "; ".join(reasons))


def dpo_throughput_row(r: dict[str, Any]) -> Row:
    rows = r["by_batch_size"]
    measured = "; ".join(
        f"batch {b['batch_size']}: (a) per pair fp32 {b['pairs_per_min']['per_pair_fp32']:.2f}, (b) grouped bf16 "
        f"{b['pairs_per_min']['grouped_bf16']:.2f}, (b') grouped fp32 {b['pairs_per_min']['grouped_fp32']:.2f} "
        f"pairs/min; loss |b' - a| {b['loss_abs_diff_grouped_fp32']:.1e}, |b - a| {b['loss_abs_diff_grouped_bf16']:.1e}"
        for b in rows
    ) + f" ({r['nodes']} nodes x {r['k']} actions)"
    ratio = ", ".join(
        f"{b['speedup_grouped_bf16']:.2f}x, fp32 {b['speedup_grouped_fp32']:.2f}x (batch {b['batch_size']})" for b in rows
    )
    def meets(b: dict) -> bool:  # >= 3x with the loss within 1e-3, in fp32 or in bf16
        return any(b[f"speedup_grouped_{p}"] >= 3 and b[f"loss_abs_diff_grouped_{p}"] <= 1e-3 for p in ("fp32", "bf16"))

    met = [b["batch_size"] for b in rows if meets(b)]
    slow = [str(b["batch_size"]) for b in rows if not meets(b)]
    reasons = []
    if slow:
        reasons.append(
            ("met at batch " + ", ".join(map(str, met)) + "; " if met else "")
            + f"below 3x with the loss within 1e-3 at batch {', '.join(slow)}: grouping saves history forwards "
            "only where a batch holds several pairs of a node (at most batch-size-fold)"
        )
    if any(b["loss_abs_diff_grouped_fp32"] > 1e-5 for b in rows):
        reasons.append("node-grouped fp32 loss differs from the per-pair loss by more than 1e-5")
    if any(b["loss_abs_diff_grouped_bf16"] > 1e-3 for b in rows):
        reasons.append("bf16 moves the loss by more than 1e-3 (its rounding does not cancel in Delta)")
    return Row(measured, ratio, bool(met), "; ".join(reasons))
    return Row(measured, ratio, not reasons, "; ".join(reasons))


def mcts_row(r: dict[str, Any]) -> Row:
    modes = r["modes"]
    none, tree = modes["none"], modes["tree"]
    measured = ", ".join(f"{mode}: {f['sims_per_min']:.2f} sims/min" for mode, f in modes.items())
    identical = all(r["identical"].values())
    ratio = tree["sims_per_min"] / none["sims_per_min"]
    met = ratio >= 2 and identical
    computed = tree["policy_computed_tokens"] + tree["critic_computed_tokens"]
    reused = tree["policy_reused_tokens"] + tree["critic_reused_tokens"]
    reuse = f"the tree reused {reused / max(computed + reused, 1):.0%} of prompt tokens"
    if not identical:
        reason = "the cache changed the trees"
    elif not met:
        reason = (
            f"below the issue's 2x: {reuse}, but a cache removes prefill only; the candidates' and "
            "rollouts' new tokens are decoded one forward each whatever the cache"
        )
    else:
        reason = ""
    return Row(measured + f"; trees identical: {identical}; {reuse}", f"{ratio:.2f}x", met, reason)


def sampling_row(r: dict[str, Any]) -> Row:
    names = list(r["median_s"])
    ours, num_return, loop = (r["median_s"][n] for n in names)
    ratio = num_return / ours
    measured = (
        f"sample_k {ours:.2f} s, generate(num_return_sequences) {num_return:.2f} s, K x generate {loop:.2f} s "
        f"(K={r['k']}, {r['prompt_tokens']}-token prompt, {r['new_tokens']} tokens); greedy identical: {r['identical']}"
    )
    met = ratio >= 2 and r["identical"]
    reason = "" if met else ("greedy tokens differ" if not r["identical"] else "below the issue's 2x")
    return Row(measured, f"{ratio:.2f}x", met, reason)


def restore_row(r: dict[str, Any]) -> Row:
    replay = r["reset_replay_10_s"]
    restore = r["snapshot_restore_s"]
    if restore is None:
        return Row(
            f"no snapshot; reset + replay of 10 steps {replay * 1e3:,.0f} ms",
            "-",
            None,
            "the env has no snapshot (a JVM / browser session cannot be copied): MCTS restores a node by "
            "reset + replay, the cost measured here",
        )
    ratio = replay / restore
    return Row(
        f"snapshot restore {restore * 1e6:.2f} us, reset + replay of 10 steps {replay * 1e6:,.0f} us",
        f"{ratio:,.0f}x",
        ratio > 1,
        "" if ratio > 1 else "restoring the snapshot is not faster than replaying",
    )


def precision_row(r: dict[str, Any]) -> Row:
    t, a = r["timing"], r["agreement"]
    measured = (
        f"prefill {r['prefill_tokens']} tokens {t['prefill/float32']:.2f} / {t['prefill/bfloat16']:.2f} s, "
        f"decode {1e3 * t['decode/float32']:.0f} / {1e3 * t['decode/bfloat16']:.0f} ms/token, "
        f"composite action {t['composite/float32']:.2f} / {t['composite/bfloat16']:.2f} s (fp32 / bf16); "
        f"greedy identical on {a['identical_fraction']:.0%} of {a['prompts']} prompts, "
        f"{a['equal_prefix_fraction']:.0%} of positions before the first divergence"
    )
    train = r.get("training")
    if train:
        measured += (
            f"; DPO step {train['float32']['median_s']:.2f} / {train['bfloat16']['median_s']:.2f} s, "
            f"bf16 fit {'ran' if train['fit_bf16']['ok'] else 'FAILED'}"
        )
    ratio = f"prefill {r['prefill_speedup']:.2f}x, decode {r['decode_speedup']:.2f}x, action {r['composite_speedup']:.2f}x"
    misses = []
    if r["composite_speedup"] < 1.2:
        misses.append(
            f"one composite action is {r['composite_speedup']:.2f}x: decode dominates it, and batch-1 decode "
            f"gains {r['decode_speedup']:.2f}x in bf16 (per-token overhead and weight reads, not matmul "
            "throughput, bound it on CPU)"
        )
    if a["identical_fraction"] < 0.9:
        misses.append(
            f"greedy completions identical on {a['identical_fraction']:.0%} of prompts: bf16 moves log-probs "
            f"by ~{a['logp_abs_diff_per_token']:.3f} nats per token, enough to flip near-ties"
        )
    return Row(measured, ratio, not misses, "; ".join(misses))


def memory_row(r: dict[str, Any]) -> Row:
    gb = r["peak_rss_kb"] / 2**20
    measured = f"peak RSS {gb:.1f} GB, wall {r['wall_s'] / 60:.1f} min ({r['command']})"
    if r["returncode"] != 0:
        return Row(measured, "-", False, f"the run failed (exit {r['returncode']}): {r['stderr_tail']}")
    return Row(measured, "-", gb <= MEMORY_TARGET_GB, "" if gb <= MEMORY_TARGET_GB else f"above {MEMORY_TARGET_GB} GB")


# --------------------------------------------------------------------- the peak-memory run

MEMORY_TARGET_GB = 8.0


def memory_parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("overrides", nargs="*")
    return parser.parse_args(argv)


def memory_run(args: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS of ``run.py`` with ``args.overrides``, through a wrapper process whose only
    child is the run, so ``RUSAGE_CHILDREN`` counts that run alone."""
    with tempfile.TemporaryDirectory() as tmp:
        # hydra.run.dir: the run's files and Hydra's own (paths.run_dir follows it) stay in tmp.
        command = [sys.executable, "run.py", *args.overrides, f"hydra.run.dir={tmp}/run"]
        wrapper = (
            "import resource, subprocess, sys\n"
            "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
            "sys.stderr.write(code.stderr[-2000:])\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code.returncode)\n"
        )
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", wrapper, *command], cwd=REPO, env=env, capture_output=True, text=True, check=True
        )
        wall = time.perf_counter() - started
    peak_kb, returncode = (int(x) for x in out.stdout.split())
    return {
        "command": "python " + shlex.join(["run.py", *args.overrides]),
        "peak_rss_kb": peak_kb,  # Linux reports ru_maxrss in KiB
        "wall_s": wall,
        "returncode": returncode,
        "stderr_tail": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "",
    }


def memory_report(r: dict[str, Any]) -> str:
    return f"`{r['command']}`: peak RSS {r['peak_rss_kb'] / 2**20:.2f} GB, wall {r['wall_s']:.0f} s, exit {r['returncode']}"


# --------------------------------------------------------------------- the benchmarks


def engine_mcts_row(r: dict[str, Any]) -> Row:
    m = r["mcts"]
    hf, ov = m["hf"], m["openvino"]
    measured = (
        f"HF, one search at a time: {hf['sims_per_cpu_min']:.2f} sims/CPU-min ({hf['sims_per_min']:.2f}/min wall, "
        f"{hf['goals']} goals, load {hf['load_average'][0]:.2f}); OpenVINO, {ov['concurrency']} in flight: "
        f"{ov['sims_per_cpu_min']:.2f} sims/CPU-min ({ov['sims_per_min']:.2f}/min wall, {ov['goals']} goals, load {ov['load_average'][0]:.2f})"
    )
    met = m["ratio_cpu"] >= 10
    reason = "" if met else (
        "below 10x: the critic's ranking prompts run in torch, one at a time, and the engine (prefix cache off, "
        "one request per constrained sample) prefills every prompt in full (docs/results.md, 'Engines')"
    )
    return Row(measured, f"{m['ratio_cpu']:.1f}x per CPU-min, {m['ratio_wall']:.1f}x wall", met, reason)


def engine_eval_row(r: dict[str, Any]) -> Row:
    e = r["eval"]
    hf, ov = e["hf"], e["openvino"]
    measured = (
        f"HF: {hf['episodes_per_min']:.2f} episodes/min ({hf['goals']} goals, {hf['avg_steps']:.1f} steps each, load "
        f"{hf['load_average'][0]:.2f}); OpenVINO, {ov['concurrency']} in flight: {ov['episodes_per_min']:.2f}/min "
        f"({ov['goals']} goals, {ov['avg_steps']:.1f} steps each, load {ov['load_average'][0]:.2f})"
    )
    met = e["ratio"] >= 10
    reason = "" if met else "below 10x: every step prefills its whole prompt, and the regex's agent takes more steps"
    return Row(measured, f"{e['ratio']:.1f}x episodes/min, {e['ratio_steps']:.1f}x steps/min", met, reason)


def engine_overhead_row(r: dict[str, Any]) -> Row:
    o = r["overhead"]
    measured = f"ours {o['tokens_per_s']['ours']:.1f} tok/s, the pipeline's generate {o['tokens_per_s']['raw']:.1f} tok/s ({o['requests']} requests)"
    return Row(measured, f"{100 * o['share']:.0f}%", o["share"] >= 0.8, "" if o["share"] >= 0.8 else "our overhead above 20%")


def engine_agreement_row(r: dict[str, Any]) -> Row:
    a = r["agreement"]
    n = a["states"]
    gap = "-" if a["mean_logprob_gap"] is None else f"{a['mean_logprob_gap']:.4f}"
    measured = (
        f"{a['identical_completions']}/{n} completions and {a['identical_commands']}/{n} commands identical; "
        f"mean |log-prob gap| {gap} nats on identical completions"
    )
    share = a["identical_commands"] / n
    reason = "" if share >= 0.9 else "below 90%: the engine constrains by regex, which allows spellings the trie forbids"
    return Row(measured, f"{100 * share:.0f}% commands", share >= 0.9, reason)


def engine_hf_bf16_row(r: dict[str, Any]) -> Row:
    a, m, e = r["agreement"], r["mcts"], r["eval"]
    f32, b16 = "float32", "bfloat16"
    measured = (
        f"MCTS {m[f32]['sims_per_min']:.2f} / {m[b16]['sims_per_min']:.2f} sims/min, zero-shot "
        f"{e[f32]['episodes_per_min']:.2f} / {e[b16]['episodes_per_min']:.2f} episodes/min (fp32 / bf16, "
        f"{m[f32]['goals']} and {e[f32]['goals']} goals, load {m[f32]['load_average'][0]:.2f}); greedy commands identical "
        f"on {a['identical_commands']}/{a['states']} states"
    )
    share = a["identical_commands"] / a["states"]
    met = m["ratio"] >= 1.5 and e["ratio"] >= 1.5 and share >= 0.9
    reasons = [f"{name} below 1.5x" for name, ratio in (("MCTS", m["ratio"]), ("evaluation", e["ratio"])) if ratio < 1.5]
    reasons += [] if share >= 0.9 else ["bf16 flips near-tied greedy tokens on more than 10% of states"]
    return Row(measured, f"MCTS {m['ratio']:.2f}x, episodes {e['ratio']:.2f}x, {100 * share:.0f}% commands", met, "; ".join(reasons))


def _engine_time(side: dict[str, Any]) -> str:
    """Where the hf_batched engine thread's time went, as shares of it."""
    seconds = side["engine"]["seconds"]
    total = sum(seconds.values()) or 1.0
    shares = ", ".join(f"{kind} {100 * s / total:.0f}%" for kind, s in sorted(seconds.items(), key=lambda kv: -kv[1]))
    return f"the engine thread's time: {shares} (only the shared steps are batched)"


def _ceiling(phase: dict[str, Any], ratio: str, unit: str) -> str:
    """The bench's ceiling (bench_batched (5)), where it ran."""
    c = phase.get("ceiling")
    if c is None:
        return ""
    verdict = ": 10x needs fewer tokens, not more batching" if c[ratio] < 10 else ""
    return (
        f"; had every token the engine ran ({c['tokens']:,}) cost a token of a 256-token prefill, with nothing else "
        f"but the critic's forwards, the ratio would be {c[ratio]:.1f}x {unit}{verdict}"
    )


def batched_mcts_row(r: dict[str, Any]) -> Row:
    m = r["mcts"]
    hf, hb = m["hf"], m["hf_batched"]
    measured = (
        f"HF, one search at a time: {hf['sims_per_min']:.2f} sims/min, {hf['sims_per_cpu_min']:.2f}/CPU-min ({hf['goals']} goals, "
        f"load {hf['load_average'][0]:.2f}); hf_batched, {hb['concurrency']} in flight: {hb['sims_per_min']:.2f} sims/min, "
        f"{hb['sims_per_cpu_min']:.2f}/CPU-min ({hb['goals']} goals, load {hb['load_average'][0]:.2f})"
    )
    met = m["ratio_cpu"] >= 10
    reason = "" if met else f"below 10x; {_engine_time(hb)}{_ceiling(m, 'ratio_cpu', 'per CPU-min')}"
    return Row(measured, f"{m['ratio_cpu']:.1f}x per CPU-min, {m['ratio_wall']:.1f}x wall", met, reason)


def batched_eval_row(r: dict[str, Any]) -> Row:
    e = r["eval"]
    hf, hb = e["hf"], e["hf_batched"]
    measured = (
        f"HF: {hf['episodes_per_min']:.2f} episodes/min ({hf['goals']} goals, {hf['avg_steps']:.1f} steps each, average reward "
        f"{hf['avg_reward']:.3f}, load {hf['load_average'][0]:.2f}); hf_batched, {hb['concurrency']} in flight: "
        f"{hb['episodes_per_min']:.2f}/min ({hb['goals']} goals, {hb['avg_steps']:.1f} steps each, average reward "
        f"{hb['avg_reward']:.3f}, load {hb['load_average'][0]:.2f})"
    )
    met = e["ratio"] >= 10
    reason = "" if met else f"below 10x; {_engine_time(hb)}{_ceiling(e, 'ratio', 'episodes/min')}"
    return Row(measured, f"{e['ratio']:.1f}x episodes/min, {e['ratio_steps']:.1f}x steps/min", met, reason)


def batched_agreement_row(r: dict[str, Any]) -> Row:
    a = r["agreement"]
    n = a["states"]
    gap = "-" if a["mean_logprob_gap"] is None else f"{a['mean_logprob_gap']:.1e}"
    measured = (
        f"{a['identical_completions']}/{n} completions and {a['identical_commands']}/{n} commands identical; "
        f"mean |log-prob gap| {gap} nats on identical completions"
    )
    share = a["identical_commands"] / n
    return Row(measured, f"{100 * share:.0f}% commands", share >= 0.9, "" if share >= 0.9 else "below 90%")


def openvino_batches_row(r: dict[str, Any]) -> Row:
    cases = ("k=1", "k=3", "k=1..3")
    again = [r[k]["sequential_again"] for k in cases]
    concurrent = [r[k]["concurrent"] for k in cases]
    measured = "; ".join(
        f"{k}: {c['other_tokens']}/{c['samples']} other tokens, {c['other_logprob']} other log-probs "
        f"(<= {c['max_logprob_gap']:.0e} nats)" for k, c in zip(cases, concurrent, strict=True)
    ) + f" ({r['model']}, load {r['load_average'][0]:.2f})"
    same = sum(c["identical"] for c in again), sum(c["samples"] for c in again)
    reason = "concurrent requests differ from the same requests alone by rounding, which moves some sampled tokens"
    return Row(measured, f"sequential {same[0]}/{same[1]} identical", same[0] == same[1], reason)


def _env_argv(full: list[str], quick: list[str]) -> Callable[[bool], list[str]]:
    return lambda is_quick: quick if is_quick else full


_ENGINE = ("benchmarks.bench_engine", _env_argv([], ["--quick"]))
_BATCHED = ("benchmarks.bench_batched", _env_argv([], ["--quick"]))

BENCHMARKS = [
    Benchmark(
        "batched_mcts", "MCTS sims per CPU-minute on WebShop: shared decode steps (hf_batched)", _BATCHED[0],
        ">= 10x today's sequential HF path (same search budgets, same decoding)", _BATCHED[1], batched_mcts_row,
    ),
    Benchmark(
        "batched_eval", "Zero-shot evaluation episodes per minute on WebShop: hf_batched", _BATCHED[0],
        ">= 10x today's path", _BATCHED[1], batched_eval_row,
    ),
    Benchmark(
        "batched_agreement", "Greedy agreement, hf_batched vs HF fp32, 50 WebShop states", _BATCHED[0],
        ">= 90% identical commands; the mean log-prob gap reported", _BATCHED[1], batched_agreement_row,
    ),
    Benchmark(
        "engine_mcts", "MCTS sims per CPU-minute on WebShop: one engine, many searches", _ENGINE[0],
        ">= 10x today's sequential HF path (same search budgets)", _ENGINE[1], engine_mcts_row,
    ),
    Benchmark(
        "engine_eval", "Zero-shot evaluation episodes per minute on WebShop", _ENGINE[0],
        ">= 10x today's path", _ENGINE[1], engine_eval_row,
    ),
    Benchmark(
        "engine_overhead", "Decode tokens/s, 16 concurrent requests, vs the engine's own generate", _ENGINE[0],
        ">= 80% of the engine's raw throughput (our overhead <= 20%)", _ENGINE[1], engine_overhead_row,
    ),
    Benchmark(
        "engine_agreement", "Greedy agreement, OpenVINO vs HF fp32, 50 WebShop states", _ENGINE[0],
        ">= 90% identical commands; the mean log-prob gap reported", _ENGINE[1], engine_agreement_row,
    ),
    Benchmark(
        "openvino_batches", "OpenVINO: a request alone vs beside others, temperature 1, 12 WebShop prompts",
        "benchmarks.bench_openvino_batches",
        "sequential requests reproduce bitwise; how often requests beside it change a sample is reported",
        _env_argv([], ["--model", "tiny", "--prompts", "4", "--rounds", "1"]), openvino_batches_row,
    ),
    Benchmark(
        "engine_hf_bf16", "The HF engine on a bf16 copy vs fp32, WebShop MCTS and evaluation", "benchmarks.bench_hf_dtype",
        ">= 1.5x MCTS sims/min and episodes/min, greedy commands identical on >= 90% of 50 states",
        _env_argv([], ["--quick"]), engine_hf_bf16_row,
    ),
    Benchmark(
        "dpo", "Step DPO vs TRL 1.16 DPOTrainer", "benchmarks.bench_dpo",
        "ours (shared prefix + logged reference) >= 3x faster per optimizer step than TRL (precomputed "
        "reference); step-1 loss |diff| <= 1e-4",
        _env_argv([], ["--model", "tiny", "--steps", "1", "--batch-sizes", "1", "--no-unshared"]),
        dpo_row,
    ),
    Benchmark(
        "dpo_throughput", "Step-DPO pairs/min: node-grouped + bf16 vs per pair", "benchmarks.bench_dpo_throughput",
        ">= 3x pairs/min, loss within 1e-3",
        _env_argv([], ["--quick"]),
        dpo_throughput_row,
    ),
    Benchmark(
        "mcts", "MCTS sims/min, tree KV reuse vs none", "benchmarks.bench_mcts",
        ">= 2x MCTS simulations per minute with the tree KV cache than without (trees identical)",
        _env_argv([], ["--model", "tiny", "--tasks", "1", "--simulations", "2"]),
        mcts_row,
    ),
    Benchmark(
        "mcts_tail", "MCTS sims/min, tree KV reuse vs none, actions cut 8 tokens after the command",
        "benchmarks.bench_mcts",
        ">= 2x, as above, with the result table's `agent.sampling.max_tail_tokens=8` (less decoding per action)",
        _env_argv(
            ["--override", "agent.sampling.max_tail_tokens=8"],
            ["--model", "tiny", "--tasks", "1", "--simulations", "2", "--override", "agent.sampling.max_tail_tokens=8"],
        ),
        mcts_row,
    ),
    Benchmark(
        "sampling", "K candidates: one prefill vs num_return_sequences", "benchmarks.bench_sampling",
        "sample_k >= 2x faster than generate(num_return_sequences=K), identical greedy tokens",
        _env_argv([], ["--model", "tiny", "--repeats", "1", "--k", "3", "--max-new-tokens", "8", "--prompt-tokens", "200"]),
        sampling_row,
    ),
    Benchmark(
        "webshop", "Node restore, WebShop", "benchmarks.bench_webshop_env",
        "snapshot restore faster than reset + replay of a 10-step prefix*",
        _env_argv([], ["--episodes", "20", "--repeats", "200"]),
        restore_row,
    ),
    Benchmark(
        "sciworld", "Node restore, ScienceWorld", "benchmarks.bench_sciworld_env",
        "snapshot restore faster than reset + replay of a 10-step prefix*",
        _env_argv([], ["--episodes", "2", "--repeats", "2"]),
        restore_row,
    ),
    Benchmark(
        "opentable", "Node restore, OpenTable", "benchmarks.bench_opentable_env",
        "snapshot restore faster than reset + replay of a 10-step prefix*",
        _env_argv([], ["--episodes", "2", "--random-episodes", "1", "--repeats", "2"]),
        restore_row,
    ),
    Benchmark(
        "precision", "bf16 vs fp32 on CPU", "benchmarks.bench_precision",
        "bf16 >= 1.2x faster per composite action than fp32, greedy tokens identical on >= 90% of prompts*",
        _env_argv([], ["--model", "tiny", "--prompts", "2", "--repeats", "1", "--train-steps", "1"]),
        precision_row,
    ),
    Benchmark(
        "memory", "Peak memory of the default run", "benchmarks.run_all",
        f"peak RSS of `python run.py +experiment=webshop_mcts_dpo` <= {MEMORY_TARGET_GB:.0f} GB*",
        _env_argv(
            ["+experiment=webshop_mcts_dpo"],
            ["+experiment=smoke", "env=webshop"],
        ),
        memory_row,
    ),
]
# The memory benchmark lives here: its parse_args/run/report under the names the others use.
ENTRY_POINTS = {"memory": (memory_parse_args, memory_run, memory_report)}


# --------------------------------------------------------------------- running and writing


def machine() -> dict[str, Any]:
    import torch
    import transformers

    try:
        import trl

        trl_version = trl.__version__
    except ImportError:
        trl_version = "not installed"
    def proc(name: str, key: str) -> str:  # Linux: the first "key: value" line of /proc/<name>
        path = Path("/proc") / name
        lines = path.read_text().splitlines() if path.exists() else []
        return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(key)), "")

    ram_kb = proc("meminfo", "MemTotal").removesuffix(" kB")

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown"

    return {
        "cpu": proc("cpuinfo", "model name") or platform.processor() or platform.machine(),
        "avx512_bf16": "avx512_bf16" in proc("cpuinfo", "flags").split(),
        "cores": os.cpu_count(),
        "ram_gb": int(ram_kb or 0) / 2**20,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl_version,
        "threads": torch.get_num_threads(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "git": git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if git("status", "--porcelain") else ""),
        "load_average": os.getloadavg()[0],
    }


_RAN: dict[tuple[str, tuple[str, ...]], tuple[dict[str, Any], float, str]] = {}


def run_one(bench: Benchmark, quick: bool) -> dict[str, Any]:
    """The benchmark's figures, row and report, or why there are none. Rows of one
    module with the same arguments (the engine rows) share one run."""
    argv = bench.argv(quick)
    if (bench.module, tuple(argv)) in _RAN:
        results, seconds, text = _RAN[bench.module, tuple(argv)]
        return {"status": "ok", "argv": argv, "seconds": seconds, "results": results, "row": bench.row(results).__dict__, "report": text}
    if bench.name in ENTRY_POINTS:
        parse, run, report = ENTRY_POINTS[bench.name]
    else:
        try:
            module = importlib.import_module(bench.module)
        except ModuleNotFoundError as error:
            if error.name != bench.module:  # the module exists but something it imports does not
                raise
            return {"status": "not available", "detail": f"{bench.module} does not exist yet"}
        if not hasattr(module, "run") or not hasattr(module, "parse_args"):
            return {"status": "not available", "detail": f"{bench.module} has no run(args) / parse_args(argv)"}
        parse, run, report = module.parse_args, module.run, getattr(module, "report", None)
    print(f"\n=== {bench.title}: {bench.module} {shlex.join(argv)}", flush=True)
    started = time.perf_counter()
    try:
        results = run(parse(argv))
    except Exception as error:  # one failing benchmark must not lose the others' figures
        traceback.print_exc()
        return {"status": "error", "detail": f"{type(error).__name__}: {error}", "argv": argv}
    seconds = time.perf_counter() - started
    try:
        row = bench.row(results)
    except (KeyError, TypeError, ZeroDivisionError) as error:  # figures not in the shape the row expects
        row = Row("see details", "-", None, f"row not wired to this result ({type(error).__name__}: {error})")
    text = report(results) if report is not None else ""
    print(text, flush=True)
    _RAN[bench.module, tuple(argv)] = (results, seconds, text)
    return {"status": "ok", "argv": argv, "seconds": seconds, "results": results, "row": row.__dict__, "report": text}


def table(outcomes: dict[str, dict[str, Any]], info: dict[str, Any], command: str, quick: bool) -> str:
    mark = {True: "met", False: "**not met**", None: "n/a"}
    lines = [
        "# Benchmarks" + (" (--quick: tiny model, smoke figures only)" if quick else ""),
        "",
        f"- machine: {info['cpu']} (avx512_bf16: {'yes' if info['avx512_bf16'] else 'no'}), {info['cores']} cores, "
        f"{info['ram_gb']:.1f} GB RAM; shared with other jobs (load average {info['load_average']:.2f} at the start)",
        f"- Python {info['python']}, torch {info['torch']}, transformers {info['transformers']}, TRL {info['trl']}; "
        f"torch threads {info['threads']}",
        f"- date {info['date']}, git {info['git']}"
        + (f"; rows re-run {info['updated']}, git {info['git_update']}" if "updated" in info else ""),
        f"- command: `{command}`",
        "",
        "| benchmark | target | measured | ratio | met | reason |",
        "|---|---|---|---|---|---|",
    ]
    by_name = {b.name: b for b in BENCHMARKS}
    for name, outcome in outcomes.items():
        bench = by_name[name]
        if outcome["status"] == "ok":
            row = outcome["row"]
            cells = [row["measured"], row["ratio"], mark[row["met"]], row["reason"]]
        elif outcome["status"] == "skipped":
            cells = ["-", "-", "skipped", outcome["detail"]]
        else:
            cells = ["-", "-", outcome["status"], outcome["detail"]]
        cells = [str(cell).replace("|", "\\|") for cell in [bench.title, bench.target, *cells]]  # e.g. |diff|
        lines.append("| " + " | ".join(cells).replace("\n", " ") + " |")
    lines += [
        "",
        "\\* a target of ours (the issue asks for the measurement only); adjust in `benchmarks/run_all.py`.",
        "",
        "## Details",
    ]
    for name, outcome in outcomes.items():
        if outcome["status"] == "ok":
            args = shlex.join(outcome["argv"])
            # The benchmark's own headings go under this section's.
            text = "\n".join("##" + line if line.startswith("#") else line for line in outcome["report"].strip().splitlines())
            lines += ["", f"### {by_name[name].title}", "", f"`{by_name[name].module}{' ' + args if args else ''}` "
                      f"({outcome['seconds']:.0f} s)", "", text]  # fmt: skip
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, fewer repeats: a smoke check")
    parser.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(b.name for b in BENCHMARKS)}")
    parser.add_argument("--skip-run", action="store_true", help="skip the peak-memory run (~10 minutes)")
    parser.add_argument("--out", type=Path, default=None, help="table path (default experiments/benchmarks/table.md)")
    parser.add_argument(
        "--update", action="store_true",
        help="keep the figures of the benchmarks not run from the existing table.json (with --only)",
    )
    parser.add_argument(
        "--render", type=Path, default=None, metavar="JSON",
        help="rewrite the table from a saved table.json (after editing how rows are judged), running nothing",
    )
    args = parser.parse_args(argv)
    names = [b.name for b in BENCHMARKS]
    if args.only:
        unknown = sorted(set(args.only.split(",")) - set(names))
        if unknown:
            parser.error(f"--only: unknown {unknown}; choose from {names}")
    return args


def render(saved: Path, out: Path | None) -> Path:
    """The table again from the figures of an earlier run: rows are re-judged, nothing re-runs."""
    raw = json.loads(saved.read_text())
    by_name = {b.name: b for b in BENCHMARKS}
    for name, outcome in raw["benchmarks"].items():
        if outcome["status"] == "ok":
            outcome["row"] = by_name[name].row(outcome["results"]).__dict__
    out = out or saved.with_suffix(".md")
    out.write_text(table(raw["benchmarks"], raw["machine"], raw["command"], "--quick" in raw["command"]))
    print(f"wrote {out}")
    return out


def main(argv: Sequence[str] | None = None) -> Path:
    args = parse_args(argv)
    if args.render:
        return render(args.render, args.out)
    command = shlex.join(["python", "-m", "benchmarks.run_all", *(sys.argv[1:] if argv is None else argv)])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    selected = set(args.only.split(",")) if args.only else {b.name for b in BENCHMARKS}
    info = machine()
    outcomes: dict[str, dict[str, Any]] = {}
    for bench in BENCHMARKS:
        if bench.name not in selected:
            continue
        if bench.name == "memory" and args.skip_run:
            outcomes[bench.name] = {"status": "skipped", "detail": "--skip-run"}
            continue
        outcomes[bench.name] = run_one(bench, args.quick)
    out = args.out or OUT / ("table.quick.md" if args.quick else "table.md")
    saved = out.with_name(out.stem + ".json")
    if args.update and saved.exists():  # the earlier figures, in the table's order, with this run's
        earlier = json.loads(saved.read_text())
        outcomes = {b.name: outcomes.get(b.name) or earlier["benchmarks"].get(b.name) for b in BENCHMARKS}
        outcomes = {name: outcome for name, outcome in outcomes.items() if outcome}
        command = f"{earlier['command']}; then {command}"
        info = earlier["machine"] | {"updated": info["date"], "git_update": info["git"]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table(outcomes, info, command, args.quick))
    raw = {"machine": info, "command": command, "benchmarks": outcomes}
    saved.write_text(json.dumps(raw, indent=1, default=str))
    print(f"\nwrote {out}")
    return out


if __name__ == "__main__":
    main()
