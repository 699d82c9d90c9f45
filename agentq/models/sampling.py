"""K candidate completions for one prompt, sharing a single prefill.

Expanding a search node needs K samples from the same history. ``generate``
with ``num_return_sequences=K`` prefills the prompt K times (and a loop of K
``generate`` calls does so too, with K decode loops); on an 800-token prompt
the prefill dominates. Here the prompt is run once, its KV cache is repeated K
times along the batch (``DynamicCache.batch_repeat_interleave``), and the K
continuations are decoded as one batch. A sequence that emits an end token
leaves the batch (``DynamicCache.batch_select_indices``), so finished
sequences cost nothing.

Each sample carries its joint log-likelihood under the model's raw logits
(temperature 1, no nucleus cut): ``log pi(y | x) = sum_t log softmax(z_t)[y_t]``.
That is the behaviour policy's log-probability of the composite action (Agent Q,
Eq. 1), stored with the data as the DPO reference log-prob; it equals what
:func:`agentq.models.logprobs.completion_logprobs` computes for the same ids.
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from agentq.models.prefix_cache import PrefixCache


class DecodeConstraint(Protocol):
    """Restricts the tokens each sample may draw; :class:`agentq.agent.constrained.CommandConstraint`
    pins the COMMAND field onto the env's valid actions."""

    def begin(self, k: int) -> None: ...
    def mask(self, sample: int, step: int) -> Tensor | None: ...  # additive (V,) or None: free
    def forced_token(self, sample: int, step: int) -> int | None: ...
    def update(self, sample: int, token: int) -> None: ...
    def exhausted(self, sample: int) -> bool: ...
    # The same rule for engines that take a regex instead of a logits mask:
    def regex(self, *, forced: bool = False) -> str: ...
    def settle(self, token_ids: Sequence[int], *, forced: bool = False) -> tuple[int, bool]: ...


@dataclass(frozen=True)
class Sample:
    """One sampled completion.

    Attributes:
        text: decoded completion, special tokens (and the final end token) stripped.
        token_ids: completion ids, including the end token when generation stopped on it.
        logprob: ``sum_t log pi(token_ids[t] | prompt, token_ids[:t])`` under the raw
            logits (temperature 1): the joint log-likelihood of ``token_ids``.
        finished: True if generation stopped on an end token, False if it hit
            ``max_new_tokens``.
    """

    text: str
    token_ids: tuple[int, ...]
    logprob: float
    finished: bool


def nucleus_filter(probs: Tensor, top_p: float) -> Tensor:
    """Zero all but the smallest set of most likely tokens whose mass reaches ``top_p``.

    Holtzman et al. 2020 (nucleus sampling). The most likely token always
    survives. ``probs`` (B, V) -> (B, V), not renormalised (``multinomial``
    does not need it).
    """
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # (B, V)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # (B, V)
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


@torch.no_grad()
def sample_k(
    model: PreTrainedModel,
    prompt_ids: Sequence[int],
    k: int,
    *,
    tokenizer: PreTrainedTokenizerBase,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    eos_token_ids: Collection[int],
    generator: torch.Generator | None = None,
    constraint: DecodeConstraint | None = None,
    prefix_cache: PrefixCache | None = None,
    jump_forward: bool = True,
) -> list[Sample]:
    """Sample ``k`` completions of ``prompt_ids`` with one shared prefill.

    Args:
        model: a causal LM (or a peft model wrapping one); used as is, so put it
            in eval mode first if it has dropout.
        prompt_ids: the prompt token ids (already chat-templated).
        k: number of completions.
        tokenizer: decodes the completions to ``Sample.text``.
        max_new_tokens: cap on completion length, end token included.
        temperature: 0 for greedy decoding, otherwise the softmax temperature.
        top_p: nucleus mass (1.0 disables the cut); ignored when greedy.
        eos_token_ids: ids that end a completion.
        generator: torch RNG for sampling (on the model's device), for reproducible draws.
        constraint: restricts the tokens each sample may draw (the COMMAND field
            onto valid actions); log-probs stay those of the raw logits.
        prefix_cache: reuses the previous prompt's KV cache for the shared prefix.
        jump_forward: when one sample is left and the constraint forces its next
            tokens, score them all in one forward instead of one forward each
            (the same tokens and log-probs, to float noise).

    Returns:
        ``k`` samples, in draw order.
    """
    program = decode(
        prompt_ids, k, tokenizer=tokenizer, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
        eos_token_ids=eos_token_ids, generator=generator, constraint=constraint, prefix_cache=prefix_cache,
        jump_forward=jump_forward, device=model.get_input_embeddings().weight.device,
    )  # fmt: skip
    reply = None
    while True:
        try:
            call = program.send(reply)
        except StopIteration as finished:
            return finished.value
        reply = call.run(model)


@dataclass(frozen=True)
class Prefill:
    """A model call a decode program asks for: the prompt's cache and last logits (1, V)."""

    prompt_ids: Sequence[int]
    prefix_cache: PrefixCache | None

    def run(self, model) -> tuple[DynamicCache, Tensor]:
        return (self.prefix_cache or PrefixCache(enabled=False)).prefill(model, self.prompt_ids)


@dataclass(frozen=True)
class Step:
    """A model call a decode program asks for: ``ids`` (A, T) run on ``cache``
    (which grows by them); the reply is their logits (A, T, V)."""

    cache: DynamicCache
    ids: Tensor

    def run(self, model) -> Tensor:
        return model(input_ids=self.ids, past_key_values=self.cache, use_cache=True).logits


def decode(
    prompt_ids: Sequence[int],
    k: int,
    *,
    tokenizer: PreTrainedTokenizerBase,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    eos_token_ids: Collection[int],
    generator: torch.Generator | None,
    constraint: DecodeConstraint | None,
    prefix_cache: PrefixCache | None,
    jump_forward: bool,
    device: torch.device,
) -> Generator[Prefill | Step, Any, list[Sample]]:
    """:func:`sample_k` as a program that yields its model calls (:class:`Prefill`,
    :class:`Step`) and is sent their results: whoever runs it decides how the calls
    are computed (one at a time, or a step shared with other programs,
    :class:`agentq.models.batched_engine.BatchedHFEngine`). Returns the samples."""
    _check_arguments(k, max_new_tokens, temperature, top_p, prompt_ids)
    eos = torch.tensor(sorted(eos_token_ids), dtype=torch.long, device=device)  # (E,)

    # One prefill (of the tokens not shared with the previous prompt); only
    # the last position's logits are needed.
    cache, last_logits = yield Prefill(prompt_ids, prefix_cache)
    cache.batch_repeat_interleave(k)
    logits = last_logits.float().expand(k, -1)  # (A, V), A = sequences still decoding
    batch = _Batch.empty(k, max_new_tokens)

    if constraint is not None:
        constraint.begin(k)
    step = 0  # index of the token being chosen
    while True:
        choice = logits if constraint is None else _constrain(logits, constraint, batch.alive, step)  # (A, V)
        next_ids = _draw(choice, temperature, top_p, generator)  # (A,)
        # Behaviour log-prob under the raw distribution, whatever was used to draw.
        token_logp = torch.log_softmax(logits, dim=-1).gather(1, next_ids[:, None]).squeeze(1)
        stopped = torch.isin(next_ids, eos)  # (A,)
        batch.record(step, next_ids, token_logp, stopped)
        if constraint is not None:
            for row, sample in enumerate(batch.alive.tolist()):
                constraint.update(sample, int(next_ids[row]))
            cut = torch.tensor([constraint.exhausted(s) for s in batch.alive.tolist()], device=device)  # (A,)
            stopped = stopped | cut
        step += 1

        if step == max_new_tokens or bool(stopped.all()):
            break
        if bool(stopped.any()):
            keep = (~stopped).nonzero().squeeze(1)  # (A',)
            cache.batch_select_indices(keep)
            batch.alive, next_ids = batch.alive[keep.cpu()], next_ids[keep]
        logits, step, done = yield from _forward(
            cache, next_ids, batch, constraint if jump_forward else None, step, max_new_tokens
        )
        if done:
            break
    return batch.samples(tokenizer)


def _forward(
    cache,
    next_ids: Tensor,
    batch: _Batch,
    constraint: DecodeConstraint | None,
    step: int,
    max_new_tokens: int,
) -> Generator[Step, Tensor, tuple[Tensor, int, bool]]:
    """Run the chosen tokens (A,) through the model: (next logits (A, V), next step, done).

    Jump forward: when a lone sample's next tokens are forced (the rest of a command
    the constraint pins down), they run in this same forward and are recorded here.
    """
    forced = []
    if constraint is not None and len(batch.alive) == 1:
        forced = _forced_run(constraint, int(batch.alive[0]), step, max_new_tokens)
    if forced:
        run = torch.cat([next_ids, torch.tensor(forced, dtype=torch.long, device=next_ids.device)])[None]  # (1, 1 + F)
    else:
        run = next_ids[:, None]  # (A, 1)
    out_logits = yield Step(cache, run)  # (A, T, V)
    logits = out_logits[:, -1].float()  # (A, V)
    if not forced:
        return logits, step, False
    sample = int(batch.alive[0])
    scores = torch.log_softmax(out_logits[0, :-1].float(), dim=-1)  # (F, V)
    batch.record_forced(sample, step, forced, scores.gather(1, run[0, 1:, None]).sum().cpu())
    step += len(forced)
    return logits, step, step == max_new_tokens or constraint.exhausted(sample)


def _check_arguments(k: int, max_new_tokens: int, temperature: float, top_p: float, prompt_ids: Sequence[int]) -> None:
    if k < 1:
        raise ValueError(f"sample_k: k must be >= 1, got {k}")
    if max_new_tokens < 1:
        raise ValueError(f"sample_k: max_new_tokens must be >= 1, got {max_new_tokens}")
    if not temperature >= 0:  # also rejects NaN
        raise ValueError(f"sample_k: temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"sample_k: top_p must be in (0, 1], got {top_p}")
    if len(prompt_ids) == 0:
        raise ValueError("sample_k: prompt_ids is empty")


def _draw(logits: Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> Tensor:
    """Next token of each live row of ``logits`` (A, V) -> (A,): argmax when greedy, else a draw."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)  # (A, V)
    if top_p < 1:
        probs = nucleus_filter(probs, top_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@dataclass
class _Batch:
    """What each of the K samples has written so far; ``alive`` maps live rows to samples."""

    tokens: Tensor  # (K, N)
    lengths: Tensor  # (K,)
    logprobs: Tensor  # (K,)
    finished: Tensor  # (K,)
    alive: Tensor  # (A,) row of the batch -> sample index

    @classmethod
    def empty(cls, k: int, max_new_tokens: int) -> _Batch:
        return cls(
            tokens=torch.zeros(k, max_new_tokens, dtype=torch.long),
            lengths=torch.zeros(k, dtype=torch.long),
            logprobs=torch.zeros(k, dtype=torch.float32),
            finished=torch.zeros(k, dtype=torch.bool),
            alive=torch.arange(k),
        )

    def record(self, step: int, next_ids: Tensor, token_logp: Tensor, stopped: Tensor) -> None:
        """One token for every live row: ids (A,), their log-probs (A,), end tokens (A,)."""
        self.tokens[self.alive, step] = next_ids.cpu()
        self.lengths[self.alive] += 1
        self.logprobs[self.alive] += token_logp.cpu()
        self.finished[self.alive] = stopped.cpu()

    def record_forced(self, sample: int, step: int, forced: list[int], logprob: Tensor) -> None:
        """A lone sample's forced run, written from ``step`` on, with its summed log-prob."""
        n = len(forced)
        self.tokens[sample, step : step + n] = torch.tensor(forced)
        self.lengths[sample] += n
        self.logprobs[sample] += logprob

    def samples(self, tokenizer: PreTrainedTokenizerBase) -> list[Sample]:
        samples = []
        for i in range(len(self.lengths)):
            ids = self.tokens[i, : self.lengths[i]].tolist()
            text_ids = ids[:-1] if self.finished[i] else ids
            samples.append(
                Sample(
                    text=tokenizer.decode(text_ids, skip_special_tokens=True),
                    token_ids=tuple(ids),
                    logprob=float(self.logprobs[i]),
                    finished=bool(self.finished[i]),
                )
            )
        return samples


def _forced_run(constraint: DecodeConstraint, sample: int, step: int, max_new_tokens: int) -> list[int]:
    """The tokens ``sample`` is forced to write from ``step`` on (advancing the constraint past them)."""
    run: list[int] = []
    while step + len(run) < max_new_tokens and not constraint.exhausted(sample):
        token = constraint.forced_token(sample, step + len(run))
        if token is None:
            break
        constraint.update(sample, token)
        run.append(token)
    return run


def _constrain(logits: Tensor, constraint: DecodeConstraint, alive: Tensor, step: int) -> Tensor:
    """``logits`` (A, V) plus each live sample's mask; rows without a mask are unchanged."""
    masks = [constraint.mask(sample, step) for sample in alive.tolist()]
    if all(m is None for m in masks):
        return logits
    size = logits.shape[-1]
    # Ids past the tokenizer's (padded embedding rows) are never valid.
    masks = [torch.zeros(size) if m is None else F.pad(m, (0, size - m.numel()), value=float("-inf")) for m in masks]
    return logits + torch.stack(masks).to(logits)
