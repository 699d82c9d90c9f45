"""The iterative loop of Agent Q (Algorithm 1, docs/method.md §5)::

    iteration 0: evaluate the base policy
    for i in 1..N:
        pi_ref <- pi_i                        (the adapter of i-1 is merged)
        MCTS on B training tasks -> trees and trajectories in the buffer
        step pairs with theta
        optimise pi_i with the objective against pi_ref (fresh LoRA adapter)
        evaluate on held-out tasks: zero-shot and with search

Every phase writes its results before the next starts, so a run killed at any
point and started again with ``resume=<run dir>`` continues where it stopped:
collected tasks are skipped, training resumes from its last checkpoint,
evaluated tasks are skipped. ``summary.json`` is rebuilt from those files.
"""

from __future__ import annotations

import functools
import logging
import signal

import numpy as np
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from agentq import oracle, tracking
from agentq.bookkeeping import RunBook, locate
from agentq.collection import frozen_base, search_task
from agentq.components import Components, Weights, build
from agentq.console import phase
from agentq.data.diagnostics import search_diagnostics
from agentq.eval_modes import evaluate_iteration
from agentq.lanes import lanes
from agentq.layout import write_json
from agentq.on_ray import RayPool
from agentq.parallel import for_each_task
from agentq.report.collect import load_study
from agentq.report.tables import runs_table
from agentq.training.fit import fit, merge_adapter

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> dict:
    """Run (or resume) the loop; returns the summary written to ``summary.json``."""
    cfg, layout, resuming = locate(cfg)
    parts = build(cfg)  # before config.yaml: a refused config leaves nothing to resume
    book = RunBook(cfg, layout, resuming=resuming, env=parts.env)
    status, weights = "failed", None
    pool = RayPool(layout, parts.parallel) if parts.parallel.get("backend") == "ray" else None
    try:
        model, tokenizer = parts.model.load()
        weights = Weights(model, tokenizer, engine=parts.engine(model, tokenizer))
        weights.frozen_base = frozen_base(parts, weights.critic)
        train_ids, test_ids = parts.task_ids()
        oracle.write_oracle(cfg, parts.env, test_ids, layout.oracle)  # the scripted oracle on the same goals and budget
        for iteration in range(parts.iterations + 1):
            if iteration > 0:
                weights.train(improve(parts, book, weights, iteration, train_ids, pool), layout.adapters(iteration))
                tracking.log_iteration(book.loggers, book.buffer, iteration)
            if iteration > 0 or parts.eval.base:
                remote = functools.partial(pool.evaluate, iteration) if pool and parts.parallel.get("evaluate") else None
                evaluate_iteration(parts, book, weights, iteration, test_ids, remote=remote)
            summary = book.write_summary()
        status = "success"
        log.info("result (%s):\n%s", layout.root, runs_table(load_study(layout.root)).to_markdown())
        return summary
    except SIGTERMException as stopped:  # Lightning's is a SystemExit(0): a killed run would exit as a finished one
        raise SystemExit(128 + signal.SIGTERM) from stopped
    finally:
        if pool is not None:
            pool.close()
        if weights is not None:
            weights.engine.close()
        parts.close()
        book.close(status)


def improve(parts: Components, book: RunBook, weights: Weights, iteration: int, train_ids, pool: RayPool | None) -> torch.nn.Module:
    """Collect, build pairs, train: returns pi_{i+1} (adapter merged)."""
    layout, buffer = book.layout, book.buffer
    model, tokenizer = weights.policy, weights.tokenizer
    if layout.train_metrics(iteration).exists():  # finished before a restart: replay its adapter
        adapter = layout.adapter(iteration)
        return merge_adapter(model, adapter) if adapter.exists() else model

    policy = parts.policy(model, tokenizer, engine=weights.engine)
    model.eval()
    with book.phase(iteration, "collect"):
        tasks = collect(parts, book, weights, policy, iteration, train_ids, pool)
        searches = buffer.searches(iteration)
        if not buffer.has_examples(iteration):
            buffer.write_examples(iteration, build_examples(parts, searches, policy, iteration))
    examples = buffer.examples(iteration)
    write_json(layout.search_diagnostics(iteration), search_diagnostics(searches, examples))  # summary, W&B, report
    log.info("iteration %d: %d training examples from %d tasks", iteration, len(examples), len(tasks))
    if not examples:
        write_json(layout.train_metrics(iteration), {"loss": None, "skipped": "no training examples"})
        return model
    # Training computes alone: beside another thread's OpenMP team it ran 1.2x slower
    # (benchmarks/bench_idle_thread.py). The engine gives its team back when idle; closing it
    # also ends its thread, which starts again at the next request or serve().
    weights.engine.close()
    # The rate is of batches trained (every epoch's): per example it read 1/epochs of the throughput.
    name = f"train (iter {iteration}, {len(examples)} examples)"
    with book.phase(iteration, "train"), phase(name, unit="batches", bar=False) as advance:
        peft_model, metrics = fit(
            model, tokenizer, examples, objective=parts.objective, out_dir=layout.iteration(iteration),
            loggers=book.loggers, seed=parts.seed + iteration, on_batch=advance, **parts.training.fit_kwargs(),
        )  # fmt: skip
    write_json(layout.train_metrics(iteration), metrics)
    return peft_model.merge_and_unload()


def build_examples(parts: Components, searches, policy, iteration: int) -> list:
    """The objective's training examples from this iteration's search results."""
    examples = []
    with torch.no_grad(), phase(f"examples (iter {iteration})", total=len(searches), unit="trees") as advance:
        for result in searches:
            examples += parts.pair_builder.from_search(result, policy)
            advance(1)
    select = getattr(parts.pair_builder, "select", None)  # a selection across trees (StepPairBuilder)
    return examples if select is None else select(searches, examples)


def collect(parts: Components, book: RunBook, weights: Weights, policy, iteration: int, train_ids, pool: RayPool | None) -> list:
    """Search the B training tasks drawn for this iteration (returned), ``collect.concurrency``
    at a time or on the Ray ``pool``; each result is written as it finishes."""
    rng = np.random.default_rng([parts.seed, iteration])
    count = min(parts.collect_num_tasks, len(train_ids))
    tasks = [train_ids[i] for i in rng.choice(len(train_ids), size=count, replace=False)]

    todo = [t for t in tasks if not book.buffer.has_search(iteration, t)]
    source = parts.collect_trees_from
    if source is not None and iteration == 1:  # the same pi_0 searched them (validation)
        copied = {t for t in todo if book.buffer.copy_search(iteration, t, source)}
        todo = [t for t in todo if t not in copied]
        log.info("collect (iter %d): %d trees taken from %s, %d to search", iteration, len(copied), source.root, len(todo))
    description = f"collect (iter {iteration})"
    if pool is not None:
        pool.search(iteration, todo, description=description)
        return tasks
    searches = [
        functools.partial(search_task, parts, book.buffer, iteration, lane)
        for lane in lanes(parts, weights, policy, min(parts.collect_concurrency, len(todo)))
    ]
    for_each_task(searches, todo, workers=parts.workers, description=description, unit="searches")
    return tasks
