"""Per iteration: the critic's tau against its siblings' first returns, with a bootstrap 95% interval over nodes.

The mean is agentq.data.diagnostics.critic_agreement's ``first_return_tau``; this adds the
interval and the signs. Reads the run's trees (``iter_*/collect/task_*.json``).

    python experiments/webshop_outcome_iter/critic_first_returns.py experiments/webshop_outcome_iter/runs/agentq
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from statistics import fmean

from agentq.data.diagnostics import first_return_taus
from agentq.records.tree import Tree

if __name__ == "__main__":
    for collect in sorted(Path(sys.argv[1]).glob("iter_*/collect")):
        found = [t for p in collect.glob("task_*.json") for t in first_return_taus(Tree.from_dict(json.loads(p.read_text())["tree"]))]
        if not found:
            continue
        taus = [tau for tau, _ in found]
        rng = random.Random(0)
        means = sorted(fmean(rng.choices(taus, k=len(taus))) for _ in range(10_000))
        print(
            f"{collect.parent.name}: tau {fmean(taus):+.3f} over {len(taus)} nodes, "
            f"bootstrap 95% [{means[250]:+.3f}, {means[9750]:+.3f}], "
            f"{fmean(k for _, k in found):.1f} siblings per node, {sum(t > 0 for t in taus)} positive, "
            f"{sum(t < 0 for t in taus)} negative"
        )
