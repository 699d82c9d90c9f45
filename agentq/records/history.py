"""What the policy sees: the history h_t and its rendering as chat messages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class History:
    """What the policy sees at step t: earlier composite actions and the current observation."""

    observation: str
    previous: tuple[str, ...] = ()  # composite actions a_1..a_{t-1}, as generated
    valid_actions: tuple[str, ...] | None = None

    def extend(self, action: str, observation: str, valid_actions: Sequence[str] | None) -> History:
        return History(
            observation=observation,
            previous=(*self.previous, action),
            valid_actions=None if valid_actions is None else tuple(valid_actions),
        )
