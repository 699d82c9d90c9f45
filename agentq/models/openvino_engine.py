"""The CPU engine: OpenVINO GenAI's continuous-batching pipeline (``engine=openvino``).

Why this engine (experiments/benchmarks/table.md, "Engines"): on 2 CPU cores a
135M model is bound by per-step overhead, and this pipeline batches the decode
steps of every request in flight, shares one prefill among a request's K
samples, and keeps a prefix cache of KV blocks across requests.

**Weights.** The pipeline reads GGUF files. The policy's current torch weights
(the embedded base, or the base with each iteration's adapter merged) are
written as F16 GGUF (:func:`agentq.models.gguf_export.write_gguf`), once per
distinct set of weights, cached under ``cache_dir`` by a hash of the weights.
Measured on 16 WebShop prompts (48 greedy tokens each): the F16 file gives
greedy tokens identical to the HF fp32 model on 16 of 16 prompts; the shipped
Q4_1 file read directly gives 0 of 16 (its 4-bit blocks are decoded
differently from transformers' dequantisation), a Q8_0 file 10 of 16.

**Numerics.** The pipeline computes in fp32 here (``INFERENCE_PRECISION_HINT``,
fp32 KV cache, no dynamic int8 quantisation of activations): with the CPU's
defaults (bf16 on AVX512-BF16 machines) a request's tokens changed with the
batch it ran in. Log-probs still differ from torch's in the last digits, so the
engine is not ``exact``: the trainer never takes its scores as the DPO reference.

**Requests.** ``sample`` may be called from many threads (one per concurrent
search). One dispatcher thread owns the pipeline: it adds waiting requests
between decode steps, steps the pipeline, and hands each finished request back
to its caller. A request's result depends on its prompt, its settings and its
seed (drawn from the caller's generator), and, by rounding, on the requests that
ran beside it: the pipeline's kernels take other paths for other batches (a
lone sequence's decode step most of all). Measured on 12 WebShop prompts with
SmolLM2 (experiments/benchmarks/table.md, "OpenVINO: a request alone vs beside
others"): requests one after another reproduce bitwise; run beside each other,
5 of 60 single samples of 48 tokens drew other tokens (a rounding difference
moved the seed's draw across the boundary between two tokens) and most others
had log-probs up to 2e-4 nats apart; 3 samples per request, 0 of 180. So a run
at ``concurrency`` 1 reproduces exactly, and a run at N > 1 gives the same
trees but for a few tasks (tests/test_concurrency.py); ``engine=hf_batched``
gives them bitwise at any concurrency.

**Log-probs.** The pipeline reports log-probs of the distribution it sampled
from; at temperature 1 without a nucleus cut that is the raw distribution our
``Sample.logprob`` promises, otherwise not, so other settings are refused.

**The COMMAND constraint.** The pipeline has no per-step logits hook; it takes
a regex (``StructuredOutputConfig``, enforced by its grammar sampler). A
constraint gives its rule as a regex and settles the budget rules afterwards
(:meth:`agentq.agent.constrained.CommandConstraint.regex` / ``settle``): a
sample that had not reached its COMMAND header by ``force_at`` tokens continues
from there with the trigger forced and ends with its command line. The grammar
may spell a forced command in more tokens than the tokenizer's own, so such a
sample can run past ``max_new_tokens`` (by at most the command's characters).
Constrained samples go one request each: measured on 2026.4, a regex request
with ``num_return_sequences > 1`` wrote text its regex forbids ("COMMOMDcbea"),
one sequence per request did not. The log-probs the pipeline reports under the
grammar are the raw model's (forced tokens carry their own, non-zero
log-probs), as ``Sample.logprob`` promises. Measured on WebShop, the regex
decodes a worse agent than the trie (docs/results.md, "Engines"): greedy
decoding under it takes spellings of actions the model never writes.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentq.models.engine import request_seed
from agentq.models.gguf_export import write_gguf
from agentq.models.loading import smollm2_gguf_path
from agentq.models.sampling import DecodeConstraint, Sample

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install openvino-genai (a dependency of agentq: reinstall with `make install`)"

# fp32 compute and KV cache, no int8 activations: see the module docstring.
EXACT_PROPERTIES = {
    "INFERENCE_PRECISION_HINT": "f32",
    "KV_CACHE_PRECISION": "f32",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
}


def require_openvino():
    try:
        import openvino_genai
    except ImportError as e:
        raise ImportError(f"engine=openvino needs OpenVINO GenAI: {INSTALL_HINT}") from e
    return openvino_genai


class OpenVINOEngine:
    """Samples from the policy's weights on an OpenVINO GenAI continuous-batching pipeline.

    Args:
        model: the torch policy whose weights to serve (written as GGUF).
        tokenizer: decodes completions (prompts arrive as token ids).
        template: a GGUF file with the tokenizer's metadata (None: the embedded model's).
        cache_dir: where the GGUF files of served weights are kept.
        cache_gb: the pipeline's KV cache size.
        prefix_caching: keep KV blocks of earlier prompts for later ones.
        threads: the pipeline's inference threads (None: every core).
    """

    exact = False
    batches = True
    constrains = True  # through a regex (see the module docstring)
    weights_name = None

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        *,
        template: str | Path | None,
        cache_dir: str | Path,
        cache_gb: float = 2.0,
        prefix_caching: bool = False,
        threads: int | None = None,
    ) -> None:
        self._og = require_openvino()
        self.tokenizer = tokenizer
        self.template = Path(template) if template is not None else smollm2_gguf_path()
        self.cache_dir = Path(cache_dir).expanduser()
        self.cache_gb = cache_gb
        self.prefix_caching = prefix_caching
        self.threads = threads
        self._requests: queue.Queue = queue.Queue()
        self._ids = itertools.count()
        self._pipeline = None
        self._thread: threading.Thread | None = None
        self.served: Path | None = None  # the GGUF file of the weights being served
        self._warned_regex = False
        self._torch_lock = threading.Lock()
        self.serve(model)

    @staticmethod
    def check_args(key: str, *, cache_gb: float = 2.0, threads: int | None = None, **_) -> None:
        """Refuse what cannot run, before any model loads (``validation.check_targets``)."""
        require_openvino()
        if not (isinstance(cache_gb, (int, float)) and cache_gb >= 1):
            raise ValueError(f"{key}.cache_gb must be a number >= 1 (GB of KV cache), got {cache_gb!r}")
        if threads is not None and not (isinstance(threads, int) and threads >= 1):
            raise ValueError(f"{key}.threads must be an integer >= 1 or null, got {threads!r}")

    @staticmethod
    def check_sampling(*, temperature: float, top_p: float) -> None:
        """The settings whose log-probs the pipeline reports raw (see the module docstring)."""
        if (temperature, top_p) != (1.0, 1.0):
            raise ValueError(
                f"engine=openvino reports log-probs of the distribution it samples from, so "
                f"agent.sampling.temperature={temperature} / top_p={top_p} would not give the raw log-probs "
                "the data keeps: set both to 1.0, or use engine=hf"
            )

    def serve(self, model: torch.nn.Module, adapters: Sequence[Path] = ()) -> None:
        """Write ``model``'s weights (unless a file of the same weights is cached) and load them."""
        self.close()
        self.served = gguf_for(model, self.template, self.cache_dir)
        scheduler = self._og.SchedulerConfig()
        scheduler.cache_size = max(1, round(self.cache_gb))
        scheduler.enable_prefix_caching = self.prefix_caching
        properties = dict(EXACT_PROPERTIES)
        if self.threads:
            properties["INFERENCE_NUM_THREADS"] = int(self.threads)
        self._pipeline = self._og.ContinuousBatchingPipeline(str(self.served), scheduler, "CPU", properties)
        self._thread = threading.Thread(target=self._dispatch, name="openvino engine", daemon=True)
        self._thread.start()

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
        prefix_cache=None,  # the pipeline keeps its own
    ) -> list[Sample]:
        if k < 1 or max_new_tokens < 1 or not prompt_ids:
            raise ValueError(f"sample: k={k}, max_new_tokens={max_new_tokens}, {len(prompt_ids)} prompt tokens")
        greedy = temperature == 0
        if not greedy:
            self.check_sampling(temperature=temperature, top_p=top_p)
        seed = None if greedy else request_seed(generator) or 0
        eos = set(eos_token_ids)
        if constraint is not None:
            samples = self._constrained(prompt_ids, 1 if greedy else k, max_new_tokens, eos, seed, constraint)
        else:
            config = self._config(max_new_tokens, eos, seed, k)
            samples = [self._sample(list(o.generated_ids), list(o.generated_log_probs), eos)
                       for o in self._submit(prompt_ids, config).result()]
        return samples * k if greedy else samples  # one greedy completion stands for all k

    def _config(self, max_new_tokens: int, eos: set[int], seed: int | None, k: int = 1, regex: str | None = None):
        config = self._og.GenerationConfig()
        config.max_new_tokens = max_new_tokens
        config.apply_chat_template = False
        config.stop_token_ids = eos
        config.logprobs = 1
        if seed is not None:
            config.do_sample = True
            config.num_return_sequences = k
            config.rng_seed = seed
        if regex is not None:
            config.structured_output_config = self._og.StructuredOutputConfig(regex=regex)
        return config

    def _constrained(self, prompt_ids, n, max_new_tokens, eos, seed, constraint) -> list[Sample]:
        """``n`` samples under ``constraint``'s regex, one request each, settled on the budget rules."""
        def seeded(i: int) -> int | None:  # each request its own seed, all drawn from the caller's one
            return None if seed is None else (seed + i) % 2**31

        if not self._warned_regex:
            self._warned_regex = True
            log.warning(
                "engine=openvino: the COMMAND constraint runs as a regex, which lets the model spell actions in "
                "tokens it never writes; on 50 WebShop goals it scored 0.194 average reward against the HF engine's "
                "0.384 (docs/results.md, 'Engines'). engine=hf keeps the trie."
            )
        regex = constraint.regex()
        first = [self._submit(prompt_ids, self._config(max_new_tokens, eos, seeded(i), regex=regex)) for i in range(n)]
        drafts = [(list(o.generated_ids), list(o.generated_log_probs)) for o in (f.result()[0] for f in first)]
        forced = {}
        for i, (ids, logprobs) in enumerate(drafts):
            keep, force = constraint.settle(ids)
            drafts[i] = (ids[:keep], logprobs[:keep])
            if force:  # continue from the cut with the COMMAND trigger forced, as the token path does
                config = self._config(constraint.forced_chars, eos, seeded(n + i), regex=constraint.regex(forced=True))
                forced[i] = self._submit(list(prompt_ids) + ids[:keep], config)
        for i, future in forced.items():
            more = future.result()[0]
            ids, logprobs = list(more.generated_ids), list(more.generated_log_probs)
            if ids and ids[-1] in eos:  # the regex ended with the command line; the sample ends there, unfinished
                ids, logprobs = ids[:-1], logprobs[:-1]
            drafts[i] = (drafts[i][0] + ids, drafts[i][1] + logprobs)
        return [self._sample(ids, logprobs, eos) for ids, logprobs in drafts]

    def _sample(self, ids: list[int], logprobs: list[float], eos: set[int]) -> Sample:
        finished = bool(ids) and ids[-1] in eos
        return Sample(
            text=self.tokenizer.decode(ids[:-1] if finished else ids, skip_special_tokens=True),
            token_ids=tuple(int(t) for t in ids),
            logprob=float(sum(logprobs)),
            finished=finished,
        )

    def _submit(self, prompt_ids: Sequence[int], config) -> Future:
        """Queue a request for the dispatcher; the future holds the pipeline's outputs."""
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("engine=openvino: the engine is closed (or its dispatcher died; see the log above)")
        future: Future = Future()
        self._requests.put((np.asarray([list(prompt_ids)], dtype=np.int64), config, future))
        return future

    def _dispatch(self) -> None:
        """Own the pipeline: add waiting requests between decode steps, step, deliver."""
        import openvino as ov

        pipeline, running = self._pipeline, {}
        while True:
            for item in self._waiting(block=not running):  # block only when nothing decodes
                if item is _STOP:
                    for future in running.values():
                        future.set_exception(RuntimeError("engine=openvino: closed while the request ran"))
                    return
                ids, config, future = item
                running[pipeline.add_request(next(self._ids), ov.Tensor(ids), config)] = future
            try:
                pipeline.step()
            except Exception as e:  # every waiting caller learns why, instead of waiting forever
                for future in running.values():
                    future.set_exception(e)
                running.clear()
                continue
            for handle in [h for h in running if h.get_status() != self._og.GenerationStatus.RUNNING]:
                future, status = running.pop(handle), handle.get_status()
                if status == self._og.GenerationStatus.FINISHED:
                    future.set_result(handle.read_all())
                else:
                    future.set_exception(RuntimeError(f"engine=openvino: the request ended with {status}"))

    def _waiting(self, *, block: bool) -> list:
        """The requests queued since the last step (waiting for the first when ``block``)."""
        items = [self._requests.get()] if block else []
        while True:
            try:
                items.append(self._requests.get_nowait())
            except queue.Empty:
                return items

    def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` (the critic's torch forwards) one at a time; the pipeline's own
        threads run beside it."""
        with self._torch_lock:
            return fn()

    def close(self) -> None:
        """Stop the dispatcher (requests still running fail) and drop the pipeline."""
        if self._thread is not None and self._thread.is_alive():
            self._requests.put(_STOP)
            self._thread.join()
        self._thread = None
        self._pipeline = None


_STOP = object()  # queued by close()


def gguf_for(model: torch.nn.Module, template: Path, cache_dir: Path) -> Path:
    """The F16 GGUF of ``model``'s current weights, written once per distinct weights."""
    digest = hashlib.blake2b(digest_size=12)
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().to(torch.float32).contiguous().cpu().numpy().tobytes())
    path = cache_dir / "gguf" / f"{digest.hexdigest()}.f16.gguf"
    if not path.exists():
        started = time.perf_counter()
        write_gguf(model, template, path, quantization="F16")
        log.info("engine=openvino: wrote the policy's weights to %s in %.1fs", path, time.perf_counter() - started)
    return path
