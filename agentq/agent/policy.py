"""The LLM policy: history -> K composite actions, parsed and grounded.

Searches and evaluation talk to a policy through one method,
``propose(history, k, *, greedy, generator, exclude) -> list[Candidate]``; tests use
scripted policies with the same method.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

import torch

from agentq.agent.action import parse_composite
from agentq.agent.constrained import CommandConstraint, TokenTable
from agentq.agent.grounding import Grounder
from agentq.agent.prompt import PromptBuilder
from agentq.models.engine import Engine, HFEngine
from agentq.models.prefix_cache import Preambles, PrefixCache
from agentq.records.action import Candidate
from agentq.records.history import History, Messages


class Policy(Protocol):
    def propose(
        self,
        history: History,
        k: int,
        *,
        greedy: bool = False,
        generator: torch.Generator | None = None,
        exclude: Collection[str] = (),
    ) -> list[Candidate]:
        """``k`` candidates at ``history``; none whose command is in ``exclude`` (an empty
        list when every valid action is excluded)."""
        ...


@dataclass(frozen=True)
class Sampling:
    """How composite actions are decoded.

    Args:
        max_new_tokens: generation budget of one composite action.
        temperature, top_p: sampling for search (``greedy=True`` ignores them).
        max_prompt_tokens: keep the newest tokens of longer prompts (left truncation).
        constrain_command: decode the COMMAND field onto the env's valid actions
            (:mod:`agentq.agent.constrained`); the rest of the composite stays free.
        max_tail_tokens: with ``constrain_command``, cut an action this many
            tokens after its COMMAND line (its EXPLANATION), as ``max_new_tokens``
            cuts it; None: no cap.
        reuse_prefix_cache: keep earlier prompts' KV caches (a radix tree) and
            prefill only what no earlier prompt shares (:mod:`agentq.models.prefix_cache`).
        prefix_cache_tokens: bound on the tokens that tree holds (least recently
            used prompts are dropped first; ~46 KB per token for SmolLM2-135M in fp32).

    The engine that decodes (``engine`` config group, :mod:`agentq.models.engine`)
    is not a sampling setting: the HF engine takes every option here; an engine
    with its own prefix cache ignores the two cache options.
    """

    max_new_tokens: int = 96
    temperature: float = 1.0
    top_p: float = 1.0
    max_prompt_tokens: int = 2048
    constrain_command: bool = False
    max_tail_tokens: int | None = None
    reuse_prefix_cache: bool = True
    prefix_cache_tokens: int = 8192

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"agent.sampling.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"agent.sampling.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"agent.sampling.top_p must be in (0, 1], got {self.top_p}")
        if self.max_prompt_tokens < 16:
            raise ValueError(f"agent.sampling.max_prompt_tokens must be >= 16, got {self.max_prompt_tokens}")
        if self.max_tail_tokens is not None and (self.max_tail_tokens < 0 or not self.constrain_command):
            raise ValueError(
                f"agent.sampling.max_tail_tokens={self.max_tail_tokens} needs a value >= 0 and "
                "agent.sampling.constrain_command=true (the constraint is what sees the command end)"
            )
        if self.prefix_cache_tokens < 1:
            raise ValueError(f"agent.sampling.prefix_cache_tokens must be >= 1, got {self.prefix_cache_tokens}")


class LLMPolicy:
    """A causal LM behind the composite-action prompt.

    Args:
        model, tokenizer: loaded by a model config (``agentq.models``).
        prompt: renders the history.
        grounder: maps commands onto the env's valid actions.
        sampling: decoding settings.
        engine: decodes (:mod:`agentq.models.engine`); None: the HF engine on ``model``.
        preambles: the prompt beginnings every task shares, with their cached keys and
            values (a fork shares its parent's); None: made from ``prompt``.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        prompt: PromptBuilder,
        grounder: Grounder,
        sampling: Sampling,
        engine: Engine | None = None,
        preambles: Preambles | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.prompt = prompt
        self.grounder = grounder
        self.sampling = sampling
        self.eos_token_ids = eos_token_ids(tokenizer)
        self.num_calls = 0  # model calls, for reporting search budgets
        self._token_table: TokenTable | None = None
        # Prompts share the system message, demonstrations and earlier actions; every
        # task's first prompts share the first two (with and without the plan line).
        if preambles is None:
            preambles = Preambles([self.encode_preamble(prompt.preamble(first)) for first in (True, False)])
        self.preambles = preambles
        self.prefix_cache = PrefixCache(
            enabled=sampling.reuse_prefix_cache, max_tokens=sampling.prefix_cache_tokens, preambles=preambles
        )
        self.engine = engine if engine is not None else HFEngine(model, tokenizer)

    def fork(self) -> LLMPolicy:
        """The same policy and engine with caches and counters of its own, for a search
        that runs beside this one (its prompt cache is scoped to its own tasks)."""
        return LLMPolicy(
            self.model, self.tokenizer, prompt=self.prompt, grounder=self.grounder, sampling=self.sampling,
            engine=self.engine, preambles=self.preambles,
        )  # fmt: skip

    def encode(self, messages: Messages) -> list[int]:
        return encode_chat(self.tokenizer, messages, self.sampling.max_prompt_tokens)

    def encode_preamble(self, messages: Messages) -> list[int]:
        """The tokens every prompt that starts with ``messages`` starts with (no assistant turn opened)."""
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=True)
        return list(ids if isinstance(ids, list) else ids["input_ids"])

    def propose(
        self,
        history: History,
        k: int,
        *,
        greedy: bool = False,
        generator: torch.Generator | None = None,
        exclude: Collection[str] = (),
    ) -> list[Candidate]:
        messages = self.prompt(history)  # the whole history, excluded actions too: one prompt per state
        constraint = self._constraint(history, exclude)
        if exclude and constraint is None:
            if self.sampling.constrain_command and history.valid_actions:
                return []  # every valid action is excluded
            raise ValueError(
                "excluding commands from a proposal needs agent.sampling.constrain_command=true "
                "and an env that lists its valid actions"
            )
        samples = self.engine.sample(
            self.encode(messages),
            k,
            max_new_tokens=self.sampling.max_new_tokens,
            temperature=0.0 if greedy else self.sampling.temperature,
            top_p=self.sampling.top_p,
            eos_token_ids=self.eos_token_ids,
            generator=generator,
            constraint=constraint,
            prefix_cache=self.prefix_cache,
        )
        self.num_calls += 1
        candidates = []
        for sample in samples:
            parsed = parse_composite(sample.text)
            grounded = self.grounder(parsed.command, history.valid_actions)
            candidates.append(
                Candidate(
                    text=sample.text,
                    command=grounded.command,
                    logprob=sample.logprob,
                    action_ids=tuple(sample.token_ids),
                    prompt=messages,
                    parsed=parsed,
                    grounding=grounded.grounding,
                )
            )
        return candidates

    def _constraint(self, history: History, exclude: Collection[str] = ()) -> CommandConstraint | None:
        """The COMMAND field held to the valid actions not in ``exclude`` (a template such as
        ``search[...]`` stays: an argument drawn before may be drawn again); None when
        decoding is free or nothing is left."""
        allowed = [a for a in history.valid_actions or () if a not in exclude]
        if not (self.sampling.constrain_command and allowed):
            return None
        if self._token_table is None:  # ~0.2 s for a 49k vocabulary, once
            self._token_table = TokenTable(self.tokenizer)
        return CommandConstraint(
            self._token_table,
            allowed,
            eos_token_ids=self.eos_token_ids,
            max_new_tokens=self.sampling.max_new_tokens,
            max_tail_tokens=self.sampling.max_tail_tokens,
        )


def forget_prompts(*parts) -> None:
    """Empty the prompt caches of a policy, critic or judge at the start of a task.

    A cached prefix is computed in other shapes than the same prompt from scratch,
    and on some CPUs that changes the last float bits enough to flip a sampled
    token. Scoping the caches to one task keeps every search and episode a function
    of the weights, the seed, the task and the config, never of what ran before it
    in the process (a resumed run collects the trees an uninterrupted one would).
    """
    for part in parts:
        cache = getattr(part, "prefix_cache", None)
        if cache is not None:
            cache.clear()


def eos_token_ids(tokenizer) -> set[int]:
    """The chat model's end-of-turn tokens (``<|im_end|>`` for SmolLM2) and EOS."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    for token in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id and token_id >= 0:
            ids.add(token_id)
    return ids


def encode_chat(tokenizer, messages: Messages, max_tokens: int) -> list[int]:
    """Chat-template the messages with the assistant turn opened; keep the newest ``max_tokens``."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if not isinstance(ids, list):  # transformers 5 may return a BatchEncoding
        ids = ids["input_ids"]
    return list(ids[-max_tokens:])
