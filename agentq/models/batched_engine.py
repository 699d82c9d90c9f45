"""The HF engine with decode steps shared by concurrent searches (``engine=hf_batched``).

A composite action is ~40 new tokens, each a full pass over the weights, and
a decode step for many rows costs far less than one step per row
(:mod:`agentq.models.ragged`). With
``collect.concurrency`` / ``eval.concurrency`` N > 1, N searches run in threads
(:mod:`agentq.parallel`); their ``sample`` calls land here, and one engine
thread runs every model call:

- each request is :func:`agentq.models.sampling.decode`, the same program as
  :func:`~agentq.models.sampling.sample_k` (the COMMAND constraint, the prompt
  cache, jump-forward, the log-probs), stepped by this thread;
- a request's prefill runs alone through the model's own forward, exactly as
  ``engine=hf`` runs it;
- the decode steps of all requests in flight (one token per row, or a
  jump-forward run of forced tokens) run as one
  :func:`agentq.models.ragged.decode_step`, in blocks of ``rows`` token rows padded to
  exactly ``rows``: a matrix product's rounding depends on its number of rows,
  not (measured on MKL, tests/test_batched_engine.py) on which rows sit beside
  one, so a request's tokens do not depend on what else was in flight.

The critic's and the judge's forward passes run on this thread too
(:meth:`run`): one thread computes, so torch's threads never fight over the
cores (two processes or threads that each use all cores slow each other
down many times, docs/scaling.md). For the same reason only the thread that
computes holds an OpenMP team: a thread handing work to this one (``serve``, a
request) first gives its team back, and this one gives its own back whenever it
waits for work (:mod:`agentq.models.openmp`).

Not exact to the sequential ``engine=hf``: its steps have A rows where this one
has ``rows``, so the two differ in float rounding (and a near-tie may draw
another token). Both compute in the trainer's fp32 with the same modules, so
the log-probs are the trainer's to float noise and the logged DPO reference
stays valid (``exact``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentq.models.engine import HFEngine
from agentq.models.openmp import release_openmp_team
from agentq.models.prefix_cache import PrefixCache
from agentq.models.ragged import check_supported, decode_step
from agentq.models.sampling import DecodeConstraint, Prefill, Sample, Step, decode


@dataclass
class _Request:
    program: Any  # the decode generator
    result: Future
    call: Prefill | Step | None = None  # the model call it waits for


class BatchedHFEngine(HFEngine):
    """:func:`~agentq.models.sampling.decode` programs of concurrent searches, their
    decode steps shared (module docstring).

    Args:
        model, tokenizer, dtype: as :class:`~agentq.models.engine.HFEngine`.
        rows: rows of every shared decode step (requests beyond it take more
            steps of ``rows``); a request's numerics depend on it, so it is part
            of a run's configuration.
    """

    batches = True

    @staticmethod
    def check_args(key: str, *, rows: int = 16, **_) -> None:
        """Refuse what cannot run, before any model loads (``validation.check_targets``)."""
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"{key}.rows must be an integer >= 1 (rows of a shared decode step), got {rows!r}")

    def __init__(self, model: torch.nn.Module, tokenizer, dtype: str = "float32", rows: int = 16) -> None:
        self.check_args("engine", rows=rows)
        self.rows = rows
        self.profile = Profile()
        self._inbox: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        super().__init__(model, tokenizer, dtype)

    def serve(self, model: torch.nn.Module, adapters: Sequence[Path] = ()) -> None:
        check_supported(model)
        super().serve(model)
        release_openmp_team()  # the caller (loading, training) is done; this engine's thread computes next

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
        program = decode(
            prompt_ids, k, tokenizer=self.tokenizer, max_new_tokens=max_new_tokens, temperature=temperature,
            top_p=top_p, eos_token_ids=eos_token_ids, generator=generator, constraint=constraint,
            prefix_cache=prefix_cache, jump_forward=True, device=self.model.get_input_embeddings().weight.device,
        )  # fmt: skip
        return self._submit(program).result()

    def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the engine's thread, between its steps (the critic's forwards)."""
        if threading.current_thread() is self._thread:
            return fn()
        return self._submit(fn).result()

    def close(self) -> None:
        if self._thread is not None:
            self._stopping = True
            self._inbox.put(None)
            self._thread.join()
            self._thread = None

    # -- the engine thread --------------------------------------------------------
    def _submit(self, work) -> Future:
        future: Future = Future()
        release_openmp_team()  # the caller waits while this engine's thread computes
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="hf_batched engine", daemon=True)
            self._thread.start()
        self._inbox.put((work, future))
        return future

    @torch.no_grad()
    def _loop(self) -> None:
        active: list[_Request] = []
        while True:
            # Wait only when nothing is decoding; otherwise take what has arrived.
            if not active:
                release_openmp_team()  # idle, its workers would slow whoever computes meanwhile
            items = [self._inbox.get()] if not active else []
            while True:
                try:
                    items.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            for item in items:
                if item is None:
                    if self._stopping:
                        for request in active:
                            request.result.set_exception(RuntimeError("engine closed"))
                        return
                    continue
                work, future = item
                if callable(work):
                    with self.profile.timing("critic"):
                        _settle(future, work)
                    continue
                request = _Request(work, future)
                self._advance(request, None)
                if not future.done():
                    active.append(request)
            active = self._step([r for r in active if not r.result.done()])

    def _advance(self, request: _Request, reply) -> None:
        """Send ``reply`` to the program; run the prefills it asks for until it asks
        for a step (kept for the shared step) or returns."""
        while True:
            try:
                call = request.program.send(reply)
            except StopIteration as finished:
                request.result.set_result(finished.value)
                return
            except BaseException as e:  # noqa: BLE001  (handed to the caller's thread)
                request.result.set_exception(e)
                return
            if isinstance(call, Step):
                request.call = call  # kept for the shared step
                return
            try:
                reply = self._prefill(call)
            except BaseException as e:  # noqa: BLE001
                request.result.set_exception(e)
                return

    def _prefill(self, call: Prefill):
        """A prefill, through the model's own forward."""
        cache = call.prefix_cache
        before = cache.computed_tokens if cache else 0
        with self.profile.timing("prefill"):
            reply = call.run(self.model)
        # The prompt tokens the model ran: those the prompt cache did not hold.
        self.profile.add_tokens("prefill", cache.computed_tokens - before if cache else len(call.prompt_ids))
        return reply

    def _step(self, active: list[_Request]) -> list[_Request]:
        """One shared step for every request waiting on a step."""
        if not active:
            return active
        try:
            with self.profile.timing("shared_steps"):
                logits = decode_step(self.model, [(r.call.cache, r.call.ids) for r in active], rows=self.rows)
            self.profile.add_step(requests=len(active), rows=sum(r.call.ids.numel() for r in active))
        except BaseException as e:  # noqa: BLE001  (every request in the step fails with it)
            for request in active:
                request.result.set_exception(e)
            return []
        for request, out in zip(active, logits, strict=True):
            self._advance(request, out)  # (A, T, V), as the model's forward gives
        return [r for r in active if not r.result.done()]


@dataclass
class Profile:
    """Where the engine thread's time went (seconds by kind of call), the tokens each
    kind ran through the weights, and how full its shared steps were: what a benchmark
    reports beside a rate."""

    seconds: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    step_requests: int = 0

    @contextmanager
    def timing(self, kind: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[kind] = self.seconds.get(kind, 0.0) + time.perf_counter() - started

    def add_tokens(self, kind: str, tokens: int) -> None:
        self.tokens[kind] = self.tokens.get(kind, 0) + tokens

    def add_step(self, *, requests: int, rows: int) -> None:
        self.steps += 1
        self.step_requests += requests
        self.add_tokens("shared_steps", rows)

    def summary(self) -> dict:
        steps = max(self.steps, 1)
        return {"seconds": dict(self.seconds), "tokens": dict(self.tokens), "steps": self.steps,
                "requests_per_step": self.step_requests / steps, "rows_per_step": self.tokens.get("shared_steps", 0) / steps}  # fmt: skip


def _settle(future: Future, fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except BaseException as e:  # noqa: BLE001
        future.set_exception(e)
