"""What the critics share besides reading labels (:mod:`agentq.critic.labels`):
their settings' checks and the "Commands so far" part of their prompts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, field, fields
from typing import Any, ClassVar

from agentq.checks import require_int

NO_COMMAND = "(no command)"  # what a prompt shows for a step without a command


def commands_so_far(
    commands: Sequence[str | None], max_previous: int, *, numbered: bool = False
) -> str | None:
    """The "Commands so far:" part of a critic's prompt: the newest ``max_previous`` of
    ``commands``, one a line (numbered by their step when ``numbered``), an empty or
    missing command shown as :data:`NO_COMMAND`; None when none is shown."""
    shown = list(commands)[max(0, len(commands) - max_previous) :]
    if not shown:
        return None
    lines = [command or NO_COMMAND for command in shown]
    if numbered:
        first = len(commands) - len(shown) + 1
        lines = [f"{first + i}. {line}" for i, line in enumerate(lines)]
    return "Commands so far:\n" + "\n".join(lines)


def setting(default: Any, *, at_least: int | None = None, none_ok: bool = False) -> Any:
    """A critic's setting (a dataclass field): its default and, for an integer, its
    smallest value (``none_ok``: None is allowed too)."""
    metadata = {} if at_least is None else {"at_least": at_least, "none_ok": none_ok}
    return field(default=default, metadata=metadata)


class CheckedSettings:
    """Base of the critics, which are dataclasses whose fields with a default are their
    settings: each setting's default and range is stated once, in its field, and
    checked both on construction and by ``check_args`` (before any model loads)."""

    CONFIG_KEY: ClassVar[str] = "critic"  # the config key errors name on construction

    @classmethod
    def check_args(cls, key: str, **given: Any) -> None:
        """The settings' ranges, without a model (``agentq.components.build`` calls it on the
        config at ``key``, before any model loads); a setting not given takes its
        default, unknown keys are ignored."""
        settings = {f.name: f.default for f in fields(cls) if f.default is not MISSING} | given
        cls.check_other(key, settings)
        for f in fields(cls):
            if "at_least" in f.metadata:
                at_least, none_ok = f.metadata["at_least"], f.metadata["none_ok"]
                require_int(f"{key}.{f.name}", settings[f.name], at_least, none_ok=none_ok)

    @classmethod
    def check_other(cls, key: str, settings: Mapping[str, Any]) -> None:
        """Checks besides the integer ranges, run first (none here)."""

    def __post_init__(self) -> None:
        self.check_args(
            self.CONFIG_KEY,
            **{f.name: getattr(self, f.name) for f in fields(self) if f.default is not MISSING},
        )
