"""Training examples as batches of scored segments.

Every example kind becomes *sequences* made of *segments* (a prompt and a
completion, one generated turn each): a sequence's log-probability is the sum
of its segments' (docs/method.md §2; ``agentq.records.examples``).

- A :class:`~agentq.data.pairs.StepPair` is two one-segment sequences (a_w and
  a_l after the same history h).
- A :class:`~agentq.records.examples.TrajectoryPair` is two sequences of one
  segment per step.
- An :class:`~agentq.records.examples.SFTExample` is one sequence of its
  ``train=True`` segments only: a segment without loss needs no forward pass,
  its text is already context inside the prompts of the later steps.

A preference batch of B pairs holds 2B sequences: [0, B) chosen, [B, 2B) rejected.

Step pairs from one search node share their history h (``StepPairBuilder``
pairs a node's sibling actions: up to K(K-1)/2 pairs of K candidates), so the
loader can put a node's pairs in the same batches (:class:`EpochSampler` with
``groups``) and the batch can score each history once for all its distinct
actions (:class:`PromptGroups`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Sampler

from agentq.agent.policy import encode_chat
from agentq.records.examples import Segment, SFTExample, StepPair, TrajectoryPair, common_kind
from agentq.records.history import Messages

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


class ExampleDataset(Dataset):
    """Examples tokenized once; SFT examples with no trained segment are dropped."""

    def __init__(self, examples: Sequence[Example], tokenizer, max_prompt_tokens: int) -> None:
        common_kind(examples)  # one kind of example, and a kind at all
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

    def prompt_groups(self) -> list[int]:
        """A group number per item: step pairs with the same prompt ids (one search
        node's pairs) share one; any other item is a group of its own."""
        numbers: dict[tuple, int] = {}  # numbered 0, 1, ... in order of first appearance
        groups = []
        for i, item in enumerate(self.items):
            prompt = _shared_prompt(item)
            key = ("prompt", *prompt) if prompt is not None else ("item", i)
            groups.append(numbers.setdefault(key, len(numbers)))
        return groups


def _shared_prompt(item: TokenizedPreference | TokenizedSFT) -> list[int] | None:
    """The prompt ids of a step pair (one segment each side, one prompt), else None."""
    if isinstance(item, TokenizedPreference) and len(item.chosen) == len(item.rejected) == 1:
        (prompt, _), (other, _) = item.chosen[0], item.rejected[0]
        return prompt if prompt == other else None
    return None


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
class PromptGroups:
    """The sequences of a batch of step pairs by prompt: each distinct prompt once,
    with the distinct completions that follow it in the batch (a node's sibling
    actions, each once however many pairs it is in), so that a prompt runs once
    for all of them. Scoring the completions of every group in order gives D
    log-probs; ``row`` picks each sequence's."""

    prompt_ids: list[list[int]]  # P distinct prompts
    completion_ids: list[list[list[int]]]  # per prompt, its distinct completions; D in all
    row: torch.Tensor  # (S,) long: each sequence's index among the D completions

    @classmethod
    def of(cls, segments: Segments) -> PromptGroups:
        """Groups of one-segment sequences (segment i is sequence i)."""
        groups: dict[tuple[int, ...], dict[tuple[int, ...], int]] = {}  # prompt -> completion -> index in group
        keys = []
        for prompt, completion in zip(segments.prompt_ids, segments.completion_ids, strict=True):
            completions = groups.setdefault(tuple(prompt), {})
            completions.setdefault(tuple(completion), len(completions))
            keys.append((tuple(prompt), tuple(completion)))
        starts = dict(zip(groups, np.cumsum([0, *map(len, groups.values())]).tolist(), strict=False))
        return cls(
            prompt_ids=[list(p) for p in groups],
            completion_ids=[[list(c) for c in completions] for completions in groups.values()],
            row=torch.tensor([starts[p] + groups[p][c] for p, c in keys], dtype=torch.long),
        )


@dataclass
class PreferenceBatch:
    segments: Segments  # 2B sequences: [0, B) chosen, [B, 2B) rejected
    reference_chosen: torch.Tensor  # (B,) logged log pi_ref of the chosen sequence
    reference_rejected: torch.Tensor  # (B,)
    chosen_tokens: torch.Tensor  # (B,) completion tokens in the chosen sequence
    rejected_tokens: torch.Tensor  # (B,)
    chosen_visits: torch.Tensor | None  # (B,) N(h, a_w), None unless every pair has visits
    rejected_visits: torch.Tensor | None  # (B,)
    # When every pair is one history and two actions (step pairs): the 2B sequences by
    # history, so each history can run once. None otherwise.
    by_prompt: PromptGroups | None

    @property
    def num_pairs(self) -> int:
        return self.reference_chosen.shape[0]

    @property
    def shares_prompt(self) -> bool:
        return self.by_prompt is not None


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
        by_prompt=PromptGroups.of(segments) if all(_shared_prompt(x) is not None for x in items) else None,
    )


def collate_sft(items: Sequence[TokenizedSFT]) -> SFTBatch:
    segments = Segments.of([x.segments for x in items])
    return SFTBatch(segments=segments, num_tokens=segments.num_tokens())


# --------------------------------------------------------------------- order (resumable)


def derive_seed(*keys: int) -> int:
    """A 63-bit seed that depends only on ``keys`` (non-negative ints), well mixed:
    (1, 0) and (0, 1) give unrelated streams, unlike ``seed + epoch``."""
    low, high = np.random.SeedSequence([int(k) for k in keys]).generate_state(2, np.uint32)
    return (int(high) << 31) ^ int(low)


def data_parallel_rank() -> tuple[int, int]:
    """(world size, rank) of the process group, (1, 0) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class EpochSampler(Sampler[int]):
    """This rank's example indices for one epoch, in an order that depends only on
    ``(seed, epoch)``, so a restarted process draws the same epoch as the killed one.

    With ``groups`` (a group number per example: a search node's step pairs share
    one), the groups are shuffled and each group's members follow one another
    (shuffled among themselves), so consecutive batches hold one node's pairs and
    its history runs once per batch (:class:`PromptGroups`); a group larger than a
    batch fills several, and a batch may end one group and start the next.

    Data-parallel ranks split the epoch as ``DistributedSampler`` does (the order
    padded by repeating its start to a multiple of the world size, then every
    ``world``-th index from ``rank``), or, with ``groups``, in contiguous blocks
    (striding would scatter a group over the ranks); the world is read when an
    epoch starts, so the sampler can be built before the workers exist. ``offset``
    skips that many of the epoch's indices in the next iteration only (a resumed epoch).
    """

    def __init__(
        self, num_examples: int, seed: int, shuffle: bool = True, groups: Sequence[int] | None = None
    ) -> None:
        if groups is not None and len(groups) != num_examples:
            raise ValueError(f"EpochSampler: {len(groups)} group numbers for {num_examples} examples")
        self.num_examples = num_examples
        self.seed = seed
        self.shuffle = shuffle
        self.groups = list(groups) if groups is not None else None
        self.epoch = 0
        self.offset = 0

    def set_epoch(self, epoch: int) -> None:  # Lightning calls it before every epoch
        self.epoch = epoch

    def __len__(self) -> int:
        world, _ = data_parallel_rank()
        return math.ceil(self.num_examples / world)

    def order(self, epoch: int) -> list[int]:
        """This rank's indices of ``epoch``, in order."""
        n = self.num_examples
        generator = torch.Generator().manual_seed(derive_seed(self.seed, 0, epoch))
        if self.groups is not None:
            indices = self.grouped(generator)
        elif self.shuffle:
            indices = torch.randperm(n, generator=generator).tolist()
        else:
            indices = list(range(n))
        world, rank = data_parallel_rank()
        total = math.ceil(n / world) * world
        indices = (indices * math.ceil(total / n))[:total] if n else []
        if self.groups is not None:
            share = total // world
            return indices[rank * share : (rank + 1) * share]
        return indices[rank:total:world]

    def grouped(self, generator: torch.Generator) -> list[int]:
        """All indices, each group's together: groups and members shuffled unless ``shuffle`` is off."""
        members: dict[int, list[int]] = {}
        for index, group in enumerate(self.groups):
            members.setdefault(group, []).append(index)
        groups = list(members.values())
        if self.shuffle:
            groups = [groups[k] for k in torch.randperm(len(groups), generator=generator).tolist()]
            groups = [[g[k] for k in torch.randperm(len(g), generator=generator).tolist()] for g in groups]
        return [index for group in groups for index in group]

    def __iter__(self) -> Iterator[int]:
        start, self.offset = self.offset, 0
        return iter(self.order(self.epoch)[start:])


class ResumableLoader(DataLoader):
    """A ``DataLoader`` over an :class:`EpochSampler` that Lightning can checkpoint
    and restore (it has ``state_dict``/``load_state_dict``, so Lightning saves its
    state with the loops' and loads it on resume): the epoch and how many of this
    rank's examples of it were handed out. A loader restored mid-epoch starts that
    epoch after them, so the resumed run sees exactly the batches the killed run
    had not trained on yet, in the same order; later epochs start at their
    beginning.

    The count is of batches handed to the consumer (not of indices the sampler
    produced, which worker processes would prefetch); Lightning fetches a batch of
    a sized loader only to train on it, so at a checkpoint every batch handed out
    has been trained on. ``groups`` goes to the sampler (a node's pairs together).
    """

    def __init__(
        self, dataset: Dataset, *, batch_size: int, collate_fn: Callable[[list[Any]], Any], seed: int,
        shuffle: bool = True, groups: Sequence[int] | None = None,
    ) -> None:
        sampler = EpochSampler(len(dataset), seed=seed, shuffle=shuffle, groups=groups)
        super().__init__(dataset, batch_size=batch_size, sampler=sampler, collate_fn=collate_fn)
        self._epoch = 0  # the epoch being handed out
        self._handed_out = 0  # this rank's examples of it handed out so far
        self._resume: tuple[int, int] | None = None  # (epoch, examples done) from a checkpoint

    def __iter__(self) -> Iterator[Any]:
        # A generator: nothing runs until the first batch is asked for, which is after
        # Lightning has set the sampler's epoch (it creates the iterator before).
        sampler: EpochSampler = self.sampler
        resume, self._resume = self._resume, None
        start = resume[1] if resume is not None and resume[0] == sampler.epoch else 0
        self._epoch, self._handed_out = sampler.epoch, start
        sampler.offset = start
        for batch in super().__iter__():
            self._handed_out = min(self._handed_out + self.batch_size, len(sampler))
            yield batch

    def state_dict(self) -> dict[str, int]:
        world, _ = data_parallel_rank()
        return {
            "epoch": self._epoch, "examples_done": self._handed_out, "seed": self.sampler.seed,
            "num_examples": self.sampler.num_examples, "world_size": world, "batch_size": self.batch_size,
            "grouped": self.sampler.groups is not None,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        ours = self.state_dict()
        state = {"grouped": False} | dict(state)  # checkpoints from before grouping existed
        for key in ("seed", "num_examples", "world_size", "batch_size", "grouped"):
            if state.get(key) != ours[key]:
                raise ValueError(
                    f"cannot resume this training exactly: its checkpoint was written with {key}={state.get(key)} "
                    f"and this run has {key}={ours[key]}; delete the checkpoints folder to train from the start"
                )
        self._resume = (int(state["epoch"]), int(state["examples_done"]))
