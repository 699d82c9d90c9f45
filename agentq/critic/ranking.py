"""The AI critic of Agent Q: the LLM ranks the proposed commands at a node.

Agent Q (docs/method.md §3) asks the model for the best of the K proposed
actions, removes it and asks again, which yields a full ranking; the rank is
turned into a score Q̂(h, a) by a rank-to-score map (the paper does not publish
one; ours is linear and configurable).

The model answers with the number of a candidate. Instead of free generation we
read its next-token distribution restricted to the candidate numbers (one
forward per round, :mod:`agentq.critic.labels`), so the answer always parses
and the choice is the model's own most likely one. This is our departure from
the paper, for robustness with small models.

The rounds of one ranking share everything up to the candidate listing (the
system message, the earlier commands, the observation): a
:class:`~agentq.models.prefix_cache.PrefixCache` of the critic's own keeps it,
so a round after the first runs only the listing and the question (its
answer is the same argmax, up to float rounding of the cached keys).
The rounds cannot be one batch: each listing depends on the previous answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from agentq.agent.action import parse_composite
from agentq.critic.common import CheckedSettings, commands_so_far, setting
from agentq.critic.labels import LabelDistribution
from agentq.models.prefix_cache import PrefixCache
from agentq.records.action import Candidate
from agentq.records.history import History

CRITIC_SYSTEM = (
    "You are an expert evaluator of an agent's next action. Given the task and "
    "the current state, choose the candidate command that makes the most progress "
    "towards completing the task."
)


@dataclass(frozen=True)
class LinearRankScore:
    """Rank r (0 = best) of m candidates -> top - (top - bottom) * r / (m - 1)."""

    top: float = 1.0
    bottom: float = 0.0

    def __post_init__(self) -> None:
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (self.top, self.bottom))
        if not numbers or not self.top >= self.bottom:
            raise ValueError(
                f"critic.rank_score: top={self.top!r} and bottom={self.bottom!r} must be numbers with "
                "top >= bottom (the best-ranked command scores top)"
            )

    def __call__(self, rank: int, num: int) -> float:
        if num <= 1:
            return self.top
        return self.top - (self.top - self.bottom) * rank / (num - 1)


@dataclass(eq=False)
class LLMRankingCritic(CheckedSettings):
    """Ranks candidates by repeatedly picking the best remaining one.

    Args:
        model, tokenizer: the LLM: the base model, frozen, once a policy is trained
            (``critic_model=base``), or the current policy's (``critic_model=policy``).
        rank_score: maps (rank, number of candidates) to Q̂.
        max_prompt_tokens: keep the newest tokens of longer prompts.
        max_previous: earlier commands shown to the critic.
        reuse_prefix_cache: prefill only what a round's prompt does not share
            with earlier ones (False: every round from scratch).
        prefix_cache_tokens: bound on the tokens that cache holds.
    """

    kind = "rank"  # scores the K candidate actions at one node (what MCTS needs)
    MAX_CANDIDATES = 9  # answers are the single-token numbers 1..9

    model: Any = field(repr=False)
    tokenizer: Any = field(repr=False)
    _: KW_ONLY
    rank_score: LinearRankScore | None = None
    max_prompt_tokens: int = setting(2048, at_least=16)
    max_previous: int = setting(10, at_least=0)
    reuse_prefix_cache: bool = True
    prefix_cache_tokens: int = setting(4096, at_least=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.rank_score = self.rank_score or LinearRankScore()
        numbers = [str(i + 1) for i in range(self.MAX_CANDIDATES)]
        self.labels = LabelDistribution(self.tokenizer, numbers, owner="critic", read="single")
        self.prefix_cache = PrefixCache(
            enabled=self.reuse_prefix_cache, max_tokens=self.prefix_cache_tokens
        )

    def messages(self, history: History, commands: Sequence[str]) -> list[dict[str, str]]:
        # max_previous=0 shows every earlier command here (a slice [-0:]), unlike the other critics.
        shown = self.max_previous or len(history.previous)
        previous = commands_so_far([parse_composite(a).command for a in history.previous], shown)
        parts = [f"Current observation:\n{history.observation.strip()}"]
        if previous:
            parts.insert(0, previous)
        listing = "\n".join(f"{i + 1}. {c or '(no command)'}" for i, c in enumerate(commands))
        parts.append(f"Candidate next commands:\n{listing}")
        parts.append("Which candidate is the best next command? Answer with its number only.")
        return [
            {"role": "system", "content": CRITIC_SYSTEM},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def pick_best(self, history: History, commands: Sequence[str]) -> int:
        """Index of the command the model ranks first."""
        messages = self.messages(history, commands)
        logits = self.labels.logits(self.model, messages, self.max_prompt_tokens, self.prefix_cache)
        return int(logits[: len(commands)].argmax())  # logits: (9,), one per number

    def score(self, history: History, candidates: Sequence[Candidate]) -> list[float]:
        if len(candidates) > self.MAX_CANDIDATES:
            raise ValueError(
                f"critic ranks at most {self.MAX_CANDIDATES} candidates, got {len(candidates)}: "
                "lower search.num_actions"
            )
        remaining = list(range(len(candidates)))
        ranking: list[int] = []
        while len(remaining) > 1:
            best = self.pick_best(history, [candidates[i].command for i in remaining])
            ranking.append(remaining.pop(best))
        ranking.extend(remaining)
        scores = [0.0] * len(candidates)
        for rank, index in enumerate(ranking):
            scores[index] = self.rank_score(rank, len(candidates))
        return scores
