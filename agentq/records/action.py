"""A proposed action: the parsed composite text, how its command was grounded, the candidate."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentq.records.history import Messages

# How a step's command relates to the env's valid actions (``Candidate.grounding``, ``Step.grounding``).
EXACT, NORMALIZED, FILLED, REFUSED, MISSING, UNCHECKED = (
    "exact", "normalized", "filled", "refused", "missing", "unchecked",
)  # fmt: skip
GROUNDINGS = (EXACT, NORMALIZED, FILLED, REFUSED, MISSING, UNCHECKED)
REWRITTEN = (NORMALIZED, FILLED)  # the command sent is not the text the policy wrote


@dataclass(frozen=True)
class CompositeAction:
    """A parsed composite action. ``command`` is None when none could be found."""

    raw: str
    command: str | None
    plan: str = ""
    thought: str = ""
    explanation: str = ""
    status: str = "CONTINUE"
    errors: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.command is not None


@dataclass(frozen=True)
class Candidate:
    """One composite action proposed at a history.

    ``text`` and ``action_ids`` are exactly what the policy generated (the
    training target); ``command`` is what was sent to the environment after
    grounding; ``logprob`` is log pi(text | prompt) under the generating policy
    (Agent Q, Eq. 1), kept as the reference log-prob for DPO. ``grounding`` says
    how ``command`` relates to the env's valid actions (one of
    :data:`agentq.agent.grounding.GROUNDINGS`; None for scripted candidates).
    """

    text: str
    command: str
    logprob: float = 0.0
    action_ids: tuple[int, ...] = ()
    prompt: Messages = field(default_factory=list)
    parsed: CompositeAction | None = None
    grounding: str | None = None  # exact / normalized / filled / refused / missing / unchecked

    @property
    def grounded(self) -> bool:
        """The command was rewritten into a listed action (normalized or filled)."""
        return self.grounding in REWRITTEN
