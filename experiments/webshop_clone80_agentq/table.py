"""Agent Q from the 80-demonstration clone, against the clone and RFT on the same dev goals.

    python experiments/webshop_clone80_agentq/table.py [runs folder] [RFT runs folder] [the clone's dev run]

Defaults: experiments/webshop_clone80_agentq/runs (``agentq``: MCTS on 60 training goals, step IPO
on its outcome-backed pairs; ``agentq_agree``: the same trees, only the pairs whose chosen action
also had the higher backed-up return; ``agentq_uct200``: MCTS without the critic, alpha 1, on a new
draw of 200 training goals, 6 of them among the 60; ``agentq_uct200_b01`` / ``_b03``: its trees and pairs,
IPO at beta 0.1 / 0.3 in place of 1.0), experiments/webshop_clone80_rft/runs (RFT on best-of-4 samples of the
same 60 goals, two updates) and experiments/webshop_bc_scale/runs/eval_n80 (the clone greedy on
the 100 dev goals). Writes beside this file table.md / table.csv (success with its Wilson 95%
interval, average reward with its bootstrap one, cost per success, and against the clone goal by
goal: won / lost with the exact McNemar p, the paired bootstrap interval of the reward
difference, identical episodes; the scripted oracle on the same goals and step budget), the
Agent Q runs' data and critic agreement appended to table.md, and behaviour.md / behaviour.csv
(per row, the result each episode opened first, the options it clicked, whether it bought).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentq.compare import (
    diagnostics_markdown,
    evaluated_row,
    last_by_goal,
    oracle_study_row,
    write_rows,
)
from agentq.modes import ZERO_SHOT
from envs.webshop.episodes import behaviour_row

STUDY = Path(__file__).parent
AGENT_Q = {
    "agentq": "Agent Q: step IPO on MCTS's outcome-backed pairs",
    "agentq_agree": "Agent Q: the same, only pairs that chose the higher return",
    "agentq_uct200": "Agent Q without the critic (alpha 1): step IPO on MCTS's pairs from a new draw of 200 goals",
    "agentq_uct200_b01": "the same 111 pairs, IPO beta 0.1 (target margin 5 nats)",
    "agentq_uct200_b03": "the same 111 pairs, IPO beta 0.3 (target margin 1.7 nats)",
}
OWN_PAIRS = ("agentq", "agentq_agree", "agentq_uct200")  # the b01 / b03 arms train on agentq_uct200's
RFT = {"rft": "RFT on best-of-4 successes (lr 3e-4, 3 epochs)", "rft_light": "RFT on the same (lr 1e-4, 1 epoch)"}


def main(runs_folder: Path, rft_runs: Path, clone_run: Path) -> None:
    clone = last_by_goal(clone_run)
    rows = [evaluated_row("clone on 80 demonstrations, greedy", clone_run, "last", ZERO_SHOT)]
    behaviours = [behaviour_row("clone on 80 demonstrations, greedy (dev)", clone)]
    runs = {f"{label}, greedy": rft_runs / arm for arm, label in RFT.items()}
    runs |= {f"{label}, greedy": runs_folder / arm for arm, label in AGENT_Q.items()}
    for label, run in runs.items():
        rows.append(evaluated_row(label, run, "last", ZERO_SHOT, clone))
        behaviours.append(behaviour_row(f"{label} (dev)", last_by_goal(run)))
    rows.append(oracle_study_row(runs_folder / "agentq"))
    data = "".join(
        f"\nWhere the data of `{arm}` came from, and its critic against the tree:\n\n{diagnostics_markdown(runs_folder / arm)}"
        for arm in OWN_PAIRS
    )
    print(write_rows(STUDY, "table", rows, appendix=data))
    print(write_rows(STUDY, "behaviour", behaviours))


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    runs = STUDY.parent / "webshop_clone80_rft" / "runs"
    defaults = [STUDY / "runs", runs, STUDY.parent / "webshop_bc_scale" / "runs" / "eval_n80"]
    main(*(args + defaults[len(args) :]))
