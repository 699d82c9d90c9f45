"""Grounding a free-text command to the environment's valid actions (DESIGN §2).

When an environment lists its valid actions, a command the policy wrote that is
not exactly one of them is mapped to the closest one by fuzzy string similarity
(rapidfuzz WRatio, 0-100). Below ``min_score`` the command is passed through
unchanged and the environment answers with an observation saying what was wrong.

A valid action of the form ``verb[...]`` is a template for free text (WebShop's
``search[...]``): a command that starts with the verb fills it, so
``search for red shoes`` becomes ``search[red shoes]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz, process, utils


@dataclass(frozen=True)
class Grounded:
    command: str  # what is sent to the environment
    score: float  # similarity to the chosen valid action, 100 for an exact match
    changed: bool  # True when the command was replaced by a valid action


TEMPLATE = "[...]"


def _fill_template(command: str, verbs: Sequence[str]) -> str | None:
    for verb in verbs:
        match = re.match(
            rf"^\s*{re.escape(verb)}\s*(?:\[(?P<bracketed>.*)\]|(?:for\b|:)?\s*(?P<free>.+))\s*$",
            command,
            re.IGNORECASE | re.DOTALL,
        )
        if match:
            text = match.group("bracketed") if match.group("bracketed") is not None else match.group("free")
            return f"{verb}[{' '.join(text.split())}]"
    return None


@dataclass(frozen=True)
class Grounder:
    """Maps commands onto ``valid_actions``.

    Args:
        min_score: similarity (0-100) below which the raw command is kept.
        enabled: turn grounding off to measure the policy's raw command accuracy.
    """

    min_score: float = 50.0
    enabled: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_score <= 100.0:
            raise ValueError(f"agent.grounding.min_score must be in [0, 100], got {self.min_score}")

    def __call__(self, command: str | None, valid_actions: Sequence[str] | None) -> Grounded:
        command = command or ""
        if not self.enabled or not valid_actions:
            return Grounded(command, 0.0, False)
        filled = _fill_template(command, [a[: -len(TEMPLATE)] for a in valid_actions if a.endswith(TEMPLATE)])
        if filled is not None:
            return Grounded(filled, 100.0, filled != command)
        valid_actions = [a for a in valid_actions if not a.endswith(TEMPLATE)]
        if not valid_actions:
            return Grounded(command, 0.0, False)
        normalized = utils.default_process(command)
        for action in valid_actions:
            if utils.default_process(action) == normalized:
                return Grounded(action, 100.0, action != command)
        best = process.extractOne(
            command, list(valid_actions), scorer=fuzz.WRatio, processor=utils.default_process
        )
        if best is None or best[1] < self.min_score:
            return Grounded(command, 0.0 if best is None else float(best[1]), False)
        return Grounded(best[0], float(best[1]), True)
