"""K candidates from vLLM: the sampling contract of :func:`agentq.models.sampling.sample_k`
on a vLLM engine (``engine=vllm``; optional, for CUDA machines).

**Not run on this machine** (no GPU; vLLM is not installed): the tests cover the
import guard, the request parameters and the conversion of vLLM's outputs into
our :class:`~agentq.models.sampling.Sample` (with fake output objects). The engine
calls in :class:`VLLMEngine` have never been executed here.

The contract, as on the HF path:

- K completions of one prompt are one request with ``SamplingParams(n=K)``: vLLM
  prefills the prompt once and shares its KV blocks among the K sequences, and
  its automatic prefix caching reuses the history shared with earlier prompts
  (what :class:`~agentq.models.prefix_cache.PrefixCache` does on the HF path).
- Greedy (temperature 0) decodes one completion and repeats it K times (HF greedy
  gives K identical ones).
- ``Sample.logprob`` is the joint log-likelihood of the completion's tokens under
  the raw logits (temperature 1, no nucleus cut): the behaviour policy's
  log-prob kept as the DPO reference (Agent Q, Eq. 1). ``logprobs=0`` returns the
  sampled token's log-prob at each step; the engine is built with
  ``logprobs_mode="raw_logprobs"`` (before temperature and top-p; vLLM >= 0.10).
- ``Sample.token_ids`` end with the end token when generation stopped on one
  (vLLM keeps ``stop_token_ids`` in the output ids); ``Sample.text`` is decoded
  from the ids without it, as on the HF path.

HF-only: constrained COMMAND decoding (a per-step logits mask over valid actions;
refused with this engine by ``components.check_engine``) and our ``PrefixCache``
(vLLM has its own; ignored). Requests go one at a time (``LLM.generate`` is not
called from several threads), so ``collect.concurrency`` and ``eval.concurrency``
stay 1 with this engine.

Weights: one engine per process, built from the model's ``config._name_or_path``
(a folder or hub id vLLM can load, e.g. the cached fp32 folder of the embedded
GGUF model, docs/method.md §11). :meth:`VLLMEngine.serve` pushes the current policy's
weights into it (after iteration i, the base model with adapters 1..i merged)
through the in-process model runner: this needs ``tensor_parallel_size=1`` and
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, and the attribute path
(``llm_engine.model_executor.driver_worker.worker.model_runner.model``) moves
between vLLM versions.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import torch

from agentq.models.engine import request_seed
from agentq.models.sampling import Sample

INSTALL_HINT = "pip install vllm on a CUDA machine (vllm>=0.10.2)"

# Engine settings: the trainer shares the GPU between iterations, so vLLM does not
# take all of its memory.
ENGINE_KWARGS: dict[str, Any] = {
    "gpu_memory_utilization": 0.5,
    "enable_prefix_caching": True,
    "logprobs_mode": "raw_logprobs",
    "tensor_parallel_size": 1,
}


def require_vllm() -> Any:
    """The ``vllm`` module, or an ImportError that says how to get it."""
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"engine=vllm needs vLLM, which is not installed: {INSTALL_HINT}") from e
    return vllm


def sampling_kwargs(
    k: int,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    eos_token_ids: Collection[int],
    seed: int | None = None,
) -> dict[str, Any]:
    """The ``SamplingParams`` of one request for ``k`` candidates (greedy: one)."""
    greedy = temperature == 0
    return {
        "n": 1 if greedy else k,
        "temperature": 0.0 if greedy else float(temperature),
        "top_p": 1.0 if greedy else float(top_p),
        "max_tokens": max_new_tokens,
        "logprobs": 0,  # the sampled token's log-prob only
        "stop_token_ids": sorted(eos_token_ids),
        "skip_special_tokens": True,
        "seed": None if greedy else seed,
    }


def check_request(engine: str, k: int, constraint: Any) -> None:
    """What an engine without a logits hook refuses in a request."""
    if k < 1:
        raise ValueError(f"sample_k: k must be >= 1, got {k}")
    if constraint is not None:
        raise ValueError(f"engine={engine} does not take the COMMAND constraint: set agent.sampling.constrain_command=false")


def k_completions(completions: Sequence[Any], k: int, engine: str) -> list[Any]:
    """The ``k`` completions of a request; a single greedy one is repeated ``k`` times."""
    completions = list(completions)
    if len(completions) == 1 and k > 1:
        completions = completions * k
    if len(completions) != k:
        raise ValueError(f"engine={engine} returned {len(completions)} completions for k={k}")
    return completions


def completed_sample(ids: Sequence[int], logprob: float, finished: bool, *, tokenizer, eos_token_ids: Collection[int]) -> Sample:
    """A completion's sample: its text decoded without the end token, as on the HF path."""
    ids = tuple(int(t) for t in ids)
    text_ids = ids[:-1] if ids and ids[-1] in set(eos_token_ids) else ids
    text = tokenizer.decode(list(text_ids), skip_special_tokens=True)
    return Sample(text=text, token_ids=ids, logprob=float(logprob), finished=finished)


def samples_from_output(output: Any, k: int, *, tokenizer, eos_token_ids: Collection[int]) -> list[Sample]:
    """Our samples from one vLLM ``RequestOutput`` (its ``.outputs`` are the completions)."""
    return [
        completed_sample(
            completion.token_ids, completion_logprob(completion, completion.token_ids),
            completion.finish_reason == "stop", tokenizer=tokenizer, eos_token_ids=eos_token_ids,
        )  # fmt: skip
        for completion in k_completions(output.outputs, k, "vllm")
    ]


def completion_logprob(completion: Any, ids: Sequence[int]) -> float:
    """Sum of the sampled tokens' log-probs: from the per-step entries
    (``logprobs[t][ids[t]].logprob``) when present, else ``cumulative_logprob``."""
    steps = completion.logprobs
    if steps is not None and len(steps) == len(ids):
        return float(sum(step[token].logprob for step, token in zip(steps, ids, strict=True)))
    if completion.cumulative_logprob is None:
        raise ValueError("vLLM returned no log-probs: the request must set logprobs=0")
    return float(completion.cumulative_logprob)


class VLLMEngine:
    """``sample_k`` on a vLLM engine that holds the given model's current weights.

    Args:
        model: the HF policy model (its ``config._name_or_path`` names what vLLM
            loads; its state dict is pushed into the engine).
        tokenizer: decodes completions (the same one the prompts were encoded with).
        max_model_len: prompt plus completion budget.
    """

    _engines: dict[str, Any] = {}  # one engine per model source, per process
    exact = False
    batches = False
    constrains = False
    weights_name = None

    @staticmethod
    def check_args(key: str, **_) -> None:
        require_vllm()  # before any model loads (validation.check_targets)

    def __init__(self, model, tokenizer, *, max_model_len: int = 4096) -> None:
        vllm = require_vllm()
        self.tokenizer = tokenizer
        self._vllm = vllm
        source = getattr(model.config, "_name_or_path", "")
        if not source:
            raise ValueError(
                f"engine=vllm: vLLM loads the model from a folder or hub id, "
                f"and this model's config names {source!r}"
            )
        if source not in self._engines:
            # The weight push below reaches the model runner in this process.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            self._engines[source] = vllm.LLM(model=source, max_model_len=max_model_len, **ENGINE_KWARGS)
        self.llm = self._engines[source]
        self.serve(model)

    def serve(self, model, adapters: Sequence[Path] = ()) -> None:
        push_weights(self.llm, model)

    def run(self, fn):
        """``fn()``: requests are one at a time here, so nothing runs beside it."""
        return fn()

    def close(self) -> None:
        pass  # the engine is kept for the process's next run

    @torch.no_grad()
    def sample(
        self,
        prompt_ids: Sequence[int],
        k: int,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        eos_token_ids: Collection[int],
        generator: torch.Generator | None = None,
        constraint=None,
        prefix_cache=None,  # vLLM's own prefix caching serves instead
    ) -> list[Sample]:
        """As :func:`agentq.models.sampling.sample_k`; the request's seed is drawn
        from ``generator``, so draws are reproducible per call."""
        check_request("vllm", k, constraint)
        seed = request_seed(generator)
        params = self._vllm.SamplingParams(
            **sampling_kwargs(
                k, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                eos_token_ids=eos_token_ids, seed=seed,
            )
        )
        [output] = self.llm.generate([{"prompt_token_ids": list(prompt_ids)}], params, use_tqdm=False)
        return samples_from_output(output, k, tokenizer=self.tokenizer, eos_token_ids=eos_token_ids)


def push_weights(llm: Any, model: torch.nn.Module) -> None:
    """Copy the HF model's weights into the engine (HF checkpoint names; vLLM's
    ``load_weights`` fuses q/k/v and gate/up itself)."""
    try:
        runner_model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    except AttributeError as e:
        raise RuntimeError(
            "engine=vllm: cannot reach the engine's model to load the policy's weights "
            "(needs VLLM_ENABLE_V1_MULTIPROCESSING=0, tensor_parallel_size=1, and a vLLM whose LLM has "
            "llm_engine.model_executor.driver_worker.worker.model_runner.model)"
        ) from e
    runner_model.load_weights((name, tensor.detach()) for name, tensor in model.state_dict().items())
