"""Each iteration's zero-shot episodes against the base's, goal by goal: goals won and lost
(with the exact McNemar p), the paired bootstrap interval of the reward difference,
episodes identical to the base's, and episodes that ran out of steps without buying.

    python experiments/webshop_outcome_iter/against_the_base.py experiments/webshop_outcome_iter/runs/agentq 15

A third argument takes the base's episodes from another run (a comparison's trained rows
do not evaluate the base: its anchor run does):

    python experiments/webshop_outcome_iter/against_the_base.py experiments/webshop_objectives/runs/rft 15 \
        experiments/webshop_objectives/runs/agentq

The paired intervals in this study's NOTES and in webshop_objectives' were drawn by an earlier
copy of the comparison (10,000 resamples from random.Random(0)); agentq.compare.paired's
bootstrap draws other resamples, so a rerun can move an interval's ends in the third decimal.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentq.compare import by_goal, out_of_steps, paired
from agentq.modes import ZERO_SHOT


def against(policy: dict, base: dict, max_steps: int) -> dict:
    """agentq.compare.paired, and the policy's episodes out of steps without reward."""
    return paired(policy, base) | {"out": out_of_steps(policy.values(), max_steps)}


if __name__ == "__main__":
    run, max_steps = Path(sys.argv[1]), int(sys.argv[2])
    base = by_goal(Path(sys.argv[3]) if len(sys.argv) > 3 else run, 0, ZERO_SHOT)
    iteration = 1
    while policy := by_goal(run, iteration, ZERO_SHOT):
        a = against(policy, base, max_steps)
        print(
            f"iteration {iteration}: won {a['won']} lost {a['lost']} (exact McNemar p {a['p']:.3f}), "
            f"reward difference {a['diff']:+.3f} [{a['lo']:+.3f}, {a['hi']:+.3f}], "
            f"{a['identical']} episodes identical to the base's, {a['out']} ran out of steps"
        )
        iteration += 1
