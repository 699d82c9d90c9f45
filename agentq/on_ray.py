"""Collection and evaluation on Ray (``parallel=ray``): one phase's searches or
episodes spread over Ray actors.

Each actor rebuilds the run in its own process from what the run directory holds:
the saved config (``config.yaml``) and the adapters trained so far, merged into the
base in order (:func:`agentq.collection.trained_policy`), exactly as a resumed run
rebuilds pi_i. It then searches the tasks it is handed one at a time with
:func:`agentq.collection.search_task`, or plays their episodes with
:func:`agentq.evaluate.evaluate_task` in a mode of :func:`agentq.eval_modes.mode_episodes`:
the functions the loop's own process uses, so a task's tree or episode depends on
its seed alone, not on the actor or on how many there are. Each is written to the
run directory as it finishes (atomically, as without Ray), so a killed run resumes
from the files on disk.

``parallel.address: null`` starts a local Ray cluster at the run's first phase on
Ray and stops it at the run's end (:class:`RayPool`); with an address (``auto``,
``host:port``) the actors join a cluster started with ``ray start --head``, and the
run directory must be on a filesystem every node mounts at the same path. Training stays in the driver's process, and so does
evaluation with ``parallel.evaluate=false``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from agentq import evaluate as ev
from agentq.bookkeeping import seed_everything
from agentq.collection import frozen_base, search_task, trained_policy
from agentq.components import Weights, build
from agentq.console import phase
from agentq.data.buffer import ReplayBuffer
from agentq.eval_modes import mode_episodes
from agentq.lanes import lanes
from agentq.layout import RunLayout

log = logging.getLogger(__name__)


class Worker:
    """A Ray actor: the run's parts and pi_``policy_iteration``'s weights, rebuilt from the run directory."""

    def __init__(self, run_dir: str, policy_iteration: int, threads: int) -> None:
        torch.set_num_threads(threads)
        self.layout = layout = RunLayout(Path(run_dir))
        cfg = OmegaConf.load(layout.config)
        self.parts = parts = build(cfg)
        seed_everything(cfg.seed, parts.env)
        model, tokenizer = parts.model.load()
        self.weights = weights = Weights(model, tokenizer, engine=parts.engine(model, tokenizer))
        weights.frozen_base = frozen_base(parts, weights.critic)
        if policy_iteration > 0:
            weights.train(trained_policy(model, layout, policy_iteration), layout.adapters(policy_iteration))
        weights.policy.eval()
        policy = parts.policy(weights.policy, tokenizer, engine=weights.engine)
        [self.lane] = lanes(parts, weights, policy, 1)
        self.buffer = ReplayBuffer(layout)
        self.episodes: dict[str, Any] = {}  # mode -> this lane's episode function

    def search(self, iteration: int, task_id: Any) -> Any:
        search_task(self.parts, self.buffer, iteration, self.lane, task_id)
        return task_id

    def evaluate(self, iteration: int, mode: str, task_id: Any) -> Any:
        if mode not in self.episodes:  # drawn no further than ``mode``: recovery reads files written before it
            _, test_ids = self.parts.task_ids()
            make = next(make for m, make, _ in mode_episodes(self.parts, self.layout, self.weights, test_ids) if m == mode)
            self.episodes[mode] = make(self.lane)
        ev.evaluate_task(
            self.episodes[mode], task_id, layout=self.layout, iteration=iteration, mode=mode,
            seed=self.parts.seed, weights=self.weights.engine.weights_name,
        )  # fmt: skip
        return task_id

    def close(self) -> int:
        """Release the engine and the envs; returns this actor's process id."""
        self.weights.engine.close()
        self.parts.close()
        return os.getpid()


class RayPool:
    """The run's Ray actors: the cluster started (or joined) once per run, the actors
    holding pi_j kept while consecutive phases use the same policy (the evaluation
    modes of iteration j, then the collection of j + 1) and stopped before training."""

    def __init__(self, layout: RunLayout, parallel: dict) -> None:
        self.layout, self.parallel = layout, parallel
        self.actors: list[Any] = []
        self.policy_iteration: int | None = None
        self.started = False  # this pool started the cluster (and stops it)

    def search(self, iteration: int, task_ids: Sequence[Any], *, description: str) -> None:
        """Search ``task_ids`` with pi_{iteration - 1} (the trees of ``iteration``'s collection)."""
        calls = [("search", (iteration, task_id)) for task_id in task_ids]
        self.run(iteration - 1, calls, description=description, unit="searches")
        self.stop_actors()  # training comes next, then another policy: their memory (and GPUs) go back

    def evaluate(self, iteration: int, mode: str, task_ids: Sequence[Any]) -> None:
        """Evaluate pi_``iteration`` in ``mode`` on ``task_ids``: each episode's file written by an actor."""
        calls = [("evaluate", (iteration, mode, task_id)) for task_id in task_ids]
        self.run(iteration, calls, description=f"eval {mode} (iter {iteration})", unit="episodes")

    def run(self, policy_iteration: int, calls: Sequence[tuple[str, tuple]], *, description: str, unit: str) -> None:
        """``calls`` (a :class:`Worker` method's name and its arguments) on actors holding
        pi_``policy_iteration``, the next call to the first actor free; raises RuntimeError
        if one failed (what the others wrote is kept)."""
        if not calls:
            return
        import ray  # an optional dependency: validation.check_parallel refused parallel=ray without it

        self.start_actors(policy_iteration, min(self.parallel["workers"], len(calls)))
        todo = list(calls)

        def submit(actor):
            method, args = todo.pop(0)
            return getattr(actor, method).remote(*args)

        try:
            running = {submit(actor): actor for actor in self.actors if todo}
            with phase(description, total=len(calls), unit=unit) as advance:
                while running:
                    [ready], _ = ray.wait(list(running), num_returns=1)
                    actor = running.pop(ready)
                    ray.get(ready)  # the call's exception, if it raised
                    advance(1)
                    if todo:
                        running[submit(actor)] = actor
        except ray.exceptions.RayError as e:
            self.close()
            raise RuntimeError(
                f"{description}: a Ray worker failed ({e}); finished tasks are on disk: resume the run to redo only the rest"
            ) from e

    def start_actors(self, policy_iteration: int, count: int) -> None:
        """At least ``count`` actors holding pi_``policy_iteration`` (the cluster first, once)."""
        import ray

        if not ray.is_initialized():
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report to anywhere
            local = self.parallel.get("address") is None
            resources = self.parallel["workers"] * self.parallel["cpus_per_worker"]
            ray.init(
                address=self.parallel.get("address"), include_dashboard=False, logging_level=logging.WARNING,
                **({"num_cpus": resources, "object_store_memory": 128 * 2**20} if local else {}),
            )  # fmt: skip
            self.started = True
        if policy_iteration != self.policy_iteration:
            self.stop_actors()
            self.policy_iteration = policy_iteration
        cpus = self.parallel["cpus_per_worker"]
        Actor = ray.remote(num_cpus=cpus, num_gpus=self.parallel.get("gpus_per_worker", 0))(Worker)
        while len(self.actors) < count:
            self.actors.append(Actor.remote(str(self.layout.root), policy_iteration, cpus))

    def stop_actors(self) -> None:
        if not self.actors:
            return
        import ray

        try:
            pids = ray.get([actor.close.remote() for actor in self.actors], timeout=60)
        except ray.exceptions.RayError:
            log.warning("a Ray worker did not close cleanly")
            pids = []
        for actor in self.actors:
            ray.kill(actor)
        self.actors, self.policy_iteration = [], None
        if self.parallel.get("address") is None:  # a local cluster: the pids are this machine's
            wait_for_exit(pids, timeout=60)

    def close(self) -> None:
        """Stop the actors, and the cluster if this pool started it."""
        if not self.actors and not self.started:
            return
        import ray

        self.stop_actors()
        if self.started:
            ray.shutdown()
            self.started = False


def wait_for_exit(pids: Sequence[int], *, timeout: float) -> None:
    """Return once every process in ``pids`` has ended (``ray.kill`` only asks), so
    what follows a phase (training, the run's end) gets the actors' memory back;
    warns after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while (alive := [pid for pid in pids if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive:
        log.warning("Ray workers %s still running %.0f s after they were stopped", alive, timeout)


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # ended (or its pid now someone else's)
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # it ended just now, or there is no /proc (macOS: os.kill found it)
        return not Path("/proc").is_dir()
    return state != "Z"
