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
  (:class:`LabelDistribution`). Labels that are several tokens (SmolLM2 writes
  " 10" as " ", "1", "0") are scored exactly by chaining the restricted
  distribution through their tokens; where one label is a prefix of another
  (" 1" and " 10"), the shorter one gets the mass of every token other than
  the longer one's continuation.
- Value: V is the expected label value under that distribution, which is what
  the average of ToT's sampled judgements estimates. ToT sums 20 / 1 / 0.001
  for sure / likely / impossible over 3 samples; our default map is
  1 / 0.5 / 0 so V stays in [0, 1]. ``values: [1.0, 0.05, 0.00005]`` is ToT's
  map divided by 20.
- Vote: ToT samples 5 votes; ``num_votes: 5`` samples them from the restricted
  distribution (seeded), ``num_votes: null`` uses the expected share itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import torch

from agentq.agent.action import parse_composite
from agentq.agent.policy import encode_chat
from agentq.agent.prompt import History, Messages
from agentq.models.prefix_cache import PrefixCache
from agentq.validation import require_int

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


@dataclass
class _Trie:
    children: dict[int, _Trie] = field(default_factory=dict)
    label: int | None = None  # the label whose tokens end here


class LabelDistribution:
    """p(label | prompt) over fixed answer labels, restricted to them and renormalised.

    One forward of the prompt (through a :class:`PrefixCache`), plus one short
    cached forward per branching point inside multi-token labels.
    """

    def __init__(self, tokenizer, labels: Sequence[str], owner: str) -> None:
        self.labels = tuple(labels)
        self.token_ids: list[tuple[int, ...]] = []
        self.trie = _Trie()
        for i, label in enumerate(self.labels):
            ids = tuple(tokenizer.encode(label, add_special_tokens=False))
            if not ids:
                raise ValueError(f"{owner}: the answer label {label!r} encodes to no tokens")
            if ids in self.token_ids:
                other = self.labels[self.token_ids.index(ids)]
                raise ValueError(
                    f"{owner}: the answer labels {other!r} and {label!r} encode to the same tokens {list(ids)}"
                )
            self.token_ids.append(ids)
            node = self.trie
            for token in ids:
                node = node.children.setdefault(token, _Trie())
            node.label = i

    @torch.no_grad()
    def __call__(self, model, prompt_ids: Sequence[int], prefix_cache: PrefixCache) -> list[float]:
        if len(self.labels) == 1:
            return [1.0]
        probs = [0.0] * len(self.labels)
        cache, logits = prefix_cache.prefill(model, prompt_ids)  # logits: (1, V)
        device = logits.device

        def resolve(
            node: _Trie, pending: list[int], mass: float, logits: torch.Tensor | None
        ) -> None:
            # Single-option stretches need no forward: their restricted probability is 1.
            while node.label is None and len(node.children) == 1:
                token, node = next(iter(node.children.items()))
                pending = [*pending, token]
            if not node.children:
                probs[node.label] += mass
                return
            if mass == 0.0:
                return
            if pending:
                ids = torch.tensor([pending], dtype=torch.long, device=device)  # (1, n)
                logits = model(
                    input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1
                ).logits[0, -1]
            p = torch.softmax(logits.double(), dim=-1)  # (V,)
            child_p = {t: float(p[t]) for t in node.children}
            continuing = sum(child_p.values())
            if node.label is not None:  # the label ends here: it takes every other token's mass
                probs[node.label] += mass * max(0.0, 1.0 - continuing)
                total = max(1.0, continuing)
            elif continuing > 0:
                total = continuing
            else:  # every label token underflowed: no preference
                child_p, total = dict.fromkeys(child_p, 1.0), float(len(child_p))
            for token, child in node.children.items():
                resolve(child, [token], mass * child_p[token] / total, None)
            if pending:
                cache.crop(-len(pending))

        resolve(self.trie, [], 1.0, logits[0])
        return probs


class LLMValueEvaluator:
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

    def __init__(
        self,
        model,
        tokenizer,
        *,
        scale: str = "sure_likely_impossible",
        values: Sequence[float] | None = None,
        max_prompt_tokens: int = 2048,
        max_previous: int = 10,
    ) -> None:
        self.check_args(
            "critic", scale=scale, values=values, max_prompt_tokens=max_prompt_tokens, max_previous=max_previous
        )
        self.question, labels, default_values = SCALES[scale]
        values = tuple(float(v) for v in (default_values if values is None else values))
        self.model, self.tokenizer = model, tokenizer
        self.values = values
        self.max_prompt_tokens, self.max_previous = max_prompt_tokens, max_previous
        self.labels = LabelDistribution(
            tokenizer, labels, owner=f"critic LLMValueEvaluator({scale})"
        )
        self.answer_ids = tokenizer.encode(ANSWER_PREFIX, add_special_tokens=False)
        self.prefix_cache = PrefixCache()  # the system message and the task repeat in every prompt

    @classmethod
    def check_args(
        cls,
        key: str,
        *,
        scale: str = "sure_likely_impossible",
        values: Sequence[float] | None = None,
        max_prompt_tokens: int = 2048,
        max_previous: int = 10,
        **_,
    ) -> None:
        """The settings' ranges, without a model (``agentq.loop.build`` calls it on the
        config at ``key``, before any model loads)."""
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
        require_int(f"{key}.max_prompt_tokens", max_prompt_tokens, 16)
        require_int(f"{key}.max_previous", max_previous, 0)

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
        ids = encode_chat(
            self.tokenizer, self.messages(task_history, state), self.max_prompt_tokens
        )
        return self.labels(self.model, ids + self.answer_ids, self.prefix_cache)

    def evaluate(self, task_history: History, states: Sequence[History]) -> list[float]:
        out = []
        for state in states:
            probs = self.label_probs(task_history, state)
            out.append(sum(p * v for p, v in zip(probs, self.values, strict=True)))
        return out


class LLMVoteEvaluator:
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

    def __init__(
        self,
        model,
        tokenizer,
        *,
        num_votes: int | None = None,
        seed: int = 0,
        max_prompt_tokens: int = 2048,
        max_previous: int = 10,
        max_observation_chars: int = 600,
    ) -> None:
        self.check_args(
            "critic", num_votes=num_votes, seed=seed, max_prompt_tokens=max_prompt_tokens,
            max_previous=max_previous, max_observation_chars=max_observation_chars,
        )
        self.model, self.tokenizer = model, tokenizer
        self.num_votes = num_votes
        self.generator = torch.Generator().manual_seed(seed)
        self.max_prompt_tokens, self.max_previous = max_prompt_tokens, max_previous
        self.max_observation_chars = max_observation_chars
        self.answer_ids = tokenizer.encode(ANSWER_PREFIX, add_special_tokens=False)
        self.prefix_cache = PrefixCache()
        self._labels: dict[int, LabelDistribution] = {}  # by number of states

    @classmethod
    def check_args(
        cls,
        key: str,
        *,
        num_votes: int | None = None,
        seed: int = 0,
        max_prompt_tokens: int = 2048,
        max_previous: int = 10,
        max_observation_chars: int = 600,
        **_,
    ) -> None:
        """The settings' ranges, without a model (``agentq.loop.build`` calls it on the
        config at ``key``, before any model loads)."""
        require_int(f"{key}.num_votes", num_votes, 1, none_ok=True)
        require_int(f"{key}.max_prompt_tokens", max_prompt_tokens, 16)
        require_int(f"{key}.max_previous", max_previous, 0)
        require_int(f"{key}.max_observation_chars", max_observation_chars, 1)

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
            )
            self._labels[len(states)] = labels
        ids = encode_chat(
            self.tokenizer, self.messages(task_history, states), self.max_prompt_tokens
        )
        return labels(self.model, ids + self.answer_ids, self.prefix_cache)

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
    shown = state.previous[max(0, len(state.previous) - max_previous) :]
    commands = "\n".join(parse_composite(a).command or "(no command)" for a in shown)
    parts = [f"Commands so far:\n{commands}"] if commands else []
    parts.append(f"Current observation:\n{observation}")
    return "\n\n".join(parts)
