"""OpenTable env speed: steps per second, reset, and reset + replay of a prefix.

The env has no snapshot (a browser session cannot be copied), so MCTS returns
to a node by resetting and replaying the node's action prefix; this measures
what that costs for a 10-step prefix of the scripted oracle (cookie dialog,
search, restaurant page, promotion dialog, pickers).

    python -m benchmarks.bench_opentable_env [--episodes 10] [--random-episodes 5] [--repeats 10]
        [--screenshot experiments/opentable/restaurant_page.png]

Prints a markdown table; ``run(parse_args([...]))`` returns the figures as a
dict (``benchmarks/run_all.py``), with ``snapshot_restore_s`` None: there is
no snapshot to time.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.opentable import OpenTableEnv
from envs.opentable.oracle import next_action, solve


def oracle_steps_per_second(env: OpenTableEnv, episodes: int) -> tuple[float, int, int]:
    tasks = env.task_ids("train")[:episodes]
    steps = successes = 0
    start = time.perf_counter()
    for task_id in tasks:
        actions, info = solve(env, task_id)
        steps += len(actions)
        successes += info["success"]
    return steps / (time.perf_counter() - start), steps, successes


def random_steps_per_second(
    env: OpenTableEnv, episodes: int, rng: random.Random
) -> tuple[float, int]:
    """Uniform over the listed actions (templates filled with a word): many
    invalid or no-op steps and some navigations, as an untrained policy makes."""
    steps = 0
    start = time.perf_counter()
    for task_id in env.task_ids("train")[:episodes]:
        _, info = env.reset(options={"task_id": task_id})
        done = False
        while not done:
            action = rng.choice(info["valid_actions"])
            action = action.replace("GOTO [...]", "GOTO [/]").replace("[...]", "[Saturday]")
            _, _, terminated, truncated, info = env.step(action)
            steps += 1
            done = terminated or truncated
    return steps / (time.perf_counter() - start), steps


def reset_and_replay(env: OpenTableEnv, repeats: int) -> tuple[float, float, str]:
    task_id = env.task_ids("test")[0]
    task = env.task(task_id)
    obs, _ = env.reset(options={"task_id": task_id})
    prefix = []
    for _ in range(10):
        prefix.append(next_action(task, obs))
        obs = env.step(prefix[-1])[0]
    target = obs

    start = time.perf_counter()
    for _ in range(repeats):
        env.reset(options={"task_id": task_id})
    reset = (time.perf_counter() - start) / repeats

    start = time.perf_counter()
    for _ in range(repeats):
        env.reset(options={"task_id": task_id})
        for action in prefix:
            obs = env.step(action)[0]
    replay = (time.perf_counter() - start) / repeats
    assert obs == target, "replay did not reach the same page"
    return reset, replay, " / ".join(prefix)


def screenshot(env: OpenTableEnv, path: Path) -> None:
    """The restaurant page after the pickers are set, as a person would see it."""
    task_id = env.task_ids("test")[0]
    task = env.task(task_id)
    obs, _ = env.reset(options={"task_id": task_id})
    while not re.search(r"Page: .*\(/r/.*time=", obs):
        obs = env.step(next_action(task, obs))[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    env.browser.screenshot(str(path))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10, help="oracle episodes")
    parser.add_argument("--random-episodes", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--screenshot", type=Path, default=None)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = OpenTableEnv(max_steps=args.max_steps)
    try:
        start = time.perf_counter()
        env.reset(options={"task_id": 0})
        first = time.perf_counter() - start
        oracle_sps, oracle_steps, successes = oracle_steps_per_second(env, args.episodes)
        random_sps, random_steps = random_steps_per_second(
            env, args.random_episodes, random.Random(0)
        )
        reset, replay, prefix = reset_and_replay(env, args.repeats)
        if args.screenshot is not None:
            screenshot(env, args.screenshot)
    finally:
        env.close()
    return {
        "first_reset_s": first,
        "prefix": prefix,
        "oracle_steps_per_s": oracle_sps,
        "oracle_steps": oracle_steps,
        "episodes": args.episodes,
        "booked": successes,
        "random_steps_per_s": random_sps,
        "random_steps": random_steps,
        "reset_s": reset,
        "snapshot_restore_s": None,  # a browser session cannot be copied
        "reset_replay_10_s": replay,
        "screenshot": None if args.screenshot is None else str(args.screenshot),
    }


def report(results: dict[str, Any]) -> str:
    r = results
    lines = [
        f"first reset (site start + Chromium launch): {r['first_reset_s']:.2f} s",
        f"10-step prefix: {r['prefix']}\n",
        "| measure | value |",
        "|---|---|",
        f"| env steps / s, oracle ({r['oracle_steps']} steps, {r['episodes']} episodes, "
        f"{r['booked']} booked) | {r['oracle_steps_per_s']:.1f} |",
        f"| env steps / s, random listed actions ({r['random_steps']} steps) | {r['random_steps_per_s']:.1f} |",
        f"| reset (fresh context, home page) | {r['reset_s'] * 1000:.0f} ms |",
        "| restore(snapshot) | none: a browser session cannot be copied; MCTS resets and replays |",
        f"| reset + replay of a 10-step prefix | {r['reset_replay_10_s'] * 1000:.0f} ms |",
    ]
    if r["screenshot"]:
        lines.append(f"\nscreenshot: {r['screenshot']}")
    return "\n".join(lines)


def main() -> None:
    print(report(run(parse_args())))


if __name__ == "__main__":
    main()
