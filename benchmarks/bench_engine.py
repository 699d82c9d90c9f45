"""The engines side by side on WebShop, in one run: today's sequential HF path against
the OpenVINO engine with many searches in flight.

(1) greedy agreement: the first action of 50 WebShop states (25 search pages, 25
    result pages), HF fp32 vs the engine: identical completions, identical
    commands, the mean log-prob gap on identical completions;
(2) our overhead: 16 concurrent requests through ``OpenVINOEngine.sample`` (16
    threads) vs the same 16 requests handed to the pipeline's own ``generate``,
    prefix caching off so that rounds are alike, rounds interleaved;
(3) MCTS simulations per CPU-minute: today's path (HF, one search at a time, the
    headline's settings: constrained COMMAND, temperature 0.7) on a few goals vs
    the engine at ``collect.concurrency`` on more (temperature 1: the engine
    reports raw log-probs only there; the COMMAND constraint through the
    engine's regex), same search budgets;
(4) zero-shot evaluation episodes per minute: the same two paths.

Both paths of (3) and (4) run in this process, one after the other (never
beside each other); the load average is reported around each.

    python -m benchmarks.bench_engine            # embedded SmolLM2-135M
    python -m benchmarks.bench_engine --quick    # tiny model, few goals: a smoke test
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from agentq.agent import episode as ep
from agentq.agent.action import parse_composite
from agentq.components import Weights, build
from agentq.evaluate import task_seed, zero_shot
from agentq.lanes import lanes
from agentq.models.engine import Engine, HFEngine
from agentq.models.openvino_engine import OpenVINOEngine
from agentq.parallel import for_each_task
from benchmarks.common import cli

CONF = Path(__file__).resolve().parents[1] / "conf"
ENGINE = ["engine=openvino", "agent.sampling.temperature=1.0", "trainer.use_logged_reference=false"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, few goals")
    parser.add_argument("--agreement", type=int, default=50, help="states compared greedily")
    parser.add_argument("--hf-goals", type=int, default=3, help="goals for the HF path's rates")
    parser.add_argument("--goals", type=int, default=16, help="goals searched by the engine")
    parser.add_argument("--eval-goals", type=int, default=50, help="goals evaluated by the engine")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--simulations", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.agreement, args.hf_goals, args.goals, args.eval_goals, args.concurrency = 8, 2, 4, 4, 4
    return args


def compose_parts(args: argparse.Namespace, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "+experiment=webshop_mcts_dpo", "paths.run_dir=/tmp/agentq_bench_engine",
                f"search.num_simulations={args.simulations}", *(["model=tiny"] if args.quick else []), *overrides,
            ],
        )  # fmt: skip
    return build(cfg)


def states(env, task_ids) -> list:
    """Half search pages (the first step), half result pages (after a search for the goal's first words)."""
    histories = []
    for i, task_id in enumerate(task_ids):
        history = ep.start(env, task_id)
        if i % 2:
            goal = history.observation.split("[SEP]")[1]  # "Instruction: [SEP] <goal> [SEP] Search"
            words = " ".join(goal.split()[3:8])
            history, _, _ = ep.step(env, history, f"COMMAND: search[{words}]", f"search[{words}]")
        histories.append(history)
    return histories


def agreement(parts, model, tokenizer, engine: Engine, n: int) -> dict:
    """Greedy first actions: HF fp32 against ``engine`` on ``n`` WebShop states."""
    test_ids = list(parts.env.unwrapped.task_ids("test"))[:n]
    histories = states(parts.env, test_ids)
    hf = parts.policy(model, tokenizer, engine=HFEngine(model, tokenizer))
    ov = parts.policy(model, tokenizer, engine=engine)
    same_ids = same_commands = 0
    gaps = []
    for history in histories:
        [a] = hf.propose(history, 1, greedy=True)
        [b] = ov.propose(history, 1, greedy=True)
        same_ids += a.action_ids == b.action_ids
        same_commands += parse_composite(a.text).command == parse_composite(b.text).command
        if a.action_ids == b.action_ids:
            gaps.append(abs(a.logprob - b.logprob))
    return {
        "states": len(histories),
        "identical_completions": same_ids,
        "identical_commands": same_commands,
        "mean_logprob_gap": statistics.fmean(gaps) if gaps else None,
        "max_logprob_gap": max(gaps) if gaps else None,
    }


def overhead(parts, model, tokenizer, engine: OpenVINOEngine, rounds: int = 2) -> dict:
    """Decode tokens/s of 16 concurrent requests: ours (threads -> dispatcher) vs the pipeline's generate."""
    import numpy as np
    import openvino as ov

    policy = parts.policy(model, tokenizer, engine=engine)
    prompts = [policy.encode(policy.prompt(h)) for h in states(parts.env, list(parts.env.unwrapped.task_ids("test"))[:16])]
    eos = policy.eos_token_ids
    new = parts.policy.keywords["sampling"].max_new_tokens

    def ours() -> int:
        out = [None] * len(prompts)

        def one(i: int) -> None:
            out[i] = engine.sample(prompts[i], 1, max_new_tokens=new, temperature=0.0, top_p=1.0, eos_token_ids=eos)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(len(s[0].token_ids) for s in out)

    def raw() -> int:
        og = engine._og
        configs = []
        for _ in prompts:
            c = og.GenerationConfig()
            c.max_new_tokens, c.apply_chat_template, c.stop_token_ids, c.logprobs = new, False, set(eos), 1
            configs.append(c)
        results = engine._pipeline.generate([ov.Tensor(np.asarray([p], dtype=np.int64)) for p in prompts], configs)
        return sum(len(r.m_generation_ids[0]) for r in results)

    rates: dict[str, list[float]] = {"ours": [], "raw": []}
    for _ in range(rounds):
        for name, fn in (("raw", raw), ("ours", ours)):
            started = time.perf_counter()
            tokens = fn()
            rates[name].append(tokens / (time.perf_counter() - started))
    ours_rate, raw_rate = statistics.median(rates["ours"]), statistics.median(rates["raw"])
    return {"requests": len(prompts), "tokens_per_s": {"ours": ours_rate, "raw": raw_rate}, "share": ours_rate / raw_rate, "rounds": rates}


def timed(fn) -> dict:
    load, started, cpu = os.getloadavg()[0], time.perf_counter(), time.process_time()
    fn()
    return {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu, "load_average": (load, os.getloadavg()[0])}


def searches(parts, weights, task_ids, concurrency: int) -> dict:
    policy = parts.policy(weights.policy, weights.tokenizer, engine=weights.engine)
    results = []

    def searcher(lane):
        def search(task_id) -> None:
            generator = torch.Generator().manual_seed(task_seed(0, 1, task_id))
            with torch.no_grad():
                results.append(parts.search(lane.env, lane.policy, lane.critic, task_id=task_id, generator=generator))

        return search

    figures = timed(lambda: for_each_task(
        [searcher(lane) for lane in lanes(parts, weights, policy, concurrency)], task_ids, description="bench collect", unit="searches",
    ))  # fmt: skip
    sims = sum(r.stats.simulations for r in results)
    return figures | {
        "goals": len(task_ids), "concurrency": concurrency, "simulations": sims,
        "sims_per_min": 60 * sims / figures["seconds"], "sims_per_cpu_min": 60 * sims / figures["cpu_seconds"],
    }  # fmt: skip


def episodes(parts, weights, task_ids, concurrency: int) -> dict:
    policy = parts.policy(weights.policy, weights.tokenizer, engine=weights.engine)
    steps, rewards = [], []

    def runner(lane):
        episode = zero_shot(lane.env, lane.policy, max_steps=parts.eval.max_steps, dense_reward=parts.dense_reward)

        def run(task_id) -> None:
            with torch.no_grad():
                trajectory, _ = episode(task_id, torch.Generator())
            steps.append(len(trajectory.steps))
            rewards.append(trajectory.reward)

        return run

    figures = timed(lambda: for_each_task(
        [runner(lane) for lane in lanes(parts, weights, policy, concurrency)], task_ids, description="bench eval",
    ))  # fmt: skip
    return figures | {
        "goals": len(task_ids), "concurrency": concurrency, "avg_steps": statistics.fmean(steps), "avg_reward": statistics.fmean(rewards),
        "episodes_per_min": 60 * len(task_ids) / figures["seconds"], "steps_per_min": 60 * sum(steps) / figures["seconds"],
    }  # fmt: skip


def run(args: argparse.Namespace) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    today = compose_parts(args)
    fast = compose_parts(args, *ENGINE, f"collect.concurrency={args.concurrency}", f"eval.concurrency={args.concurrency}")
    model, tokenizer = today.model.load()
    model.eval()
    started = time.perf_counter()
    engine = fast.engine(model, tokenizer)
    out = {"engine_start_seconds": time.perf_counter() - started, "threads": torch.get_num_threads()}
    out["agreement"] = agreement(fast, model, tokenizer, engine, args.agreement)
    engine_plain = OpenVINOEngine(model, tokenizer, template=None, cache_dir=engine.cache_dir, prefix_caching=False)
    out["overhead"] = overhead(fast, model, tokenizer, engine_plain)
    engine_plain.close()

    train_ids = list(today.env.unwrapped.task_ids("train"))
    test_ids = list(today.env.unwrapped.task_ids("test"))
    hf = Weights(model, tokenizer, engine=HFEngine(model, tokenizer))
    ov = Weights(model, tokenizer, engine=engine)
    out["mcts"] = {
        "hf": searches(today, hf, train_ids[: args.hf_goals], 1),
        "openvino": searches(fast, ov, train_ids[: args.goals], args.concurrency),
    }
    out["mcts"]["ratio_cpu"] = out["mcts"]["openvino"]["sims_per_cpu_min"] / out["mcts"]["hf"]["sims_per_cpu_min"]
    out["mcts"]["ratio_wall"] = out["mcts"]["openvino"]["sims_per_min"] / out["mcts"]["hf"]["sims_per_min"]
    out["eval"] = {
        "hf": episodes(today, hf, test_ids[: args.hf_goals * 2], 1),
        "openvino": episodes(fast, ov, test_ids[: args.eval_goals], args.concurrency),
    }
    out["eval"]["ratio"] = out["eval"]["openvino"]["episodes_per_min"] / out["eval"]["hf"]["episodes_per_min"]
    out["eval"]["ratio_steps"] = out["eval"]["openvino"]["steps_per_min"] / out["eval"]["hf"]["steps_per_min"]
    engine.close()
    today.close()
    fast.close()
    return out


def report(r: dict) -> str:
    a, o, m, e = r["agreement"], r["overhead"], r["mcts"], r["eval"]
    gap = f"{a['mean_logprob_gap']:.4f}" if a["mean_logprob_gap"] is not None else "-"
    return "\n".join([
        "\n## Engines: HF (today's path) vs OpenVINO GenAI with many searches in flight\n",
        f"- engine start (GGUF written or found, pipeline compiled): {r['engine_start_seconds']:.1f} s; torch threads {r['threads']}",
        f"- greedy agreement on {a['states']} WebShop states: identical completions {a['identical_completions']}, "
        f"identical commands {a['identical_commands']}; mean |log-prob gap| on identical completions {gap} nats",
        f"- 16 concurrent requests: ours {o['tokens_per_s']['ours']:.1f} tok/s, the pipeline's generate "
        f"{o['tokens_per_s']['raw']:.1f} tok/s ({100 * o['share']:.0f}%)",
        f"- MCTS ({r['mcts']['hf']['simulations']} vs {m['openvino']['simulations']} simulations): HF {m['hf']['sims_per_cpu_min']:.2f} "
        f"sims/CPU-min ({m['hf']['sims_per_min']:.2f}/min wall, {m['hf']['goals']} goals, load {m['hf']['load_average'][0]:.2f}->{m['hf']['load_average'][1]:.2f}); "
        f"OpenVINO x{m['openvino']['concurrency']} {m['openvino']['sims_per_cpu_min']:.2f} sims/CPU-min ({m['openvino']['sims_per_min']:.2f}/min wall, "
        f"{m['openvino']['goals']} goals, load {m['openvino']['load_average'][0]:.2f}->{m['openvino']['load_average'][1]:.2f}): "
        f"{m['ratio_cpu']:.1f}x per CPU-minute, {m['ratio_wall']:.1f}x wall",
        f"- zero-shot episodes: HF {e['hf']['episodes_per_min']:.2f}/min ({e['hf']['goals']} goals, {e['hf']['avg_steps']:.1f} steps each); "
        f"OpenVINO x{e['openvino']['concurrency']} {e['openvino']['episodes_per_min']:.2f}/min ({e['openvino']['goals']} goals, "
        f"{e['openvino']['avg_steps']:.1f} steps each): {e['ratio']:.1f}x episodes/min, {e['ratio_steps']:.1f}x steps/min",
    ])


if __name__ == "__main__":
    cli(parse_args, run, report)
