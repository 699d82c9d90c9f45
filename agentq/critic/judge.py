"""Agent-R's step judge: the actor model labels each step of a bad path.

Agent-R (Yuan et al. 2025, arXiv 2501.11425, §3.1, "transition point") lets the
actor itself, the policy being trained, find the first error of a failed
trajectory "within its current capability": it walks the bad path and judges
each step Good, Bad or Uncertain; the first Bad step is where the revision is
spliced in (:mod:`agentq.search.revision`).

A judge is any callable ``judge(task, steps_so_far, step) -> "good" | "bad" |
"uncertain"`` (:class:`StepJudge`), so tests script one.

Departure from the paper: Agent-R lets the actor write its judgement freely. We
read the model's next-token distribution restricted to the three labels (one
forward pass per step, :mod:`agentq.critic.labels`) and take its most likely
label, as :class:`agentq.critic.ranking.LLMRankingCritic` does for rankings:
the answer always parses and is the model's own choice, which matters with
small models that rarely answer in the requested format. A label is read from
its first token ("Uncertain" is "Un" + "certain" for SmolLM2); the three first
tokens must differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol

from agentq.agent.action import parse_composite
from agentq.critic.common import CheckedSettings, commands_so_far, setting
from agentq.critic.labels import LabelDistribution
from agentq.records.trajectory import Step

LABELS = ("good", "bad", "uncertain")

JUDGE_SYSTEM = (
    "You review an agent's work one step at a time. Given the task, the commands the "
    "agent ran before and one step it took (its action and the environment's response), "
    "say whether that step was Good (it makes progress towards completing the task), "
    "Bad (it is a mistake that leads away from completing the task) or Uncertain."
)


class StepJudge(Protocol):
    def __call__(self, task: str, steps_so_far: Sequence[Step], step: Step) -> str:
        """One of :data:`LABELS` for ``step``, taken after ``steps_so_far``."""
        ...


@dataclass(eq=False)
class ActorStepJudge(CheckedSettings):
    """Judges a step with the actor model (the policy's own model and tokenizer).

    Args:
        model, tokenizer: the policy's LLM (no second copy in memory).
        max_prompt_tokens: keep the newest tokens of longer prompts (the question
            at the end always survives).
        max_previous: earlier commands shown (the newest ones).
        max_chars: the task and the step's response are cut to this many characters.
    """

    CONFIG_KEY = "pairs.judge"

    model: Any = field(repr=False)
    tokenizer: Any = field(repr=False)
    _: KW_ONLY
    max_prompt_tokens: int = setting(2048, at_least=16)
    max_previous: int = setting(10, at_least=0)
    max_chars: int = setting(2000, at_least=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        words = [label.capitalize() for label in LABELS]  # Good, Bad, Uncertain
        self.labels = LabelDistribution(self.tokenizer, words, owner="judge", read="first")

    @property
    def label_ids(self) -> list[int]:
        """The first tokens of Good, Bad and Uncertain."""
        return self.labels.first_ids

    def messages(self, task: str, steps_so_far: Sequence[Step], step: Step) -> list[dict[str, str]]:
        parts = [f"Task:\n{task.strip()[: self.max_chars]}"]
        commands = [s.command for s in steps_so_far]
        previous = commands_so_far(commands, self.max_previous, numbered=True)
        if previous:
            parts.append(previous)
        action = parse_composite(step.action)
        thought = f"Thought: {action.thought}\n" if action.thought else ""
        parts.append(
            f"Step {len(steps_so_far) + 1}:\n{thought}Command: {step.command or '(no command)'}\n"
            f"Environment response:\n{step.observation.strip()[: self.max_chars]}"
        )
        parts.append("Was this step Good, Bad or Uncertain? Answer with one word.")
        return [
            {"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def probabilities(
        self, task: str, steps_so_far: Sequence[Step], step: Step
    ) -> dict[str, float]:
        """The model's next-token distribution renormalised over the three labels."""
        messages = self.messages(task, steps_so_far, step)
        probs = self.labels(self.model, messages, self.max_prompt_tokens)
        return dict(zip(LABELS, probs, strict=True))

    def __call__(self, task: str, steps_so_far: Sequence[Step], step: Step) -> str:
        probs = self.probabilities(task, steps_so_far, step)
        return max(LABELS, key=lambda label: probs[label])  # ties: the first label in LABELS
