"""What a WebShop episode did, read back from the pages it saw (the engine's page format).

``episode_behaviour`` names, for one logged trajectory (``steps`` of ``observation`` and
``command``), the rank of the first search result it opened, how many options it clicked
on product pages and whether it bought. Studies count these to tell a policy that picks
the right product from one that also selects the goal's options. ``shortfall_row`` replays
failed episodes to say which part of the reward each purchase missed, ``pairs_row``
counts on which page step pairs were made and ``directions_row`` what product-page pairs
chose over what.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable

from envs.webshop.engine import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    SEP,
    SUB_PAGES,
    TOTAL_RESULTS,
    button,
)

# Every button of a product page that is not an option.
NAVIGATION = frozenset({BUY_NOW, BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, *SUB_PAGES})
# On a results page: a result's id, then its title (not another button).
RESULT_IDS = re.compile(r"\[button\] (\S+) \[button_\] \[SEP\] [^[]")
_CLICK = re.compile(r"click\[(.+)\]")


CLICKS = ("option", "Buy Now", "other button", "no click")


def product_page_click(command: str) -> str:
    """What a command does on a product page: one of :data:`CLICKS`."""
    clicked = _CLICK.fullmatch(command or "")
    if not clicked:
        return CLICKS[3]
    if clicked[1] == BUY_NOW:
        return CLICKS[1]
    return CLICKS[2] if clicked[1] in NAVIGATION else CLICKS[0]


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
        elif button(BUY_NOW) in page and product_page_click(step["command"]) == "option":
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


PAGES = ("search page", "results page", "product page", "other page")


def page_kind(observation: str) -> str:
    """Which of :data:`PAGES` an observation shows (a product's sub-pages are "other")."""
    if button(BUY_NOW) in observation:
        return "product page"
    if TOTAL_RESULTS in observation:
        return "results page"
    return "search page" if observation.endswith(SEP + "Search") else "other page"


def pairs_row(label: str, pairs: Iterable) -> dict:
    """A table row of on which page step pairs were made: the page of each pair's state (the
    last message of its prompt is the observation the two actions answer)."""
    counts = Counter(page_kind(pair.prompt[-1]["content"]) for pair in pairs)
    return {"row": label, "pairs": sum(counts.values())} | {page: counts[page] for page in PAGES}


def directions_row(label: str, pairs: Iterable, command: Callable[[str], str]) -> dict:
    """A table row of what the product-page pairs chose over what ("option > Buy Now": the search
    preferred selecting an option to buying at once); ``command`` reads the command out of an
    action's text (the agent's parser: envs know nothing of its format)."""
    counts = Counter(
        f"{product_page_click(command(p.chosen))} > {product_page_click(command(p.rejected))}"
        for p in pairs
        if page_kind(p.prompt[-1]["content"]) == "product page"
    )
    shown = [f"{a} > {b}" for a in CLICKS[:3] for b in CLICKS[:3]]
    return {"row": label} | {k: counts[k] for k in shown} | {"other": sum(counts.values()) - sum(counts[k] for k in shown)}


# What a purchase can miss, in RewardBreakdown's terms.
SHORTFALLS = ("wrong type", "missed an attribute", "missed an option", "over the price")


def shortfall(breakdown: dict) -> tuple[str, ...]:
    """The parts of the reward (:data:`SHORTFALLS`) a purchase's breakdown did not reach."""
    misses = (
        breakdown["r_type"] < 1.0,
        breakdown["attr_matches"] < breakdown["num_attrs"],
        breakdown["option_matches"] < breakdown["num_options"],
        not breakdown["price_ok"],
    )
    return tuple(name for name, missed in zip(SHORTFALLS, misses, strict=True) if missed)


def shortfall_row(label: str, env, episodes: dict) -> dict:
    """A table row of why ``episodes`` (goal -> trajectory) failed: each failed episode's
    commands are played again in ``env`` (a WebShopEnv on the same catalogue) and its purchase's
    reward breakdown read; a failure can miss several parts, and "only an option" counts those
    whose single miss was an option the instruction named."""
    counts = Counter()
    for goal, trajectory in episodes.items():
        if trajectory["success"]:
            continue
        counts["failed"] += 1
        env.reset(options={"task_id": goal})
        info = {}
        for step in trajectory["steps"]:
            *_, info = env.step(step["command"])
        breakdown = info.get("reward_breakdown")
        if breakdown is None:
            counts["bought nothing"] += 1
            continue
        missed = shortfall(breakdown)
        counts.update(missed)
        counts["only an option"] += missed == ("missed an option",)
    columns = ("failed", "bought nothing", *SHORTFALLS, "only an option")
    return {"row": label, "goals": len(episodes)} | {c: counts[c] for c in columns}
