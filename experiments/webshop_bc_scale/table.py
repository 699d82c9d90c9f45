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

import re
import sys
from collections import Counter
from pathlib import Path

from agentq.compare import by_goal, evaluated_row, iteration_index, oracle_study_row, write_rows
from agentq.modes import ZERO_SHOT

STUDY = Path(__file__).parent
DEMONSTRATIONS = (20, 80)  # the first is every row's comparison
DECODINGS = {
    "n": "webshop_bc's decoding (a second COMMAND line kept in the history)",
    "eval_n": "actions stop at the COMMAND line (the clone studies' decoding)",
}


NAVIGATION = {"Buy Now", "Back to Search", "< Prev", "Next >", "Description", "Features", "Reviews"}
# a result's id, then its title (not another button)
RESULT_IDS = re.compile(r"\[button\] (\S+) \[button_\] \[SEP\] [^[]")
OPENED = ("opened result 1", "opened result 2", "opened result 3+", "opened none")
OPTIONS = ("options clicked: 0", "options clicked: 1", "options clicked: 2+")


def behaviour(label: str, episodes: dict) -> dict:
    """What a clone did on each goal, counted from its episodes: the rank of the first result it
    opened in the list it saw, how many options it clicked on product pages, whether it bought."""
    counts = Counter()
    for trajectory in episodes.values():
        opened, options = None, 0
        pages = ["", *(step["observation"] for step in trajectory["steps"])]
        for page, step in zip(pages, trajectory["steps"], strict=False):
            clicked = re.fullmatch(r"click\[(.+)\]", step["command"] or "")
            if not clicked:
                continue
            ids = RESULT_IDS.findall(page) if "Total results" in page else []
            if clicked[1] in ids and opened is None:
                opened = ids.index(clicked[1]) + 1
            elif "[button] Buy Now" in page and clicked[1] not in NAVIGATION:
                options += 1
        counts[OPENED[-1] if opened is None else OPENED[min(opened, 3) - 1]] += 1
        counts[OPTIONS[min(options, 2)]] += 1
        counts["bought"] += any(step["command"] == "click[Buy Now]" for step in trajectory["steps"])
    return {"row": label, "goals": len(episodes)} | {c: counts[c] for c in (*OPENED, *OPTIONS, "bought")}


def greedy(run: Path) -> dict:
    return by_goal(run, iteration_index(run, "last"), ZERO_SHOT)


def main(runs: Path) -> None:
    rows, behaviours = [], []
    for prefix, decoding in DECODINGS.items():
        fewest = greedy(runs / f"{prefix}{DEMONSTRATIONS[0]}")
        for n in DEMONSTRATIONS:
            label = f"clone on {n} demonstrations, {decoding}"
            base = None if n == DEMONSTRATIONS[0] else fewest
            rows.append(evaluated_row(label, runs / f"{prefix}{n}", "last", ZERO_SHOT, base))
            behaviours.append(behaviour(label, greedy(runs / f"{prefix}{n}")))
    rows.append(oracle_study_row(runs / f"n{DEMONSTRATIONS[0]}"))
    print(write_rows(STUDY, "table", rows))
    print(write_rows(STUDY, "behaviour", behaviours))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY / "runs")
