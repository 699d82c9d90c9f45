"""One iteration's evaluation: every mode of the plan on the held-out tasks.

The modes (:mod:`agentq.modes`) run in a fixed order, zero-shot first, because
the recovery test continues iteration 0's failed zero-shot episodes. Each
mode's episodes and metrics land in the run directory as they finish.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

from agentq import evaluate as ev
from agentq.bookkeeping import RunBook
from agentq.components import Components, Weights
from agentq.intervals import wilson_interval
from agentq.lanes import Lane, lanes
from agentq.layout import RunLayout, read_json, write_json
from agentq.modes import COMMITTED, RECOVERY, VERIFIER, ZERO_SHOT
from agentq.records.trajectory import Step, Trajectory

log = logging.getLogger(__name__)


Run = Callable[[str, list[Any]], None]  # (mode, task ids): their episodes written elsewhere (on Ray)


def evaluate_iteration(
    parts: Components, book: RunBook, weights: Weights, iteration: int, test_ids, remote: Run | None = None
) -> None:
    """Evaluate pi_iteration (``weights.policy``, decoded by ``weights.engine``) in each
    configured mode, ``eval.concurrency`` episodes at a time, or by ``remote``; the
    critic and the committed mode's judge read ``weights.critic``."""
    weights.policy.eval()
    policy = parts.policy(weights.policy, weights.tokenizer, engine=weights.engine)
    lanes_ = lanes(parts, weights, policy, 1 if remote else parts.eval.concurrency)
    for mode, episode, task_ids in mode_episodes(parts, book.layout, weights, test_ids):
        with book.phase(iteration, f"eval_{mode}"):
            if remote is not None:
                remote(mode, [t for t in task_ids if not book.layout.episode(iteration, mode, t).exists()])
            metrics = ev.evaluate(
                [episode(lane) for lane in lanes_], task_ids, layout=book.layout, iteration=iteration,
                mode=mode, seed=parts.seed, workers=parts.workers, weights=weights.engine.weights_name,
            )  # fmt: skip
        write_json(book.layout.eval_metrics(iteration, mode), metrics)
        book.log_metrics(f"eval/{mode}", metrics, iteration)
        log.info("iteration %d %s: %s", iteration, mode, headline(metrics))


def mode_episodes(
    parts: Components, layout: RunLayout, weights: Weights, test_ids
) -> Iterator[tuple[str, Callable[[Lane], ev.Episode], list[Any]]]:
    """The plan's modes in the order they run: (mode, a lane's episode, the mode's tasks).
    A generator: the recovery mode reads the zero-shot episodes written before it is drawn."""
    plan, dense = parts.eval, parts.dense_reward
    search_ids = list(test_ids[: plan.search_num_tasks])  # a search costs more than a greedy episode
    if plan.zero_shot:
        yield (ZERO_SHOT, lambda lane: ev.zero_shot(lane.env, lane.policy, max_steps=plan.max_steps, dense_reward=dense), list(test_ids))
    if COMMITTED in plan.search_modes:  # headline: the agent acts with search, blind to the env's reward
        committed_search = dataclasses.replace(
            parts.search, num_simulations=plan.committed.num_simulations, max_depth=plan.committed.max_depth
        )

        def committed(lane: Lane) -> ev.Episode:
            judge = plan.committed.judge(lane.critic_model, weights.tokenizer)
            return ev.committed(lane.env, lane.policy, lane.critic, judge, committed_search, max_steps=plan.max_steps, dense_reward=dense)

        yield COMMITTED, committed, search_ids
    if VERIFIER in plan.search_modes:  # best rollout by the env's reward: an upper bound
        # The episode budget of every other row (and of the oracle's), not the collection depth.
        search = dataclasses.replace(parts.search, max_depth=plan.max_steps)
        if plan.num_simulations:  # an inference budget of its own
            search = dataclasses.replace(search, num_simulations=plan.num_simulations)
        yield VERIFIER, lambda lane: ev.verifier(lane.env, lane.policy, lane.critic, search), search_ids
    if plan.recovery:  # after zero_shot: iteration 0's failures are the prefixes
        prefixes = recovery_prefixes(RunLayout(plan.recovery_from) if plan.recovery_from else layout, test_ids, plan.recovery_fraction)
        yield (RECOVERY, lambda lane: ev.recovery(lane.env, lane.policy, prefixes, max_steps=plan.max_steps, dense_reward=dense), list(prefixes))


def headline(metrics: dict[str, float]) -> str:
    """Success with its Wilson 95% interval and the average reward, in one short line."""
    n = int(metrics.get("num_tasks", 0))
    low, high = wilson_interval(round(metrics["success_rate"] * n), n) if n else (0.0, 1.0)
    return f"success {metrics['success_rate']:.3f} [{low:.2f}, {high:.2f}] on {n} tasks, avg reward {metrics['avg_reward']:.3f}"


def recovery_prefixes(source: RunLayout, test_ids, fraction: float) -> dict[Any, list[Step]]:
    """Agent-R's recovery test: failed prefixes of the base policy's greedy episodes
    (iteration 0 of this run, or of ``eval.recovery_from``, so that several runs
    are tested on the same prefixes)."""
    paths = [source.episode(0, ZERO_SHOT, task_id) for task_id in test_ids]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(
            f"eval.recovery needs the base policy's zero-shot episodes, missing e.g. {missing[0]}: "
            "keep eval.base=true and eval.zero_shot=true, or point eval.recovery_from at a run that has them"
        )
    trajectories = [Trajectory.from_dict(read_json(p)["trajectory"]) for p in paths]
    prefixes, skipped = ev.failed_prefixes(trajectories, fraction)
    log.info("recovery: %d failed prefixes, %d tasks without a failure skipped", len(prefixes), len(skipped))
    return prefixes
