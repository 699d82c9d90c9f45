"""WebShop env speed: steps per second, and snapshot / restore against reset + replay.

MCTS returns to a node's state once per simulation; this measures what that
costs with the env's snapshot (keeping a frozen state) against the fallback
of resetting and replaying the node's 10-step action prefix.

    python -m benchmarks.bench_webshop_env [--episodes 200] [--repeats 2000]

Prints a markdown table; ``run(parse_args([...]))`` returns the figures as a
dict (``benchmarks/run_all.py``).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from typing import Any

from envs.webshop import WebShopEnv


def _prefix(env: WebShopEnv, task_id: int) -> list[str]:
    """A 10-step prefix that stays on the shop's pages: search, open an item,
    look at its sub-pages and options, without buying."""
    goal = env.engine.goals[task_id]
    env.reset(options={"task_id": task_id})
    info = env.step(f"search[{goal.instruction_text}]")[4]
    asin = next(
        a for a in info["valid_actions"] if a not in ("click[Back to Search]", "click[Next >]")
    )
    actions = [f"search[{goal.instruction_text}]", asin, "click[Description]", "click[< Prev]",
               "click[Features]", "click[< Prev]", "click[Reviews]", "click[< Prev]",
               "click[< Prev]", asin]  # fmt: skip
    return actions


def steps_per_second(env: WebShopEnv, episodes: int, rng: random.Random) -> tuple[float, int]:
    tasks = env.task_ids("train")
    steps = 0
    start = time.perf_counter()
    for _ in range(episodes):
        task_id = rng.choice(tasks)
        goal = env.engine.goals[task_id]
        _, info = env.reset(options={"task_id": task_id})
        done = False
        while not done:
            valid = info["valid_actions"]
            # Search with the instruction; otherwise a random clickable other
            # than Buy Now most of the time, so episodes visit many pages.
            if not valid:
                action = f"search[{goal.instruction_text}]"
            else:
                choices = [a for a in valid if a != "click[Buy Now]"] or valid
                action = (
                    "click[Buy Now]"
                    if "click[Buy Now]" in valid and rng.random() < 0.2
                    else rng.choice(choices)
                )
            _, _, terminated, truncated, info = env.step(action)
            steps += 1
            done = terminated or truncated
    return steps / (time.perf_counter() - start), steps


def restore_vs_replay(env: WebShopEnv, repeats: int) -> tuple[float, float]:
    task_id = env.task_ids("test")[0]
    actions = _prefix(env, task_id)
    env.reset(options={"task_id": task_id})
    for action in actions:
        env.step(action)
    snapshot = env.snapshot()

    start = time.perf_counter()
    for _ in range(repeats):
        env.restore(snapshot)
    restore = (time.perf_counter() - start) / repeats

    start = time.perf_counter()
    for _ in range(repeats // 10 or 1):
        env.reset(options={"task_id": task_id})
        for action in actions:
            env.step(action)
    replay = (time.perf_counter() - start) / (repeats // 10 or 1)
    assert env.snapshot() == snapshot, "replay did not reach the snapshot's state"
    return restore, replay


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--max-steps", type=int, default=15)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    env = WebShopEnv(max_steps=args.max_steps)
    build = time.perf_counter() - start
    sps, steps = steps_per_second(env, args.episodes, random.Random(0))
    restore, replay = restore_vs_replay(env, args.repeats)
    catalogue = env.engine.catalogue
    return {
        "catalogue": f"{len(catalogue.products)} products, {len(catalogue.goals)} goals ({catalogue.source})",
        "build_s": build,
        "steps_per_s": sps,
        "steps": steps,
        "episodes": args.episodes,
        "snapshot_restore_s": restore,
        "reset_replay_10_s": replay,
    }


def report(results: dict[str, Any]) -> str:
    restore, replay = results["snapshot_restore_s"], results["reset_replay_10_s"]
    return "\n".join(
        [
            f"catalogue: {results['catalogue']}; load + BM25 index {results['build_s']:.2f} s\n",
            "| measure | value |",
            "|---|---|",
            f"| env steps / s ({results['steps']} steps, {results['episodes']} episodes) | {results['steps_per_s']:,.0f} |",
            f"| restore(snapshot) | {restore * 1e6:.2f} us |",
            f"| reset + replay of a 10-step prefix | {replay * 1e6:,.0f} us |",
            f"| replay / restore | {replay / restore:,.0f}x |",
        ]
    )


def main() -> None:
    print(report(run(parse_args())))


if __name__ == "__main__":
    main()
