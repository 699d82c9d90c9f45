"""Agent-R's step judge: the actor model labels each step of a bad path.

Agent-R (Yuan et al. 2025, arXiv 2501.11425, §3.1, "transition point") lets the
actor itself, the policy being trained, find the first error of a failed
trajectory "within its current capability": it walks the bad path and judges
each step Good, Bad or Uncertain; the first Bad step is where the revision is
spliced in (:mod:`agentq.data.revision`).

A judge is any callable ``judge(task, steps_so_far, step) -> "good" | "bad" |
"uncertain"`` (:class:`StepJudge`), so tests script one.

Departure from the paper: Agent-R lets the actor write its judgement freely. We
read the model's next-token distribution restricted to the three labels (one
forward pass per step) and take its most likely label, as
:class:`agentq.critic.ranking.LLMRankingCritic` does for rankings: the answer
always parses and is the model's own choice, which matters with small models
that rarely answer in the requested format. A label is read from its first
token ("Uncertain" is "Un" + "certain" for SmolLM2); the three first tokens
must differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from agentq.agent.action import parse_composite
from agentq.agent.policy import encode_chat
from agentq.data.trajectory import Step
from agentq.validation import require_int

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


class ActorStepJudge:
    """Judges a step with the actor model (the policy's own model and tokenizer).

    Args:
        model, tokenizer: the policy's LLM (no second copy in memory).
        max_prompt_tokens: keep the newest tokens of longer prompts (the question
            at the end always survives).
        max_previous: earlier commands shown (the newest ones).
        max_chars: the task and the step's response are cut to this many characters.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        max_prompt_tokens: int = 2048,
        max_previous: int = 10,
        max_chars: int = 2000,
    ) -> None:
        self.check_args("pairs.judge", max_prompt_tokens=max_prompt_tokens, max_previous=max_previous, max_chars=max_chars)
        self.model = model
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.max_previous = max_previous
        self.max_chars = max_chars
        self.label_ids = [
            tokenizer.encode(w, add_special_tokens=False)[0] for w in ("Good", "Bad", "Uncertain")
        ]
        if len(set(self.label_ids)) != len(LABELS):
            raise ValueError(
                "judge: the labels Good, Bad, Uncertain do not start with distinct tokens"
            )

    @classmethod
    def check_args(
        cls, key: str, *, max_prompt_tokens: int = 2048, max_previous: int = 10, max_chars: int = 2000, **_
    ) -> None:
        """The settings' ranges, without a model (``agentq.loop.build`` calls it on the
        config at ``key``, before any model loads)."""
        require_int(f"{key}.max_prompt_tokens", max_prompt_tokens, 16)
        require_int(f"{key}.max_previous", max_previous, 0)
        require_int(f"{key}.max_chars", max_chars, 1)

    def messages(self, task: str, steps_so_far: Sequence[Step], step: Step) -> list[dict[str, str]]:
        parts = [f"Task:\n{task.strip()[: self.max_chars]}"]
        shown = (
            list(steps_so_far)[max(0, len(steps_so_far) - self.max_previous) :]
            if self.max_previous
            else []
        )
        if shown:
            first = len(steps_so_far) - len(shown) + 1
            lines = [f"{first + i}. {s.command or '(no command)'}" for i, s in enumerate(shown)]
            parts.append("Commands so far:\n" + "\n".join(lines))
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

    @torch.no_grad()
    def probabilities(
        self, task: str, steps_so_far: Sequence[Step], step: Step
    ) -> dict[str, float]:
        """The model's next-token distribution renormalised over the three labels."""
        ids = encode_chat(
            self.tokenizer, self.messages(task, steps_so_far, step), self.max_prompt_tokens
        )
        input_ids = torch.tensor([ids], device=self.model.device)  # (1, T)
        logits = self.model(input_ids=input_ids, logits_to_keep=1).logits[0, -1]  # (V,)
        probs = torch.softmax(logits[self.label_ids].float(), dim=-1)  # (3,)
        return dict(zip(LABELS, probs.tolist(), strict=True))

    def __call__(self, task: str, steps_so_far: Sequence[Step], step: Step) -> str:
        probs = self.probabilities(task, steps_so_far, step)
        return max(LABELS, key=lambda label: probs[label])  # ties: the first label in LABELS
