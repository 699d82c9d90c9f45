"""The agent's prompt: history h_t = (a_1, ..., a_{t-1}, o_t) as chat messages.

Agent Q conditions each step on the agent's own earlier composite actions and
only the *current* observation (docs/method.md §2). The message layout puts what grows
along a search path first (system, earlier actions) and the observation last,
so a child's prompt shares its parent's prefix up to the newest action.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentq.agent.grounding import TEMPLATE
from agentq.records.history import History, Messages

FORMAT_INSTRUCTIONS = """\
You are an agent acting in a text environment. At every step answer in this format:
{plan_line}THOUGHT: your reasoning about the current observation
COMMAND: exactly one command for the environment
EXPLANATION: what the command does and why
STATUS: CONTINUE (or SUCCESS / FAILURE when the task is over)"""

PLAN_LINE = "PLAN: (first step only) numbered steps to reach the goal\n"


@dataclass(frozen=True)
class PromptBuilder:
    """Renders a :class:`History` as chat messages.

    Args:
        env_instructions: the environment's command reference (from ``env.prompt``).
        show_valid_actions: list the environment's valid actions under the observation.
        max_valid_actions: at most this many are listed (prompt length is compute on CPU).
        max_previous: keep only the newest earlier actions (None: all, as in the paper).
        examples: demonstrations shown as earlier chat turns, each a mapping with
            ``observation``, ``action`` and optionally ``valid_actions``; small models
            follow the composite format far more often with one.
    """

    env_instructions: str = ""
    show_valid_actions: bool = True
    max_valid_actions: int = 40
    max_previous: int | None = None
    examples: Sequence[Mapping[str, Any]] = ()

    def system(self, first_step: bool) -> str:
        text = FORMAT_INSTRUCTIONS.format(plan_line=PLAN_LINE if first_step else "")
        if self.env_instructions:
            text = f"{text}\n\n{self.env_instructions.strip()}"
        return text

    def __call__(self, history: History) -> Messages:
        return [*self.preamble(first_step=not history.previous), {"role": "user", "content": self.user_turn(history)}]

    def preamble(self, first_step: bool) -> Messages:
        """What every task's prompts at a first (or later) step begin with: the system
        message and the demonstrations."""
        messages = [{"role": "system", "content": self.system(first_step=first_step)}]
        for example in self.examples:
            valid = example.get("valid_actions")
            shown = History(example["observation"], valid_actions=None if valid is None else tuple(valid))
            messages.append({"role": "user", "content": self.user_turn(shown)})
            messages.append({"role": "assistant", "content": example["action"].strip()})
        return messages

    def user_turn(self, history: History) -> str:
        previous = history.previous
        if self.max_previous is not None:
            previous = previous[max(0, len(previous) - self.max_previous) :] if self.max_previous else ()
        first = len(history.previous) - len(previous) + 1
        parts = []
        if previous:
            lines = [f"Step {first + i}:\n{a.strip()}" for i, a in enumerate(previous)]
            parts.append("Your previous actions:\n" + "\n\n".join(lines))
        parts.append(f"Current observation:\n{history.observation.strip()}")
        # Templates such as "search[...]" are for the grounder: a small model
        # shown one copies it literally instead of writing a query.
        listed = [a for a in history.valid_actions or () if not a.endswith(TEMPLATE)]
        if self.show_valid_actions and listed:
            parts.append("Valid commands:\n" + "\n".join(listed[: self.max_valid_actions]))
        return "\n\n".join(parts)
