"""Collection on Ray (``parallel=ray``): one iteration's searches spread over Ray actors.

Each actor rebuilds the run in its own process from what the run directory holds:
the saved config (``config.yaml``) and the adapters trained so far, merged into the
base in order (:func:`agentq.collection.trained_policy`), exactly as a resumed run
rebuilds pi_i. It then searches the tasks it is handed one at a time with
:func:`agentq.collection.search_task`, the function the loop's own process uses, so a
task's tree depends on its seed alone, not on the actor or on how many there are.
Each tree is written to the run directory as it finishes (atomically, as without
Ray), so a killed run resumes from the trees on disk.

``parallel.address: null`` starts a local Ray cluster for the phase and stops it
after; with an address (``auto``, ``host:port``) the actors join a cluster started
with ``ray start --head``, and the run directory must be on a filesystem every node
mounts at the same path. Training and evaluation stay in the driver's process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from agentq.bookkeeping import seed_everything
from agentq.collection import frozen_base, search_task, trained_policy
from agentq.components import Weights, build
from agentq.console import phase
from agentq.data.buffer import ReplayBuffer
from agentq.lanes import lanes
from agentq.layout import RunLayout

log = logging.getLogger(__name__)


class SearchWorker:
    """A Ray actor: the run's parts and pi_``iteration``'s weights, rebuilt from the run directory."""

    def __init__(self, run_dir: str, iteration: int, threads: int) -> None:
        torch.set_num_threads(threads)
        layout = RunLayout(Path(run_dir))
        cfg = OmegaConf.load(layout.config)
        self.parts = parts = build(cfg)
        seed_everything(cfg.seed, parts.env)
        model, tokenizer = parts.model.load()
        self.weights = weights = Weights(model, tokenizer, engine=parts.engine(model, tokenizer))
        weights.frozen_base = frozen_base(parts, weights.critic)
        if iteration > 1:
            weights.train(trained_policy(model, layout, iteration - 1))
        weights.policy.eval()
        policy = parts.policy(weights.policy, tokenizer, engine=weights.engine)
        [self.lane] = lanes(parts, weights, policy, 1)
        self.buffer, self.iteration = ReplayBuffer(layout), iteration

    def search(self, task_id: Any) -> Any:
        search_task(self.parts, self.buffer, self.iteration, self.lane, task_id)
        return task_id

    def close(self) -> None:
        self.weights.engine.close()
        self.parts.close()


def search_on_ray(layout: RunLayout, iteration: int, task_ids: Sequence[Any], parallel: dict, *, description: str) -> None:
    """Search ``task_ids`` on ``parallel["workers"]`` Ray actors, the next task to the
    first actor free; raises RuntimeError if one failed (the trees others finished are kept)."""
    if not task_ids:
        return
    import ray  # an optional dependency: validation.check_parallel refused parallel=ray without it
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report to anywhere
    workers, cpus = min(parallel["workers"], len(task_ids)), parallel["cpus_per_worker"]
    started = not ray.is_initialized()
    if started:
        local = parallel.get("address") is None
        ray.init(
            address=parallel.get("address"), include_dashboard=False, logging_level=logging.WARNING,
            **({"num_cpus": workers * cpus, "object_store_memory": 128 * 2**20} if local else {}),
        )  # fmt: skip
    Worker = ray.remote(num_cpus=cpus, num_gpus=parallel.get("gpus_per_worker", 0))(SearchWorker)
    actors = [Worker.remote(str(layout.root), iteration, cpus) for _ in range(workers)]
    todo = list(task_ids)
    try:
        running = {actor.search.remote(todo.pop(0)): actor for actor in actors if todo}
        with phase(description, total=len(task_ids), unit="searches") as advance:
            while running:
                [ready], _ = ray.wait(list(running), num_returns=1)
                actor = running.pop(ready)
                ray.get(ready)  # the task's exception, if it raised
                advance(1)
                if todo:
                    running[actor.search.remote(todo.pop(0))] = actor
    except ray.exceptions.RayError as e:
        raise RuntimeError(
            f"{description}: a Ray worker failed ({e}); finished tasks are on disk: resume the run to redo only the rest"
        ) from e
    finally:
        try:
            ray.get([actor.close.remote() for actor in actors], timeout=60)
        except ray.exceptions.RayError:
            log.warning("%s: a Ray worker did not close cleanly", description)
        for actor in actors:
            ray.kill(actor)
        if started:
            ray.shutdown()
