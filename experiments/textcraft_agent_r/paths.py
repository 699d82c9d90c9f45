"""What a collection probe's sampled paths did: outcome per tree, loops, failed commands,
and how many of the crafts and gets name an item on the scripted oracle's plan for the goal.

    python experiments/textcraft_agent_r/paths.py experiments/textcraft_agent_r/runs/probe_craftable

Reads the run's saved config for the env (its step budget and text) and the first
iteration's search results; nothing is sampled. Then it tallies the same loops and failed
commands over the greedy reads (``eval/zero_shot``) of each run it is given, iteration by
iteration (a probe has none); the first run's trees are the ones summarised:

    python experiments/textcraft_agent_r/paths.py experiments/textcraft_agent_r/runs/agent_r \
        experiments/textcraft_agent_r/runs/agent_r_good
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentq.layout import RunLayout
from agentq.modes import ZERO_SHOT
from envs.demonstrations import oracle_commands
from envs.textcraft.commands import LOOP, failed, item, longest_run, most_played


def main(run: Path) -> None:
    layout = RunLayout(run)
    cfg = OmegaConf.load(layout.config)
    env = instantiate(cfg.env.make)
    on_plan = {"craft": Counter(), "get": Counter()}
    paths = successes = 0
    behaviour = Counter()
    for path in sorted(layout.collect(1).glob("task_*.json")):
        task_id = int(path.stem.removeprefix("task_"))
        _, oracle = oracle_commands(env, task_id, cfg.eval.max_steps)
        plan = {named[1] for named in map(item, oracle) if named}
        outcomes = []
        for trajectory in json.loads(path.read_text())["trajectories"]:
            commands = [step["command"] for step in trajectory["steps"]]
            outcomes.append(
                f"{'success' if trajectory['success'] else 'failure'} in {len(commands)}"
            )
            paths += 1
            successes += bool(trajectory["success"])
            behaviour += tally(trajectory)
            for kind, name in filter(None, map(item, commands)):
                on_plan[kind][name in plan] += 1
        print(f"task {task_id} (depth {env.unwrapped.depths[task_id]}): {', '.join(outcomes)}")
    print(f"{successes} of {paths} paths succeeded; {described(behaviour)}")
    for kind, counts in on_plan.items():
        print(f"{kind}: {counts[True]} of {counts.total()} name an item on the oracle's plan")


def tally(trajectory: dict) -> Counter:
    """A path's loop, cycle, steps and steps answered "Could not" (see ``described``)."""
    commands = [step["command"] for step in trajectory["steps"]]
    return Counter({
        "loops": longest_run(commands) >= LOOP, "cycles": most_played(commands) >= LOOP, "steps": len(commands),
        "refused": sum(failed(step["observation"]) for step in trajectory["steps"]),
    })  # fmt: skip


def described(behaviour: Counter) -> str:
    return (f"{behaviour['loops']} repeat one command {LOOP}+ times in a row, "
            f"{behaviour['cycles']} play one command {LOOP}+ times in all; "
            f"{behaviour['refused']} of {behaviour['steps']} steps got 'Could not' back")  # fmt: skip


def greedy_reads(run: Path) -> None:
    """The same tally over each evaluated iteration's greedy episodes (iteration 0: the base's)."""
    layout = RunLayout(run)
    for iteration, mode, folder in layout.episode_folders():
        if mode != ZERO_SHOT:
            continue
        episodes = [
            json.loads(path.read_text())["trajectory"]
            for path in sorted(folder.glob("task_*.json"))
        ]
        crafted = sum(bool(episode["success"]) for episode in episodes)
        behaviour = described(sum(map(tally, episodes), Counter()))
        print(
            f"{run.name} iteration {iteration}, greedy: {crafted} of {len(episodes)} crafted; {behaviour}"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    for run in map(Path, sys.argv[1:]):
        greedy_reads(run)
