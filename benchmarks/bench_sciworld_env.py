"""ScienceWorld env speed: steps per second against the raw package, and reset + replay.

The package has no snapshot, so MCTS returns to a node by resetting the env
and replaying the node's commands; this measures what a 10-step prefix costs.
Both the env and the package's own ``step`` compute the valid actions on
every step, which is most of a step's time (about 40-150 ms in a kitchen).

    python -m benchmarks.bench_sciworld_env [--episodes 6] [--repeats 5]

Episodes follow each task's gold action sequence, so they visit the rooms and
objects a solving agent would. Prints a markdown table; ``run(parse_args([...]))``
returns the figures as a dict (``benchmarks/run_all.py``), with
``snapshot_restore_s`` None: there is no snapshot to time.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from scienceworld import ScienceWorldEnv as PackageEnv

from envs.scienceworld import DEFAULT_TASKS, ScienceWorldEnv, parse_task_id

PREFIX_LENGTH = 10


def gold_episodes(env: ScienceWorldEnv, count: int) -> list[tuple[str, list[str]]]:
    """The first ``count`` test tasks (one per default task, then round again) and their gold paths."""
    episodes = []
    for tid in env.task_ids("test")[:count]:
        _, info = env.reset(options={"task_id": tid, "gold_actions": True})
        episodes.append((tid, info["gold_actions"]))
    return episodes


def env_steps_per_second(env: ScienceWorldEnv, episodes: list[tuple[str, list[str]]]) -> tuple[float, int]:
    steps, elapsed = 0, 0.0
    for tid, gold in episodes:
        env.reset(options={"task_id": tid})
        start = time.perf_counter()
        for action in gold:
            *_, terminated, truncated, _ = env.step(action)
            steps += 1
            if terminated or truncated:
                break
        elapsed += time.perf_counter() - start
    return steps / elapsed, steps


def package_steps_per_second(episodes: list[tuple[str, list[str]]]) -> tuple[float, float]:
    """The package's own ``load`` / ``reset`` / ``step`` on the same episodes; also its JVM start."""
    start = time.perf_counter()
    package = PackageEnv(envStepLimit=10**6)
    boot = time.perf_counter() - start
    steps, elapsed = 0, 0.0
    try:
        for tid, gold in episodes:
            task, variation = parse_task_id(tid)
            package.load(task, variation, "")
            package.reset()
            start = time.perf_counter()
            for action in gold:
                _, _, done, _ = package.step(action)
                steps += 1
                if done:
                    break
            elapsed += time.perf_counter() - start
    finally:
        package.close()
    return steps / elapsed, boot


def reset_and_replay(env: ScienceWorldEnv, episodes: list[tuple[str, list[str]]], repeats: int):
    """Seconds for reset alone and for reset + a 10-step replay, on the longest gold path."""
    tid, gold = max(episodes, key=lambda e: len(e[1]))
    prefix = gold[:PREFIX_LENGTH]
    resets, replays, final = [], [], None
    for _ in range(repeats):
        start = time.perf_counter()
        env.reset(options={"task_id": tid})
        resets.append(time.perf_counter() - start)
        for action in prefix:
            observation = env.step(action)[0]
        replays.append(time.perf_counter() - start)
        assert final in (None, observation), "replay did not reach the same observation"
        final = observation
    return tid, len(prefix), _median(resets), _median(replays)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=len(DEFAULT_TASKS))
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = ScienceWorldEnv(max_steps=200)
    start = time.perf_counter()
    env.task_ids("test")  # starts the JVM and reads the splits
    boot = time.perf_counter() - start
    try:
        episodes = gold_episodes(env, args.episodes)
        sps, steps = env_steps_per_second(env, episodes)
        tid, length, reset, replay = reset_and_replay(env, episodes, args.repeats)
    finally:
        env.close()
    package_sps, package_boot = package_steps_per_second(episodes)
    return {
        "tasks": [t for t, _ in episodes],
        "num_tasks": len(env.tasks),
        "boot_s": boot,
        "package_boot_s": package_boot,
        "steps_per_s": sps,
        "steps": steps,
        "package_steps_per_s": package_sps,
        "replay_task": tid,
        "prefix_length": length,
        "repeats": args.repeats,
        "reset_s": reset,
        "snapshot_restore_s": None,  # the package cannot copy a simulator state
        "reset_replay_10_s": replay,
    }


def report(results: dict[str, Any]) -> str:
    r = results
    return "\n".join(
        [
            f"tasks: {', '.join(r['tasks'])}\n",
            "| measure | value |",
            "|---|---|",
            f"| env: JVM start + splits of {r['num_tasks']} tasks | {r['boot_s']:.1f} s |",
            f"| package: JVM start | {r['package_boot_s']:.1f} s |",
            f"| env steps / s ({r['steps']} gold-path steps) | {r['steps_per_s']:.1f} |",
            f"| package `step` / s (same steps) | {r['package_steps_per_s']:.1f} |",
            f"| reset ({r['replay_task']}, median of {r['repeats']}) | {r['reset_s'] * 1e3:.0f} ms |",
            "| restore(snapshot) | none: the package has no snapshot; MCTS resets and replays |",
            f"| reset + replay of a {r['prefix_length']}-step prefix (median of {r['repeats']}) | "
            f"{r['reset_replay_10_s']:.2f} s |",
        ]
    )


def main() -> None:
    print(report(run(parse_args())))


if __name__ == "__main__":
    main()
