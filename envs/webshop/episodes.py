"""What a WebShop episode did, read back from the pages it saw (the engine's page format).

``episode_behaviour`` names, for one logged trajectory (``steps`` of ``observation`` and
``command``), the rank of the first search result it opened, how many options it clicked
on product pages and whether it bought. Studies count these to tell a policy that picks
the right product from one that also selects the goal's options.
"""

from __future__ import annotations

import re
from collections import Counter

from envs.webshop.engine import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    SUB_PAGES,
    TOTAL_RESULTS,
    button,
)

# Every button of a product page that is not an option.
NAVIGATION = frozenset({BUY_NOW, BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, *SUB_PAGES})
# On a results page: a result's id, then its title (not another button).
RESULT_IDS = re.compile(r"\[button\] (\S+) \[button_\] \[SEP\] [^[]")
_CLICK = re.compile(r"click\[(.+)\]")


def episode_behaviour(trajectory: dict) -> tuple[int | None, int, bool]:
    """(rank of the first result opened or None, options clicked, bought) of one episode."""
    opened, options = None, 0
    steps = trajectory["steps"]
    pages = ["", *(step["observation"] for step in steps)]  # the page each step acted on
    for page, step in zip(pages, steps, strict=False):
        clicked = _CLICK.fullmatch(step["command"] or "")
        if not clicked:
            continue
        ids = RESULT_IDS.findall(page) if TOTAL_RESULTS in page else []
        if clicked[1] in ids and opened is None:
            opened = ids.index(clicked[1]) + 1
        elif button(BUY_NOW) in page and clicked[1] not in NAVIGATION:
            options += 1
    bought = any(step["command"] == f"click[{BUY_NOW}]" for step in steps)
    return opened, options, bought


OPENED = ("opened result 1", "opened result 2", "opened result 3+", "opened none")
OPTIONS = ("options clicked: 0", "options clicked: 1", "options clicked: 2+")


def behaviour_row(label: str, episodes: dict) -> dict:
    """A table row of what a policy did over ``episodes`` (goal -> trajectory): how many
    episodes first opened result 1, 2, 3 or later, or none; clicked 0, 1 or 2+ options; bought."""
    counts = Counter()
    for trajectory in episodes.values():
        opened, options, bought = episode_behaviour(trajectory)
        counts[OPENED[-1] if opened is None else OPENED[min(opened, 3) - 1]] += 1
        counts[OPTIONS[min(options, 2)]] += 1
        counts["bought"] += bought
    return {"row": label, "goals": len(episodes)} | {c: counts[c] for c in (*OPENED, *OPTIONS, "bought")}
