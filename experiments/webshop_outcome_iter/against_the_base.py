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


if __name__ == "__main__":
    run, max_steps = Path(sys.argv[1]), int(sys.argv[2])
    base = episodes(Path(sys.argv[3]) if len(sys.argv) > 3 else run, 0)
    iteration = 1
    while (policy := episodes(run, iteration)) is not None:
        won = sum(policy[t]["success"] and not base[t]["success"] for t in base)
        lost = sum(base[t]["success"] and not policy[t]["success"] for t in base)
        same = sum([s["command"] for s in policy[t]["steps"]] == [s["command"] for s in base[t]["steps"]] for t in base)
        out = sum(len(e["steps"]) >= max_steps and e["score"] == 0 for e in policy.values())
        diff = [policy[t]["score"] - base[t]["score"] for t in base]
        rng = random.Random(0)
        means = sorted(sum(rng.choices(diff, k=len(diff))) / len(diff) for _ in range(10_000))
        print(
            f"iteration {iteration}: won {won} lost {lost} (exact McNemar p {mcnemar_exact(won, lost):.3f}), "
            f"reward difference {sum(diff) / len(diff):+.3f} [{means[250]:+.3f}, {means[9750]:+.3f}], "
            f"{same} episodes identical to the base's, {out} ran out of steps"
        )
        iteration += 1
