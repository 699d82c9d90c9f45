"""Inference engines: what turns a prompt into K sampled completions.

Every policy proposal (K candidates of a node, a rollout step, an evaluation
action) goes through one engine, chosen by the ``engine`` config group and
built once per run around the policy's weights:

- ``hf`` (:class:`HFEngine`): :func:`agentq.models.sampling.sample_k` in this
  process, on the torch model itself. The exact reference: its log-probs are the
  trainer's, it takes the constrained COMMAND decoding and the prompt cache, and
  it serves any model. One request at a time. With ``engine.dtype=bfloat16`` it
  decodes a bf16 copy of the weights instead (search and evaluation 1.1-1.3x
  faster on a CPU with native bf16; docs/results.md), and is no longer exact.
- ``hf_batched`` (:class:`agentq.models.batched_engine.BatchedHFEngine`): the
  same decoding, with the decode steps of concurrent searches shared.
- ``openvino`` (:class:`agentq.models.openvino_engine.OpenVINOEngine`): OpenVINO
  GenAI's continuous-batching pipeline on the CPU; requests from concurrent
  searches are batched as they arrive.
- ``vllm`` (:class:`agentq.models.vllm_engine.VLLMEngine`): vLLM on CUDA machines.
- ``server`` (:class:`agentq.models.server_engine.ServerEngine`): a shared
  OpenAI-compatible inference server, given by URL.

An engine's ``serve(model, adapters)`` makes it sample from new weights (after each
iteration's training, the base with the adapters merged; ``adapters`` names them,
in order, for an engine that loads adapters rather than weights: a server).
``weights_name`` is the server's name for what it serves (None: weights held in
this process); every tree records it. ``exact`` says whether
its log-probs are the trainer's own numerics; when they are not, nothing the
trainer computes is taken from them (the DPO reference is the trainer's forward
pass, docs/method.md §4).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from agentq.models.loading import resolve_dtype
from agentq.models.prefix_cache import PrefixCache
from agentq.models.sampling import DecodeConstraint, Sample, sample_k


class Engine(Protocol):
    exact: bool  # log-probs computed by the trainer's own forward (same kernels, fp32)
    batches: bool  # requests from concurrent searches share forward passes
    constrains: bool  # takes a DecodeConstraint (the COMMAND field onto valid actions)
    weights_name: str | None  # the server's name for the weights it serves (None: held in this process)

    def serve(self, model: torch.nn.Module, adapters: Sequence[Path] = ()) -> None: ...  # adapters: what made model (below)

    def sample(
        self,
        prompt_ids: Sequence[int],
        k: int,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        eos_token_ids: Collection[int],
        generator: torch.Generator | None = None,
        constraint: DecodeConstraint | None = None,
        prefix_cache: PrefixCache | None = None,
    ) -> list[Sample]: ...

    def run(self, fn: Callable[[], Any]) -> Any: ...  # fn() where it cannot fight the engine's compute

    def close(self) -> None: ...  # end the engine's threads; serve() or the next request starts them again


class HFEngine:
    """:func:`~agentq.models.sampling.sample_k` on the torch model, one request at a time.

    Calls from several threads are serialised: the model's forward passes already
    use every core, and two at once would only fight over them.

    ``dtype`` other than float32: decode a copy of the served weights cast to it
    (the trainer keeps its fp32 model). Only the search's and the evaluation's
    numerics change, so the engine is not ``exact`` then: the DPO reference comes
    from the trainer's forward pass (``components.check_engine``).
    """

    exact = True  # in float32; an engine built with another dtype sets it False
    batches = False
    constrains = True
    weights_name = None

    def __init__(self, model: torch.nn.Module, tokenizer, dtype: str = "float32") -> None:
        self.dtype = resolve_dtype(dtype, "engine")
        self.exact = self.dtype == torch.float32
        self.tokenizer = tokenizer
        self._lock = threading.Lock()
        self.serve(model)

    def serve(self, model: torch.nn.Module, adapters: Sequence[Path] = ()) -> None:
        self.model = model if self.exact else cast_copy(model, self.dtype)

    def sample(
        self,
        prompt_ids: Sequence[int],
        k: int,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        eos_token_ids: Collection[int],
        generator: torch.Generator | None = None,
        constraint: DecodeConstraint | None = None,
        prefix_cache: PrefixCache | None = None,
    ) -> list[Sample]:
        with self._lock:
            return sample_k(
                self.model, prompt_ids, k, tokenizer=self.tokenizer, max_new_tokens=max_new_tokens,
                temperature=temperature, top_p=top_p, eos_token_ids=eos_token_ids, generator=generator,
                constraint=constraint, prefix_cache=prefix_cache,
            )  # fmt: skip

    def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` between this engine's requests (the critic's forwards, under the same lock)."""
        with self._lock:
            return fn()

    def close(self) -> None:
        pass


def cast_copy(model: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """A frozen copy of ``model`` (in ``dtype``; None: its own), for inference only (the original is untouched)."""
    cast = copy.deepcopy(model).eval()
    if dtype is not None:
        cast.to(dtype)
    cast.requires_grad_(False)
    return cast


def request_seed(generator: torch.Generator | None) -> int | None:
    """A request's sampling seed, drawn from the search's generator: an engine that
    samples on its own RNG still gives each search the same draws, call after call."""
    if generator is None:
        return None
    return int(torch.randint(0, 2**31 - 1, (1,), generator=generator))


class Serialized:
    """A model whose forward passes go through ``run`` (an engine's :meth:`~Engine.run`):
    the critic's and the judge's torch model, shared by concurrent searches, takes
    turns with the engine's own model calls (attributes pass through)."""

    def __init__(self, model: torch.nn.Module, run: Callable[[Callable[[], Any]], Any]) -> None:
        self.__dict__["_model"] = model
        self.__dict__["_run"] = run

    def __call__(self, *args, **kwargs):
        return self._run(lambda: self._model(*args, **kwargs))

    def __getattr__(self, name: str):
        return getattr(self._model, name)
