"""What a collection probe's sampled paths did: outcome per tree, loops, failed commands,
and how many of the crafts and gets name an item on the scripted oracle's plan for the goal.

    python experiments/textcraft_agent_r/paths.py experiments/textcraft_agent_r/runs/probe_craftable

Reads the run's saved config for the env (its step budget and text) and the first
iteration's search results; nothing is sampled.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentq.layout import RunLayout
from envs.demonstrations import oracle_commands
from envs.textcraft.commands import LOOP, failed, item, longest_run, most_played


def main(run: Path) -> None:
    layout = RunLayout(run)
    cfg = OmegaConf.load(layout.config)
    env = instantiate(cfg.env.make)
    on_plan = {"craft": Counter(), "get": Counter()}
    paths = successes = loops = cycles = steps = refused = 0
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
            loops += longest_run(commands) >= LOOP
            cycles += most_played(commands) >= LOOP
            steps += len(commands)
            refused += sum(failed(step["observation"]) for step in trajectory["steps"])
            for kind, name in filter(None, map(item, commands)):
                on_plan[kind][name in plan] += 1
        print(f"task {task_id} (depth {env.unwrapped.depths[task_id]}): {', '.join(outcomes)}")
    print(f"{successes} of {paths} paths succeeded; {loops} repeat one command {LOOP}+ times in a row, "
          f"{cycles} play one command {LOOP}+ times in all; "
          f"{refused} of {steps} steps got 'Could not' back")  # fmt: skip
    for kind, counts in on_plan.items():
        print(f"{kind}: {counts[True]} of {counts.total()} name an item on the oracle's plan")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
