"""Does a TextCraft clone pick the oracle's command in the oracle's own states?

    python experiments/textcraft_bc/on_oracle_states.py experiments/textcraft_bc/runs/<run> [examples.jsonl]

Reads the run's saved config (its model, adapter, decoding and eval split); for a
run that trained the clone, the adapters it trained are merged on top. For each
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

Prints, per command kind (get / craft / inventory): the oracle's steps and the clone's
exact matches; and for each wrong craft, where its item stands in the oracle's plan
(see :func:`wrong_craft`). The per-step rows are kept in
<run>/on_oracle_states[_trained].json; the counts are read from that file when it exists.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from omegaconf import OmegaConf

from agentq import components
from agentq.agent.episode import start
from agentq.layout import RunLayout
from agentq.models.stacking import adapter_chain
from envs.demonstrations import oracle_commands
from envs.textcraft.commands import item


def kind(command: str) -> str:
    return command.split(" ", 1)[0] if command else "none"


def crafted_item(command: str) -> str | None:
    named = item(command or "")
    return named[1] if named and named[0] == "craft" else None


def wrong_craft(row: dict, crafts: list[str | None]) -> str | None:
    """Where a wrong craft in ``row`` stands in the oracle's plan of that goal (``crafts``: the
    item each oracle step crafts, None for a get): the item the oracle crafts now (another
    count or recipe), one it crafts later (ahead of its ingredients), one it crafted earlier
    (a repeat), or none of them (outside the goal's recipe tree)."""
    crafted = crafted_item(row["clone"])
    if row["match"] or crafted is None:
        return None
    t = row["step"]
    if crafted == crafts[t]:
        return "same item"
    if crafted in crafts[t + 1 :]:
        return "ahead"
    if crafted in crafts[:t]:
        return "repeat"
    return "outside"


def proposals(run: Path, task_ids: list | None) -> list[dict]:
    """One row per oracle step of each goal: the oracle's command and the clone's greedy one."""
    cfg = OmegaConf.load(RunLayout(run).config)
    trained = RunLayout(run).adapters(int(cfg.iterations))
    if trained:  # a training run's clone: the config's base with the adapters the run trained
        cfg.model.adapter = [str(adapter) for adapter in [*adapter_chain(cfg.model.adapter), *trained]]
    parts = components.build(cfg)
    model, tokenizer = parts.model.load()
    policy = parts.policy(model, tokenizer, engine=parts.engine(model, tokenizer))
    env = parts.env
    rows = []
    for task_id in task_ids or parts.task_ids()[1]:
        _, oracle = oracle_commands(env, task_id, parts.eval.max_steps)
        history = start(env, task_id)
        for t, command in enumerate(oracle):
            proposed = policy.propose(history, 1, greedy=True)[0].command
            rows.append({"task_id": task_id, "step": t, "oracle": command, "clone": proposed, "match": proposed == command})
            observation, _, _, _, info = env.step(command)
            history = history.extend(f"COMMAND: {command}", observation, info.get("valid_actions"))
    parts.close()
    return rows


def main(run: Path, trained_on: Path | None = None) -> None:
    out = run / f"on_oracle_states{'_trained' if trained_on else ''}.json"
    if not out.exists():  # the model's proposals take minutes; the counts below are read from this file
        task_ids = [json.loads(line)["task_id"] for line in trained_on.read_text().splitlines()] if trained_on else None
        out.write_text(json.dumps(proposals(run, task_ids), indent=1))
    rows = json.loads(out.read_text())
    goals = len({r["task_id"] for r in rows})
    matched = sum(r["match"] for r in rows)
    print(f"{run}: {goals} {'training' if trained_on else 'held-out'} goals, {len(rows)} oracle steps, "
          f"clone matched {matched} ({matched / len(rows):.0%})")
    steps, matches = Counter(kind(r["oracle"]) for r in rows), Counter(kind(r["oracle"]) for r in rows if r["match"])
    for k in sorted(steps):
        print(f"  oracle {k}: {steps[k]} steps, clone matched {matches[k]} ({matches[k] / steps[k]:.0%})")
    first = [r for r in rows if r["step"] == 0]
    print(f"  first steps matched: {sum(r['match'] for r in first)} of {len(first)}")
    print(f"  clone's kinds when wrong: {dict(Counter(kind(r['clone']) for r in rows if not r['match']))}")
    crafts: dict = {}
    for r in rows:  # rows are in step order within each goal
        crafts.setdefault(r["task_id"], []).append(crafted_item(r["oracle"]))
    wrong = Counter(w for r in rows if (w := wrong_craft(r, crafts[r["task_id"]])))
    print(f"  wrong crafts, by the item against the oracle's plan: {dict(wrong)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
