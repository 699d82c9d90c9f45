"""State evaluators for Tree of Thoughts (Yao et al. 2023, arXiv 2305.10601, §3.3).

ToT's evaluator V(p_theta, S)(s) judges states, not actions. For an agent a
state is the :class:`~agentq.agent.prompt.History` after a candidate's env step
(the new observation; ``previous`` includes the action). Two strategies:

- **Value** (:class:`LLMValueEvaluator`): each state on its own. The model
  answers "sure / likely / impossible" (ToT's Game of 24 prompt) or a score
  from 1 to 10.
- **Vote** (:class:`LLMVoteEvaluator`): all states at once; the model names
  the most promising one and V is its vote share.

Both return values in [0, 1] (searches compare them with thresholds and the
step-pair gap theta).

Departures from the paper, for robustness with small models and for
determinism (as in :mod:`agentq.critic.ranking`):

- Instead of sampling free-text judgements and parsing them, we open the
  assistant turn with ``Answer:`` and read the model's next-token distribution
  restricted to the answer labels, renormalised over them
  (:class:`~agentq.critic.labels.LabelDistribution`, whole labels). Labels
  that are several tokens (SmolLM2 writes " 10" as " ", "1", "0") are scored
  exactly by chaining the restricted distribution through their tokens; where
  one label is a prefix of another (" 1" and " 10"), the shorter one gets the
  mass of every token other than the longer one's continuation.
- Value: V is the expected label value under that distribution, which is what
  the average of ToT's sampled judgements estimates. ToT sums 20 / 1 / 0.001
  for sure / likely / impossible over 3 samples; our default map is
  1 / 0.5 / 0 so V stays in [0, 1]. ``values: [1.0, 0.05, 0.00005]`` is ToT's
  map divided by 20.
- Vote: ToT samples 5 votes; ``num_votes: 5`` samples them from the restricted
  distribution (seeded), ``num_votes: null`` uses the expected share itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, Protocol

import torch

from agentq.agent.action import parse_composite
from agentq.critic.common import CheckedSettings, commands_so_far, setting
from agentq.critic.labels import LabelDistribution
from agentq.models.prefix_cache import PrefixCache
from agentq.records.history import History, Messages

ANSWER_PREFIX = "Answer:"  # opens the assistant turn, so the next token is the label

VALUE_SYSTEM = (
    "You are an expert evaluator of an agent acting in a text environment. Given the task, "
    "the commands the agent has run and the current observation, judge whether the agent "
    "can still complete the task from this state."
)
VOTE_SYSTEM = (
    "You are an expert evaluator of an agent acting in a text environment. Given the task "
    "and several states the agent could be in, choose the state from which the task is "
    "most likely to be completed."
)

# scale -> (question, labels, values of the labels)
SCALES: dict[str, tuple[str, tuple[str, ...], tuple[float, ...]]] = {
    "sure_likely_impossible": (
        "Can the agent complete the task from this state? Answer with one word: sure, likely or impossible.",
        (" sure", " likely", " impossible"),
        (1.0, 0.5, 0.0),
    ),
    "score_1_10": (
        "How likely is the agent to complete the task from this state, from 1 (impossible) "
        "to 10 (certain)? Answer with the number only.",
        tuple(f" {s}" for s in range(1, 11)),
        tuple((s - 1) / 9 for s in range(1, 11)),
    ),
}


class StateEvaluator(Protocol):
    kind: ClassVar[str]  # "state": what searches with ``critic_kind = "state"`` need

    def evaluate(self, task_history: History, states: Sequence[History]) -> list[float]:
        """V(s) in [0, 1] for each state; ``task_history`` is the root (the task as first shown)."""
        ...


@dataclass(eq=False)
class LLMValueEvaluator(CheckedSettings):
    """ToT's value prompt: each state judged on its own; V = expected label value.

    Args:
        model, tokenizer: the LLM: the base model, frozen, once a policy is trained
            (``critic_model=base``), or the current policy's (``critic_model=policy``).
        scale: ``sure_likely_impossible`` or ``score_1_10``.
        values: the value of each label of the scale, in [0, 1] (None: 1 / 0.5 / 0,
            or (s - 1) / 9 for a score s).
        max_prompt_tokens: keep the newest tokens of longer prompts.
        max_previous: earlier commands shown to the evaluator.
    """

    kind: ClassVar[str] = "state"

    model: Any = field(repr=False)
    tokenizer: Any = field(repr=False)
    _: KW_ONLY
    scale: str = "sure_likely_impossible"
    values: Sequence[float] | None = None
    max_prompt_tokens: int = setting(2048, at_least=16)
    max_previous: int = setting(10, at_least=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.question, labels, default_values = SCALES[self.scale]
        values = default_values if self.values is None else self.values
        self.values = tuple(float(v) for v in values)
        self.labels = LabelDistribution(
            self.tokenizer, labels, owner=f"critic LLMValueEvaluator({self.scale})",
            answer_prefix=ANSWER_PREFIX,
        )
        self.prefix_cache = PrefixCache()  # the system message and the task repeat in every prompt

    @classmethod
    def check_other(cls, key: str, settings: Mapping[str, Any]) -> None:
        scale, values = settings["scale"], settings["values"]
        if scale not in SCALES:
            raise ValueError(f"{key}.scale must be one of {sorted(SCALES)}, got {scale!r}")
        labels = SCALES[scale][1]
        if values is not None:
            numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            if not numbers or len(values) != len(labels) or not all(0.0 <= v <= 1.0 for v in values):
                raise ValueError(
                    f"{key}.values must be {len(labels)} numbers in [0, 1] (one per label of {labels}), "
                    f"got {list(values)}"
                )

    def messages(self, task_history: History, state: History) -> Messages:
        parts = [
            f"Task:\n{task_history.observation.strip()}",
            render_state(state, self.max_previous),
            self.question,
        ]
        return [
            {"role": "system", "content": VALUE_SYSTEM},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def label_probs(self, task_history: History, state: History) -> list[float]:
        messages = self.messages(task_history, state)
        return self.labels(self.model, messages, self.max_prompt_tokens, self.prefix_cache)

    def evaluate(self, task_history: History, states: Sequence[History]) -> list[float]:
        out = []
        for state in states:
            probs = self.label_probs(task_history, state)
            out.append(sum(p * v for p, v in zip(probs, self.values, strict=True)))
        return out


@dataclass(eq=False)
class LLMVoteEvaluator(CheckedSettings):
    """ToT's vote prompt: all states listed; V = each state's vote share.

    Args:
        model, tokenizer: the LLM.
        num_votes: votes sampled from the model's restricted answer distribution
            (ToT uses 5); None uses the expected share (the distribution itself).
        seed: seeds the vote sampler (used only with ``num_votes``).
        max_prompt_tokens: keep the newest tokens of longer prompts.
        max_previous: earlier commands shown per state.
        max_observation_chars: each state's observation is cut to this length
            (all states share one prompt).
    """

    kind: ClassVar[str] = "state"

    model: Any = field(repr=False)
    tokenizer: Any = field(repr=False)
    _: KW_ONLY
    num_votes: int | None = setting(None, at_least=1, none_ok=True)
    seed: int = 0
    max_prompt_tokens: int = setting(2048, at_least=16)
    max_previous: int = setting(10, at_least=0)
    max_observation_chars: int = setting(600, at_least=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.generator = torch.Generator().manual_seed(self.seed)
        self.prefix_cache = PrefixCache()
        self._labels: dict[int, LabelDistribution] = {}  # by number of states

    def messages(self, task_history: History, states: Sequence[History]) -> Messages:
        listing = "\n\n".join(
            f"State {i + 1}:\n{render_state(s, self.max_previous, self.max_observation_chars)}"
            for i, s in enumerate(states)
        )
        parts = [
            f"Task:\n{task_history.observation.strip()}",
            listing,
            "Which state is the most promising? Answer with its number only.",
        ]
        return [
            {"role": "system", "content": VOTE_SYSTEM},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def vote_probs(self, task_history: History, states: Sequence[History]) -> list[float]:
        """The model's restricted answer distribution over the state numbers."""
        labels = self._labels.get(len(states))
        if labels is None:
            labels = LabelDistribution(
                self.tokenizer,
                [f" {i + 1}" for i in range(len(states))],
                owner="critic LLMVoteEvaluator",
                answer_prefix=ANSWER_PREFIX,
            )
            self._labels[len(states)] = labels
        messages = self.messages(task_history, states)
        return labels(self.model, messages, self.max_prompt_tokens, self.prefix_cache)

    def evaluate(self, task_history: History, states: Sequence[History]) -> list[float]:
        if not states:
            return []
        probs = self.vote_probs(task_history, states)
        if self.num_votes is None:
            return probs
        votes = torch.multinomial(
            torch.tensor(probs, dtype=torch.double),
            self.num_votes,
            replacement=True,
            generator=self.generator,
        )  # (num_votes,)
        counts = torch.bincount(votes, minlength=len(states))  # (m,)
        return [int(c) / self.num_votes for c in counts]


def render_state(
    state: History, max_previous: int, max_observation_chars: int | None = None
) -> str:
    """The commands that led to a state and its observation, as the evaluator reads them."""
    observation = state.observation.strip()
    if max_observation_chars is not None and len(observation) > max_observation_chars:
        observation = observation[:max_observation_chars] + " ..."
    previous = commands_so_far([parse_composite(a).command for a in state.previous], max_previous)
    parts = [previous] if previous else []
    parts.append(f"Current observation:\n{observation}")
    return "\n\n".join(parts)
