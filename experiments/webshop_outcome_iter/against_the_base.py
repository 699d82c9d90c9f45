"""Each iteration's zero-shot episodes against the base's, goal by goal: goals won and lost
(with the exact McNemar p), the paired bootstrap interval of the reward difference,
episodes identical to the base's, and episodes that ran out of steps without buying.

    python experiments/webshop_outcome_iter/against_the_base.py experiments/webshop_outcome_iter/runs/agentq 15

A third argument takes the base's episodes from another run (a comparison's trained rows
do not evaluate the base: its anchor run does):

    python experiments/webshop_outcome_iter/against_the_base.py experiments/webshop_objectives/runs/rft 15 \
        experiments/webshop_objectives/runs/agentq
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from agentq.intervals import mcnemar_exact


def episodes(run: Path, iteration: int) -> dict | None:
    folder = run / f"iter_{iteration:03d}" / "eval" / "zero_shot"
    found = [json.loads(p.read_text())["trajectory"] for p in folder.glob("task_*.json")]
    return {t["task_id"]: t for t in found} or None


def commands(trajectory: dict) -> list[str]:
    return [step["command"] for step in trajectory["steps"]]


def against(policy: dict, base: dict, max_steps: int) -> dict:
    """A policy's episodes against the base's on the same goals: goals won and lost with the
    exact McNemar p, the mean reward difference with its paired bootstrap 95% interval,
    episodes identical to the base's, and the policy's episodes out of steps without reward."""
    won = sum(policy[t]["success"] and not base[t]["success"] for t in base)
    lost = sum(base[t]["success"] and not policy[t]["success"] for t in base)
    diff = [policy[t]["score"] - base[t]["score"] for t in base]
    rng = random.Random(0)
    means = sorted(sum(rng.choices(diff, k=len(diff))) / len(diff) for _ in range(10_000))
    return {
        "won": won, "lost": lost, "p": mcnemar_exact(won, lost),
        "diff": sum(diff) / len(diff), "lo": means[250], "hi": means[9750],
        "same": sum(commands(policy[t]) == commands(base[t]) for t in base),
        "out": sum(len(e["steps"]) >= max_steps and e["score"] == 0 for e in policy.values()),
    }  # fmt: skip


if __name__ == "__main__":
    run, max_steps = Path(sys.argv[1]), int(sys.argv[2])
    base = episodes(Path(sys.argv[3]) if len(sys.argv) > 3 else run, 0)
    iteration = 1
    while (policy := episodes(run, iteration)) is not None:
        a = against(policy, base, max_steps)
        print(
            f"iteration {iteration}: won {a['won']} lost {a['lost']} (exact McNemar p {a['p']:.3f}), "
            f"reward difference {a['diff']:+.3f} [{a['lo']:+.3f}, {a['hi']:+.3f}], "
            f"{a['same']} episodes identical to the base's, {a['out']} ran out of steps"
        )
        iteration += 1
