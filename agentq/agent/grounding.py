"""Grounding a free-text command to the environment's valid actions (docs/method.md §2).

Only a command that is clearly one of the listed actions is rewritten into it;
everything else is sent to the environment as the policy wrote it, and the
environment answers with an observation saying what was wrong (all four envs
take any text and spend a step on it). There is no similarity guessing: a
command that is merely *close* to a listed action is a different action (``get
2 stick`` is not ``craft 1 cyan banner using 6 cyan wool, 1 stick``), and the
envs accept commands their lists do not hold (TextCraft's ``get N item`` with
any count, ScienceWorld's aliases), which a guess would overwrite.

What counts as the same action, in this order:

1. ``exact``: the command is a listed action (a well-formed instance of a
   template such as ``search[red shoes]`` included).
2. ``filled``: a template ``verb[...]`` (WebShop's ``search[...]``, OpenTable's
   ``TYPE [3] [...]``) is filled from a command that starts with its verb:
   ``search for red shoes`` -> ``search[red shoes]``.
3. ``normalized``: the command equals exactly one listed action up to case,
   whitespace, brackets, quotes and a final full stop (``Click [ buy now ]`` ->
   ``click[Buy Now]``, ``click[b0123]`` -> ``click[B0123]``, ``click 5`` ->
   ``CLICK [5]``); or it names exactly one listed ``verb[target]`` by its target,
   optionally after the verb or ``select`` / ``choose`` (``Buy Now``, ``select
   large`` -> ``click[Large]``; a name needs a letter: a bare ``5`` may be
   a count, a size or an id).

Otherwise the command is ``refused`` (sent unchanged) when the env lists actions,
``unchecked`` when it lists none (or grounding is disabled and the command is not
listed), and ``missing`` when the parser found no command at all: then the
command is empty and :func:`agentq.agent.episode.step` says so in the observation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentq.records.action import EXACT, FILLED, MISSING, NORMALIZED, REFUSED, REWRITTEN, UNCHECKED

TEMPLATE = "[...]"


_TOKEN = re.compile(r"\w+|[^\w\s]")
_IGNORED = frozenset("[](){}\"'`“”‘’")
_TARGETED = re.compile(r"^(?P<verb>[A-Za-z]+)\s*\[(?P<target>[^\[\]]+)\]$")
_NAMING_VERBS = ("select", "choose")


@dataclass(frozen=True)
class Grounded:
    command: str  # what is sent to the environment
    grounding: str  # one of GROUNDINGS

    @property
    def changed(self) -> bool:
        """The command was rewritten into a listed action."""
        return self.grounding in REWRITTEN


def _key(text: str) -> tuple[str, ...]:
    """``text`` up to case, whitespace, brackets, quotes and a final full stop."""
    tokens = [t for t in _TOKEN.findall(text.casefold()) if t not in _IGNORED]
    while tokens and tokens[-1] == ".":
        tokens.pop()
    return tuple(tokens)


def _fill_template(command: str, verbs: Sequence[str]) -> str | None:
    for verb in verbs:
        head = verb.rstrip()
        boundary = r"\b" if head[-1:].isalnum() else ""
        match = re.match(
            rf"^\s*{re.escape(head)}{boundary}\s*(?:\[(?P<bracketed>.*)\]|(?:for\b|:)?\s*(?P<free>.+))\s*$",
            command,
            re.IGNORECASE | re.DOTALL,
        )
        if match:
            text = match.group("bracketed") if match.group("bracketed") is not None else match.group("free")
            return f"{verb}[{' '.join(text.split())}]"
    return None


def _unique(matches: Iterable[str]) -> str | None:
    found = list(dict.fromkeys(matches))
    return found[0] if len(found) == 1 else None


def _by_target(command: str, actions: Sequence[str]) -> str | None:
    """The one listed ``verb[target]`` whose target the command names (``Buy Now``, ``select large``)."""
    targeted = [(m.group("verb").casefold(), _key(m.group("target")), a) for a in actions if (m := _TARGETED.match(a))]
    key = _key(command)
    names = [key]
    if len(key) > 1 and (key[0] in _NAMING_VERBS or any(key[0] == verb for verb, _, _ in targeted)):
        names.append(key[2:] if key[1] == "on" and len(key) > 2 else key[1:])
    for name in names:
        if not any(c.isalpha() for token in name for c in token):  # "5", "6.5": a count, a size, an id?
            continue
        if (found := _unique(a for _, target, a in targeted if target == name)) is not None:
            return found
    return None


@dataclass(frozen=True)
class Grounder:
    """Maps commands onto ``valid_actions`` when they are clearly one of them.

    Args:
        enabled: turn grounding off to measure the policy's raw command accuracy
            (commands are then sent as written and labelled ``exact`` or ``unchecked``).
        min_score: removed (fuzzy matching is gone); any value is an error.
    """

    enabled: bool = True
    min_score: float | None = None

    def __post_init__(self) -> None:
        if self.min_score is not None:
            raise ValueError(
                "agent.grounder.min_score was removed: commands are no longer fuzzy-matched to the closest "
                "valid action. Only a command that is clearly a listed action (up to case, spacing, brackets, "
                "a unique button or option name, or a filled template) is rewritten; anything else goes to the "
                "environment as written. Drop the min_score override."
            )

    def __call__(self, command: str | None, valid_actions: Sequence[str] | None) -> Grounded:
        command = (command or "").strip()
        if not command:
            return Grounded("", MISSING)
        if valid_actions and command in valid_actions:
            return Grounded(command, EXACT)
        if not self.enabled or not valid_actions:
            return Grounded(command, UNCHECKED)
        filled = _fill_template(command, [a[: -len(TEMPLATE)] for a in valid_actions if a.endswith(TEMPLATE)])
        if filled is not None:
            return Grounded(filled, EXACT if filled == command else FILLED)
        actions = [a for a in valid_actions if not a.endswith(TEMPLATE)]
        key = _key(command)
        same = _unique(a for a in actions if _key(a) == key) if key else None
        if same is None:
            same = _by_target(command, actions)
        if same is not None:
            return Grounded(same, NORMALIZED)
        return Grounded(command, REFUSED)


def grounding_shares(labels: Iterable[str | None]) -> dict[str, float]:
    """Evaluation metrics: the share of steps whose command was exact, rewritten
    (normalized or filled), refused, missing or unchecked, over the steps with a
    recorded grounding (``grounding_steps``); empty when none has one (old files)."""
    known = [label for label in labels if label is not None]
    if not known:
        return {}
    n = len(known)
    shares = {
        "grounding_exact": sum(g == EXACT for g in known) / n,
        "grounding_rewritten": sum(g in REWRITTEN for g in known) / n,
        "grounding_refused": sum(g == REFUSED for g in known) / n,
        "grounding_missing": sum(g == MISSING for g in known) / n,
        "grounding_unchecked": sum(g == UNCHECKED for g in known) / n,
    }
    return shares | {"grounding_steps": n}
