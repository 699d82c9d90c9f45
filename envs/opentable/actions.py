"""The web actions of Agent Q (Putta et al. 2024, §5.2) and a parser that never raises.

``CLICK [id]``, ``TYPE [id] [text]``, ``SUBMIT [id]``, ``CLEAR [id]``,
``SCROLL [UP|DOWN]``, ``GOTO [url]`` and ``ASK USER HELP``. Verbs are case
insensitive and the brackets around ids may be left out (``click 5``), since
small models drop them; text that is no action yields the message the
observation shows instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

USAGE = (
    "Commands: CLICK [id], TYPE [id] [text], SUBMIT [id], CLEAR [id], SCROLL [UP|DOWN], "
    "GOTO [url], ASK USER HELP."
)

_ID = r"\[?\s*(\d+)\s*\]?"
_PATTERNS = {
    "CLICK": re.compile(rf"^CLICK\s*{_ID}$", re.IGNORECASE),
    "SUBMIT": re.compile(rf"^SUBMIT\s*{_ID}$", re.IGNORECASE),
    "CLEAR": re.compile(rf"^CLEAR\s*{_ID}$", re.IGNORECASE),
    "TYPE": re.compile(rf"^TYPE\s*{_ID}\s*(.*)$", re.IGNORECASE | re.DOTALL),
    "SCROLL": re.compile(r"^SCROLL\s*\[?\s*(UP|DOWN)\s*\]?$", re.IGNORECASE),
    "GOTO": re.compile(r"^GOTO\s*\[?\s*(\S+?)\s*\]?$", re.IGNORECASE),
    "ASK": re.compile(r"^ASK\s+USER(\s+HELP)?\b.*$", re.IGNORECASE | re.DOTALL),
}
_TOKEN = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Action:
    verb: str  # CLICK, TYPE, SUBMIT, CLEAR, SCROLL, GOTO or ASK
    target: int | None = None  # the element id of CLICK / TYPE / SUBMIT / CLEAR
    text: str = ""  # TYPE's text, SCROLL's direction, GOTO's url


def parse_action(command: str) -> Action | str:
    """An :class:`Action`, or a message saying what is wrong with ``command``."""
    text = command.strip()
    verb = text.split(maxsplit=1)[0].upper() if text else ""
    pattern = _PATTERNS.get(verb)
    if pattern is None:
        shown = " ".join(text.split())[:80]
        return f"Unknown command {shown!r}. {USAGE}"
    match = pattern.match(text)
    if match is None:
        return f"Malformed {verb} command. {USAGE}"
    if verb in ("CLICK", "SUBMIT", "CLEAR"):
        return Action(verb, int(match.group(1)))
    if verb == "TYPE":
        value = match.group(2).strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        if not value.strip():
            return "TYPE needs text: TYPE [id] [text]. To empty a field use CLEAR [id]."
        return Action(verb, int(match.group(1)), value)
    if verb == "SCROLL":
        return Action(verb, text=match.group(1).upper())
    if verb == "GOTO":
        return Action(verb, text=match.group(1))
    return Action("ASK")


def match_option(text: str, options: Sequence[tuple[str, str]]) -> str | None | list[str]:
    """The value of the drop-down option ``text`` names, as typing into a
    drop-down selects it: an exact label or value, else the one option whose
    label contains every word of ``text`` (``"June 14"`` -> ``Saturday, June 14``).
    Returns None when nothing matches and the candidate labels when several do.
    """
    wanted = text.strip().casefold()
    for value, label in options:
        if wanted in (value.casefold(), label.strip().casefold()):
            return value
    words = set(_TOKEN.findall(wanted))
    if not words:
        return None
    hits = [(v, label) for v, label in options if words <= set(_TOKEN.findall(label.casefold()))]
    if len(hits) == 1:
        return hits[0][0]
    return [label for _, label in hits] or None
