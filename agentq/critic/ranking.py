"""The AI critic of Agent Q: the LLM ranks the proposed commands at a node.

Agent Q (§3 of DESIGN.md) asks the model for the best of the K proposed
actions, removes it and asks again, which yields a full ranking; the rank is
turned into a score Q̂(h, a) by a rank-to-score map (the paper does not publish
one; ours is linear and configurable).

The model answers with the number of a candidate. Instead of free generation we
read its next-token distribution restricted to the candidate numbers (one
forward per round), so the answer always parses and the choice is the model's
own most likely one. This is our departure from the paper, for robustness with
small models.

The rounds of one ranking share everything up to the candidate listing (the
system message, the earlier commands, the observation): a
:class:`~agentq.models.prefix_cache.PrefixCache` of the critic's own keeps it,
so a round after the first runs only the listing and the question (its
answer is the same argmax, up to float rounding of the cached keys).
The rounds cannot be one batch: each listing depends on the previous answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentq.agent.action import parse_composite
from agentq.agent.policy import Candidate, encode_chat
from agentq.agent.prompt import History
from agentq.models.prefix_cache import PrefixCache
from agentq.validation import require_int

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


class LLMRankingCritic:
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

    def __init__(
        self,
        model,
        tokenizer,
        *,
        rank_score: LinearRankScore | None = None,
        max_prompt_tokens: int = 2048,
        max_previous: int = 10,
        reuse_prefix_cache: bool = True,
        prefix_cache_tokens: int = 4096,
    ) -> None:
        self.check_args(
            "critic", max_prompt_tokens=max_prompt_tokens, max_previous=max_previous,
            prefix_cache_tokens=prefix_cache_tokens,
        )
        self.model = model
        self.tokenizer = tokenizer
        self.rank_score = rank_score or LinearRankScore()
        self.max_prompt_tokens = max_prompt_tokens
        self.max_previous = max_previous
        self.label_ids = [self._single_token(str(i + 1)) for i in range(self.MAX_CANDIDATES)]
        self.prefix_cache = PrefixCache(enabled=reuse_prefix_cache, max_tokens=prefix_cache_tokens)

    @classmethod
    def check_args(
        cls, key: str, *, max_prompt_tokens: int = 2048, max_previous: int = 10, prefix_cache_tokens: int = 4096, **_
    ) -> None:
        """The settings' ranges, without a model (``agentq.loop.build`` calls it on the
        config at ``key``, before any model loads)."""
        require_int(f"{key}.max_prompt_tokens", max_prompt_tokens, 16)
        require_int(f"{key}.max_previous", max_previous, 0)
        require_int(f"{key}.prefix_cache_tokens", prefix_cache_tokens, 1)

    def _single_token(self, text: str) -> int:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"critic: the answer label {text!r} is not one token for this tokenizer")
        return ids[0]

    def messages(self, history: History, commands: Sequence[str]) -> list[dict[str, str]]:
        previous = [_command_of(a) for a in history.previous[-self.max_previous :]]
        parts = [f"Current observation:\n{history.observation.strip()}"]
        if previous:
            parts.insert(0, "Commands so far:\n" + "\n".join(previous))
        listing = "\n".join(f"{i + 1}. {c or '(no command)'}" for i, c in enumerate(commands))
        parts.append(f"Candidate next commands:\n{listing}")
        parts.append("Which candidate is the best next command? Answer with its number only.")
        return [
            {"role": "system", "content": CRITIC_SYSTEM},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    @torch.no_grad()
    def pick_best(self, history: History, commands: Sequence[str]) -> int:
        """Index of the command the model ranks first."""
        ids = encode_chat(self.tokenizer, self.messages(history, commands), self.max_prompt_tokens)
        _, logits = self.prefix_cache.prefill(self.model, ids)  # (1, V)
        allowed = logits[0, self.label_ids[: len(commands)]]  # (m,)
        return int(allowed.argmax())

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


def _command_of(action: str) -> str:
    return parse_composite(action).command or "(no command)"
