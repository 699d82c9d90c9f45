"""Does a TextCraft clone pick the oracle's command in the oracle's own states?

    python experiments/textcraft_bc/on_oracle_states.py experiments/textcraft_bc/runs/<run> [examples.jsonl]

Reads the run's saved config (its model, adapter, decoding and eval split). For each
of its first ``eval.num_tasks`` held-out goals (or, given a training run's
examples.jsonl, each goal the clone was trained on), the oracle plays the goal and, before
each oracle command, the clone proposes one action greedily from the history the
oracle's own earlier commands made: the states the clone was trained on, never the
states its own mistakes lead to. Then the oracle's command is executed, whatever the
clone said.

This separates two explanations of a clone that crafts nothing. If it matches the
oracle here and fails only in its own episodes, its errors compound (what DART's
planted mistakes address). If it does not match here either, it has not learnt the
step itself: which recipe to use, with which count.

Prints, per command kind (get / craft / inventory): the oracle's steps, the clone's
exact matches, and for a wrong craft whether it names an item of this goal's recipe
tree (one the oracle crafts later, or the goal) or another recipe of the listed ones.
Writes the per-step rows to <run>/on_oracle_states[_trained].json.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

from omegaconf import OmegaConf

from agentq import components
from agentq.agent.episode import start
from envs.demonstrations import oracle_commands

CRAFT = re.compile(r"^craft \d+ (.+?) using ")


def kind(command: str) -> str:
    return command.split(" ", 1)[0] if command else "none"


def crafted_item(command: str) -> str | None:
    match = CRAFT.match(command or "")
    return match.group(1) if match else None


def main(run: Path, trained_on: Path | None = None) -> None:
    cfg = OmegaConf.load(run / "config.yaml")
    parts = components.build(cfg)
    model, tokenizer = parts.model.load()
    policy = parts.policy(model, tokenizer, engine=parts.engine(model, tokenizer))
    _, task_ids = parts.task_ids()
    if trained_on is not None:
        task_ids = [json.loads(line)["task_id"] for line in trained_on.read_text().splitlines()]
    env = parts.env
    rows = []
    for task_id in task_ids:
        _, oracle = oracle_commands(env, task_id, parts.eval.max_steps)
        tree = {crafted_item(c) for c in oracle} - {None}
        history = start(env, task_id)
        for t, command in enumerate(oracle):
            proposed = policy.propose(history, 1, greedy=True)[0].command
            item = crafted_item(proposed)
            rows.append(
                {
                    "task_id": task_id,
                    "step": t,
                    "oracle": command,
                    "clone": proposed,
                    "match": proposed == command,
                    "same_kind": kind(proposed) == kind(command),
                    "craft_in_tree": item in tree if item else None,
                }
            )
            observation, _, _, _, info = env.step(command)
            history = history.extend(f"COMMAND: {command}", observation, info.get("valid_actions"))
    suffix = "_trained" if trained_on else ""
    (run / f"on_oracle_states{suffix}.json").write_text(json.dumps(rows, indent=1))
    print(f"{run}: {len(task_ids)} {'training' if trained_on else 'held-out'} goals, {len(rows)} oracle steps")
    steps, matches = Counter(kind(r["oracle"]) for r in rows), Counter(kind(r["oracle"]) for r in rows if r["match"])
    for k in sorted(steps):
        print(f"  oracle {k}: {steps[k]} steps, clone matched {matches[k]} ({matches[k] / steps[k]:.0%})")
    first = [r for r in rows if r["step"] == 0]
    print(f"  first steps matched: {sum(r['match'] for r in first)} of {len(first)}")
    wrong_crafts = [r for r in rows if not r["match"] and kind(r["clone"]) == "craft"]
    in_tree = sum(bool(r["craft_in_tree"]) for r in wrong_crafts)
    print(f"  wrong crafts: {len(wrong_crafts)}, of an item in the goal's recipe tree: {in_tree}")
    print(f"  clone's kinds when wrong: {dict(Counter(kind(r['clone']) for r in rows if not r['match']))}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
