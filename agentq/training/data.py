"""Training examples as batches of scored segments.

Every example kind becomes *sequences* made of *segments* (a prompt and a
completion, one generated turn each): a sequence's log-probability is the sum
of its segments' (DESIGN §2; ``agentq.data.examples``).

- A :class:`~agentq.data.pairs.StepPair` is two one-segment sequences (a_w and
  a_l after the same history h).
- A :class:`~agentq.data.examples.TrajectoryPair` is two sequences of one
  segment per step.
- An :class:`~agentq.data.examples.SFTExample` is one sequence of its
  ``train=True`` segments only: a segment without loss needs no forward pass,
  its text is already context inside the prompts of the later steps.

A preference batch of B pairs holds 2B sequences: [0, B) chosen, [B, 2B) rejected.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

from agentq.agent.policy import encode_chat
from agentq.agent.prompt import Messages
from agentq.data.examples import Segment, SFTExample, TrajectoryPair
from agentq.data.pairs import StepPair

log = logging.getLogger(__name__)

Example = StepPair | TrajectoryPair | SFTExample
TokenSegment = tuple[list[int], list[int]]  # (prompt ids, completion ids)


# --------------------------------------------------------------------- tokenized items


@dataclass
class TokenizedPreference:
    chosen: list[TokenSegment]
    rejected: list[TokenSegment]
    chosen_logprob: float  # logged log pi_ref of the whole sequence (sum over its segments)
    rejected_logprob: float
    chosen_visits: int | None = None  # MCTS N(h, a), step pairs only
    rejected_visits: int | None = None


@dataclass
class TokenizedSFT:
    segments: list[TokenSegment]  # the trained segments only


class Encoder:
    """Token ids of prompts and completions, as the policy saw and wrote them.

    Prompts are chat-templated with the assistant turn opened and keep their
    newest ``max_prompt_tokens`` (as sampled, so logged log-probs match). A
    trajectory recurs in many pairs, so prompt encodings are cached.
    """

    def __init__(self, tokenizer, max_prompt_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self._prompts: dict[str, list[int]] = {}

    def prompt(self, messages: Messages) -> list[int]:
        key = json.dumps(messages, sort_keys=True)
        if key not in self._prompts:
            self._prompts[key] = encode_chat(self.tokenizer, messages, self.max_prompt_tokens)
        return self._prompts[key]

    def completion(self, ids: Sequence[int], text: str) -> list[int]:
        return list(ids) or _encode(self.tokenizer, text)

    def segment(self, segment: Segment) -> TokenSegment:
        return self.prompt(segment.prompt), self.completion(segment.completion_ids, segment.completion)


def _encode(tokenizer, text: str) -> list[int]:
    """Examples from hand-made trees carry text only; end it like a generated turn."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return [*ids, eos if isinstance(eos, int) and eos >= 0 else tokenizer.eos_token_id]


def tokenize_step_pair(pair: StepPair, encoder: Encoder) -> TokenizedPreference:
    prompt = encoder.prompt(pair.prompt)
    return TokenizedPreference(
        chosen=[(prompt, encoder.completion(pair.chosen_ids, pair.chosen))],
        rejected=[(prompt, encoder.completion(pair.rejected_ids, pair.rejected))],
        chosen_logprob=pair.chosen_logprob,
        rejected_logprob=pair.rejected_logprob,
        chosen_visits=pair.visits_chosen,
        rejected_visits=pair.visits_rejected,
    )


def tokenize_trajectory_pair(pair: TrajectoryPair, encoder: Encoder) -> TokenizedPreference:
    if not pair.chosen or not pair.rejected:
        raise ValueError(f"TrajectoryPair of task {pair.task_id!r} has an empty trajectory")
    return TokenizedPreference(
        chosen=[encoder.segment(s) for s in pair.chosen],
        rejected=[encoder.segment(s) for s in pair.rejected],
        chosen_logprob=sum(s.logprob for s in pair.chosen),
        rejected_logprob=sum(s.logprob for s in pair.rejected),
    )


def tokenize_sft(example: SFTExample, encoder: Encoder) -> TokenizedSFT:
    return TokenizedSFT([encoder.segment(s) for s in example.segments if s.train])


TOKENIZERS = {
    StepPair: tokenize_step_pair,
    TrajectoryPair: tokenize_trajectory_pair,
    SFTExample: tokenize_sft,
}
KINDS = {StepPair: "preference", TrajectoryPair: "preference", SFTExample: "sft"}


def example_kind(examples: Sequence[Example]) -> str:
    """``"preference"`` or ``"sft"``; raises on an empty list, a mix, or an unknown type."""
    if not examples:
        raise ValueError("fit: no training examples")
    types = {type(e) for e in examples}
    unknown = types - set(KINDS)
    if unknown:
        raise TypeError(
            f"fit: cannot train on {sorted(t.__name__ for t in unknown)}; "
            f"examples must be {', '.join(t.__name__ for t in KINDS)}"
        )
    if len(types) > 1:
        raise ValueError(
            f"fit: examples mix {sorted(t.__name__ for t in types)}; train on one kind at a time"
        )
    return KINDS[types.pop()]


class ExampleDataset(Dataset):
    """Examples tokenized once; SFT examples with no trained segment are dropped."""

    def __init__(self, examples: Sequence[Example], tokenizer, max_prompt_tokens: int) -> None:
        example_kind(examples)
        encoder = Encoder(tokenizer, max_prompt_tokens)
        tokenize = TOKENIZERS[type(examples[0])]
        items = [tokenize(e, encoder) for e in examples]
        self.items = [x for x in items if not isinstance(x, TokenizedSFT) or x.segments]
        if len(self.items) < len(items):
            log.warning("%d SFT examples have no train=True segment: skipped", len(items) - len(self.items))
        if not self.items:
            raise ValueError("fit: no example has a segment to train on")

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> TokenizedPreference | TokenizedSFT:
        return self.items[index]


# --------------------------------------------------------------------- batches


@dataclass
class Segments:
    """Rows to score: segment i adds log pi(completion_ids[i] | prompt_ids[i]) to sequence owner[i]."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    owner: list[int]
    num_sequences: int

    @classmethod
    def of(cls, sequences: Sequence[Sequence[TokenSegment]]) -> Segments:
        rows = [(p, c, s) for s, segments in enumerate(sequences) for p, c in segments]
        return cls(
            prompt_ids=[p for p, _, _ in rows],
            completion_ids=[c for _, c, _ in rows],
            owner=[s for _, _, s in rows],
            num_sequences=len(sequences),
        )

    def num_tokens(self) -> torch.Tensor:
        """(S,) completion tokens summed into each sequence."""
        lengths = torch.tensor([len(c) for c in self.completion_ids], dtype=torch.float32)
        return torch.zeros(self.num_sequences).index_add(0, torch.tensor(self.owner, dtype=torch.long), lengths)


@dataclass
class PreferenceBatch:
    segments: Segments  # 2B sequences: [0, B) chosen, [B, 2B) rejected
    reference_chosen: torch.Tensor  # (B,) logged log pi_ref of the chosen sequence
    reference_rejected: torch.Tensor  # (B,)
    chosen_tokens: torch.Tensor  # (B,) completion tokens in the chosen sequence
    rejected_tokens: torch.Tensor  # (B,)
    chosen_visits: torch.Tensor | None  # (B,) N(h, a_w), None unless every pair has visits
    rejected_visits: torch.Tensor | None  # (B,)
    # Every pair is one history and two actions (step pairs): the history can run once.
    shares_prompt: bool

    @property
    def num_pairs(self) -> int:
        return self.reference_chosen.shape[0]


@dataclass
class SFTBatch:
    segments: Segments  # B sequences, the trained segments only
    num_tokens: torch.Tensor  # (B,) trained tokens per example

    @property
    def num_examples(self) -> int:
        return self.num_tokens.shape[0]


def collate_preferences(items: Sequence[TokenizedPreference]) -> PreferenceBatch:
    b = len(items)
    segments = Segments.of([x.chosen for x in items] + [x.rejected for x in items])
    tokens = segments.num_tokens()  # (2B,)
    has_visits = all(x.chosen_visits is not None and x.rejected_visits is not None for x in items)
    return PreferenceBatch(
        segments=segments,
        reference_chosen=torch.tensor([x.chosen_logprob for x in items], dtype=torch.float32),
        reference_rejected=torch.tensor([x.rejected_logprob for x in items], dtype=torch.float32),
        chosen_tokens=tokens[:b],
        rejected_tokens=tokens[b:],
        chosen_visits=torch.tensor([x.chosen_visits for x in items], dtype=torch.float32) if has_visits else None,
        rejected_visits=torch.tensor([x.rejected_visits for x in items], dtype=torch.float32) if has_visits else None,
        shares_prompt=all(
            len(x.chosen) == len(x.rejected) == 1 and x.chosen[0][0] == x.rejected[0][0] for x in items
        ),
    )


def collate_sft(items: Sequence[TokenizedSFT]) -> SFTBatch:
    segments = Segments.of([x.segments for x in items])
    return SFTBatch(segments=segments, num_tokens=segments.num_tokens())
