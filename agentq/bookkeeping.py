"""What a run records about itself beside its results: the config it ran with,
the code and package versions, seeds, loggers, wall time per phase and the
summary rebuilt from the files each phase wrote (so it survives restarts).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import platform
import random
import resource
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from hydra.utils import instantiate
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig, OmegaConf

from agentq import oracle
from agentq.checks import require_int
from agentq.data.buffer import ReplayBuffer
from agentq.layout import RunLayout, read_json, write_json
from agentq.models.loading import cpu_has
from agentq.modes import MODES, seconds_per_success

log = logging.getLogger(__name__)
# The packages that decide the numbers, recorded with every (re)start.
PACKAGES = ("torch", "transformers", "peft", "lightning", "hydra-core", "gymnasium", "trl", "wandb", "openvino-genai")


def locate(cfg: DictConfig) -> tuple[DictConfig, RunLayout, bool]:
    """(the config to run, where, resuming): ``resume=<run dir>`` runs that run's saved config,
    and ``extend_to=N`` with it runs that config to N iterations (a finished run goes on)."""
    extend_to = cfg.get("extend_to")
    if not cfg.get("resume"):
        if extend_to is not None:
            raise ValueError(f"extend_to={extend_to!r} continues a saved run: give it with resume=<run dir>")
        return cfg, RunLayout(Path(cfg.paths.run_dir)), False
    layout = RunLayout(Path(cfg.resume))
    saved = moved(OmegaConf.load(layout.config), layout.root)
    if extend_to is not None:
        # Iteration i reads nothing of the total (its goals, seeds and pi_ref come from i), so
        # the extended run is the run that had asked for N iterations from the start.
        require_int("extend_to", extend_to, int(saved.iterations))
        saved.iterations = int(extend_to)
    log.info("resuming %s (%d iterations)", layout.root, saved.iterations)
    return saved, layout, True


def moved(saved: DictConfig, root: Path) -> DictConfig:
    """``saved`` with its paths into the run folder pointed at ``root``, where the folder is now:
    a copied run (a second arm from the same iterations, an extension) logs into itself."""
    old = str(OmegaConf.select(saved, "paths.run_dir", default=root))
    if Path(old).resolve() == root.resolve():
        return saved

    def repoint(value):
        if isinstance(value, dict):
            return {k: repoint(v) for k, v in value.items()}
        if isinstance(value, list):
            return [repoint(v) for v in value]
        if isinstance(value, str) and (value == old or value.startswith(f"{old}/")):
            return f"{root}{value[len(old) :]}"
        return value

    log.info("the run was saved in %s: its paths now lead to %s", old, root)
    return OmegaConf.create(repoint(OmegaConf.to_container(saved)))


class RunBook:
    """The run's files and loggers, opened once the config has been accepted."""

    def __init__(self, cfg: DictConfig, layout: RunLayout, *, resuming: bool, env: gym.Env) -> None:
        if not resuming:
            layout.root.mkdir(parents=True, exist_ok=True)
            layout.config.write_text(OmegaConf.to_yaml(cfg, resolve=True))
        else:
            if OmegaConf.load(layout.config) != cfg:  # extended or moved (locate): the record follows
                layout.config.write_text(OmegaConf.to_yaml(cfg, resolve=True))
            if removed := layout.remove_partial_writes():
                log.info("removed %d file(s) the killed run had not finished writing", removed)
        if cfg.get("threads"):
            torch.set_num_threads(int(cfg.threads))
        seed_everything(cfg.seed, env)
        record_run_info(layout, cfg.seed)
        self.layout, self.iterations = layout, cfg.iterations
        self.decoding = decoding(cfg)
        self.buffer = ReplayBuffer(layout)
        self.loggers = make_loggers(cfg, resuming=resuming)
        self.started = time.monotonic()
        self.previous_wall = float(read_json(layout.summary).get("wall_seconds", 0.0)) if layout.summary.exists() else 0.0

    @contextmanager
    def phase(self, iteration: int, name: str):
        """Add the wall time of a phase to ``seconds.json`` (a resumed phase adds to what
        the killed run recorded; time spent in the killed attempt is lost), record the
        process's peak resident memory so far in ``memory.json`` (read phase by phase, it
        shows which phase, and which iteration, raised the peak), and rewrite ``summary.json``:
        a run killed mid-iteration then resumes counting its wall time from its last phase,
        not from its last finished iteration."""
        path = self.layout.seconds(iteration)
        started = time.monotonic()
        yield
        seconds = read_json(path) if path.exists() else {}
        seconds[name] = round(seconds.get(name, 0.0) + time.monotonic() - started, 1)
        write_json(path, seconds)
        release_memory()
        peak = peak_rss_gb()
        log.info("%s (iter %d): peak RSS %.2f GB, %.2f GB resident after it", name, iteration, peak, rss_gb())
        path = self.layout.memory(iteration)
        memory = read_json(path) if path.exists() else {}
        memory[name] = max(memory.get(name, 0.0), peak)  # a resumed process starts its peak again
        write_json(path, memory)
        self.write_summary()

    def log_metrics(self, prefix: str, metrics: dict[str, Any], iteration: int) -> None:
        for logger in self.loggers:
            logger.log_metrics({f"{prefix}/{k}": v for k, v in metrics.items()} | {"iteration": iteration}, step=iteration)

    def write_summary(self) -> dict:
        wall = self.previous_wall + time.monotonic() - self.started
        return write_summary(self.layout, self.buffer, self.iterations, wall, decoding=self.decoding)

    def close(self, status: str) -> None:
        for logger in self.loggers:
            logger.finalize(status)
        finish_wandb(exit_code=0 if status == "success" else 1)


def peak_rss_gb() -> float:
    """This process's peak resident set size so far, in GB (10^9 bytes, as ``rss_gb``; getrusage
    counts KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak * (1 if sys.platform == "darwin" else 1024) / 1e9, 2)


def rss_gb() -> float:
    """This process's resident set size now, in GB (Linux; 0.0 where /proc is absent)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        return 0.0
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 1e9, 2)


_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if sys.platform.startswith("linux") else None


def release_memory() -> None:
    """Free what a phase left in reference cycles (Lightning's trainer, module and callbacks
    refer to each other) and hand the heap's free pages back to the kernel (glibc's
    ``malloc_trim``): without it the next phase's working set sat on top of this one's."""
    gc.collect()
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


def decoding(cfg: DictConfig) -> dict[str, str]:
    """Which engine decoded the policy, and where the DPO reference log-probs came from
    (components.check_engine allows logged ones only from the exact engine)."""
    engine = str(OmegaConf.select(cfg, "engine._target_", default="agentq.models.engine.HFEngine"))
    logged = bool(OmegaConf.select(cfg, "trainer.use_logged_reference", default=False))
    dtype = OmegaConf.select(cfg, "engine.dtype", default=None)  # the HF engine's; other engines own their precision
    return {
        "engine": engine.rsplit(".", 1)[-1] + (f" ({dtype})" if dtype not in (None, "float32") else ""),
        "dpo_reference": "logged at sampling (the HF engine, the trainer's numerics)" if logged else "the trainer's forward pass",
    }


def write_summary(
    layout: RunLayout, buffer: ReplayBuffer, iterations: int, wall_seconds: float, *, decoding: dict[str, str] | None = None
) -> dict:
    """``summary.json`` from the files each phase wrote."""
    entries = []
    for iteration in range(iterations + 1):
        entry: dict[str, Any] = {"iteration": iteration, "eval": {}}
        for mode in MODES:
            path = layout.eval_metrics(iteration, mode)
            if path.exists():
                entry["eval"][mode] = read_json(path)
        if iteration > 0:
            entry["num_examples"] = buffer.num_examples(iteration)
            if layout.search_diagnostics(iteration).exists():
                entry["search"] = read_json(layout.search_diagnostics(iteration))
            train = layout.train_metrics(iteration)
            entry["train"] = read_json(train) if train.exists() else None
        if layout.memory(iteration).exists():
            entry["peak_rss_gb"] = read_json(layout.memory(iteration))
        if layout.seconds(iteration).exists():
            entry["seconds"] = read_json(layout.seconds(iteration))
            for mode, metrics in entry["eval"].items():  # wall seconds per success, the cost a user pays
                per_success = seconds_per_success(entry["seconds"].get(f"eval_{mode}"), metrics)
                if per_success is not None:
                    metrics["seconds_per_success"] = round(per_success, 1)
        if entry["eval"] or iteration == 0 or layout.iteration(iteration).exists():
            entries.append(entry)
    summary = {"iterations": entries, "wall_seconds": round(wall_seconds, 1)}
    if decoding is not None:
        summary["decoding"] = decoding
    if layout.oracle.exists():  # eval split, budget, success rate and n of the scripted oracle
        summary["oracle"] = oracle.summary_entry(read_json(layout.oracle))
    write_json(layout.summary, summary)
    return summary


def record_run_info(layout: RunLayout, seed: int) -> None:
    """What reproducing this run needs beyond config.yaml: the code revision and the
    versions of the packages that decide the numbers; one entry per (re)start."""
    root = Path(__file__).resolve().parent.parent
    try:
        git = ["git", "-C", str(root), "describe", "--always", "--dirty"]
        revision = subprocess.run(git, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        revision = ""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    starts = read_json(layout.run_info)["starts"] if layout.run_info.exists() else []
    starts.append(
        {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "git_revision": revision or None,
            "python": sys.version.split()[0],
            "packages": versions,
            "seed": seed,
            "threads": torch.get_num_threads(),
            "machine": machine(),
        }
    )
    write_json(layout.run_info, {"starts": starts})


def machine() -> dict[str, Any]:
    """The machine kind a run's figures come from: kernels, and so floats and timings, differ
    between kinds (an AMD EPYC with avx512_bf16, an Intel Xeon with AMX), and a figure names its
    machine. ``cpu_capability`` is the kernel set torch dispatches to."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "avx512_bf16": cpu_has("avx512_bf16"),
        "amx": cpu_has("amx_tile"),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU's model name (Linux's cpuinfo; elsewhere what ``platform`` knows, if anything)."""
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or None


def seed_everything(seed: int, env: gym.Env | None = None) -> None:
    """Python, NumPy, torch and the env's own generator from one key. (The loop
    always names the task it resets to, so the env draws from it only for tasks
    it picks itself; search and evaluation seed per task, see ``evaluate.task_seed``.)"""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if env is not None:
        env.unwrapped.np_random = gym.utils.seeding.np_random(seed)[0]


def make_loggers(cfg: DictConfig, resuming: bool = False) -> list:
    """Lightning loggers from ``cfg.logger`` (a dict of logger configs, any may be null).
    W&B runs offline unless the user has an API key (``logger.wandb.offline: null``).
    A resumed run keeps the killed attempt's CSV metrics (``keep_earlier_csv``)."""
    loggers = []
    for name, spec in (cfg.logger or {}).items():
        if spec is None:
            continue
        kwargs: dict[str, Any] = {}
        if "WandbLogger" in spec.get("_target_", "") and spec.get("offline") is None:
            kwargs["offline"] = not os.environ.get("WANDB_API_KEY")
        logger = instantiate(spec, **kwargs)
        if resuming and isinstance(logger, CSVLogger):
            keep_earlier_csv(Path(logger.log_dir))
            with warnings.catch_warnings():  # its "previous log files will be deleted" is false after the move
                warnings.filterwarnings("ignore", message="Experiment logs directory")
                logger.experiment  # noqa: B018 (created here, where the warning is filtered)
        loggers.append(logger)
        log.info("logger %s -> %s", name, type(logger).__name__)
    config = OmegaConf.to_container(cfg, resolve=True)
    for logger in loggers:
        logger.log_hyperparams(config)
    return loggers


def keep_earlier_csv(log_dir: Path) -> None:
    """Lightning's CSVLogger deletes an existing ``metrics.csv`` when it starts (and a
    resumed run does not re-log the training steps it replays), so move the killed
    attempt's file aside first: ``metrics.csv`` then holds the resumed attempt's rows
    and ``metrics.attempt-<n>.csv`` each earlier attempt's, in order."""
    current = log_dir / "metrics.csv"
    if current.exists():
        attempt = 1 + len(list(log_dir.glob("metrics.attempt-*.csv")))
        current.rename(log_dir / f"metrics.attempt-{attempt}.csv")


def finish_wandb(exit_code: int) -> None:
    """Hydra multirun runs jobs in one process and a new WandbLogger would silently
    reuse an open run (docs/scaling.md): close it at the end of every job."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is not None:
        wandb.finish(exit_code=exit_code)
