"""TextCraft's command and feedback text, as the oracle and the analyses of episodes read it."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from itertools import groupby

GET = re.compile(r"get (\d+) (.+)")
CRAFT = re.compile(r"craft (\d+) (.+?) using (.+)")
FAILED = "Could not"  # how the game's feedback to an action that did nothing begins
LOOP = 10  # a command played this many times is a loop (in a row) or a cycle (in all)


def item(command: str) -> tuple[str, str] | None:
    """("get" or "craft", the item it names) of a command, or None for any other command."""
    match = GET.fullmatch(command) or CRAFT.fullmatch(command)
    return None if match is None else (command.split(" ", 1)[0], match.group(2))


def failed(observation: str) -> bool:
    """Whether the observation answers its action with a failure (its "Last result" line)."""
    return observation.rsplit("Last result: ", 1)[-1].startswith(FAILED)


def longest_run(commands: Sequence[str]) -> int:
    """The most times one command is played in a row."""
    return max((len(list(run)) for _, run in groupby(commands)), default=0)


def most_played(commands: Sequence[str]) -> int:
    """The most times one command is played in all, e.g. get, craft, craft, get, craft."""
    return max(Counter(commands).values(), default=0)
