"""The WebShop clone's recipe on 20 and on 80 demonstrations, on the same dev goals.

    python experiments/webshop_bc_scale/table.py [runs folder]

Default: experiments/webshop_bc_scale/runs. Writes table.md / table.csv beside this file. Each
clone is read twice: as its training run evaluated it (``n<demonstrations>``: webshop_bc's
decoding, whose actions carry a second, never-executed COMMAND line into the next prompt) and
as the clone studies decode (``eval_n<demonstrations>``: the action stops at its COMMAND line).
Per row: success with its Wilson 95% interval, average reward with its bootstrap one, model
calls and cost per success, and against the 20-demonstration clone under the same decoding
goals won and lost (exact McNemar p), the paired reward difference and identical episodes.
Last, the scripted oracle on the same goals and step budget. Also writes behaviour.md /
behaviour.csv: per row, the rank of the result each episode opened first, how many options it
clicked and whether it bought.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentq.compare import evaluated_row, last_by_goal, oracle_study_row, write_rows
from agentq.modes import ZERO_SHOT
from envs.webshop.episodes import behaviour_row

STUDY = Path(__file__).parent
DEMONSTRATIONS = (20, 80)  # the first is every row's comparison
DECODINGS = {
    "n": "webshop_bc's decoding (a second COMMAND line kept in the history)",
    "eval_n": "actions stop at the COMMAND line (the clone studies' decoding)",
}


def main(runs: Path) -> None:
    rows, behaviours = [], []
    for prefix, decoding in DECODINGS.items():
        fewest = last_by_goal(runs / f"{prefix}{DEMONSTRATIONS[0]}")
        for n in DEMONSTRATIONS:
            label = f"clone on {n} demonstrations, {decoding}"
            base = None if n == DEMONSTRATIONS[0] else fewest
            rows.append(evaluated_row(label, runs / f"{prefix}{n}", "last", ZERO_SHOT, base))
            behaviours.append(behaviour_row(label, last_by_goal(runs / f"{prefix}{n}")))
    rows.append(oracle_study_row(runs / f"n{DEMONSTRATIONS[0]}"))
    print(write_rows(STUDY, "table", rows))
    print(write_rows(STUDY, "behaviour", behaviours))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY / "runs")
