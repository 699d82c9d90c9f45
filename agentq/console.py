"""What a run prints: one line per phase, one progress bar per long phase, no library noise.

Two things, both for entry points and the loop:

- :func:`quiet_libraries`, called once per process by every entry point (``run.py``'s
  ``main``), after logging is configured: Lightning's log records reach the root
  handlers once, and a short list of named library messages is hidden, each for a
  stated reason (no blanket filter: any other warning still shows).
- :func:`phase`, a context manager around one phase of the loop::

      with phase("collect", total=len(tasks), unit="episodes") as advance:
          for task in tasks:
              ...
              advance(1)

  shows one progress bar with the average rate in units per minute while the phase
  runs (only when stdout is an interactive terminal), then logs one summary line,
  ``collect: 12 episodes in 3m04s (3.9 episodes/min)``. Phases may nest (an inner
  phase adds a row to the outer phase's bar), and ``total`` may be unknown (None).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger("agentq")

# ------------------------------------------------------------------ library noise

# transformers' per-load bar, hidden: loading a folder takes about a second and the phase says it.
HIDDEN_TRANSFORMERS_BARS = ("Loading weights",)


def quiet_libraries() -> None:
    """Once per process, after logging is configured (Hydra's job logging): see the module
    docstring. Idempotent. Imports lightning and transformers (every run needs both)."""
    silence_warnings()
    route_lightning_logs()
    hide_lightning_tips()
    # bm25s (WebShop's search engine) sets its logger to DEBUG when imported, so its
    # "Building index from tokens" passes Hydra's INFO root: a logger filter survives setLevel.
    logging.getLogger("bm25s").addFilter(_INFO_AND_ABOVE)
    # gguf's writer logs each file's tensor list at INFO; the OpenVINO engine logs the one line that matters.
    logging.getLogger("gguf").setLevel(logging.WARNING)
    # The same rename's log line (silence_warnings has its warning), also logged when we read an output's `.past_key_values`.
    logging.getLogger("transformers.utils.generic").addFilter(_OLD_CACHE_NAME)
    hide_transformers_bars()


def silence_warnings() -> None:
    """The named library warnings, each matched by message, category and module: the same
    category from anywhere else, or another message from the same module, still shows."""
    # peft's PeftModel.__init__ reads this deprecated alias (not our code); transformers drops it only in v6, outside our range.
    warnings.filterwarnings(
        "ignore",
        message=r"`is_gradient_checkpointing` is deprecated",
        category=FutureWarning,
        module=r"transformers\.modeling_utils\Z",
    )
    # transformers 5.24 renamed the forward's `past_key_values` to `cache`. We keep the old keyword, which
    # every version in our range takes (5.0-5.23 know no `cache`); pyproject stops the range before 5.40 drops it.
    warnings.filterwarnings(
        "ignore",
        message=r"`past_key_values` is deprecated and will be removed in version 5\.40",
        category=FutureWarning,
    )
    # Lightning 2.6's own pytree helper builds torch's deprecated LeafSpec at every fit: Lightning's to update, harmless.
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning,
        module=r"lightning\.pytorch\.utilities\._pytree\Z",
    )


class _DropMessages(logging.Filter):
    """Drops records whose message starts with one of ``prefixes``."""

    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


class _InfoAndAbove(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.INFO


_INFO_AND_ABOVE = _InfoAndAbove()
_OLD_CACHE_NAME = _DropMessages("`past_key_values`/`cache_params` are deprecated")
_LIGHTNING_TIPS = _DropMessages(
    # An advertisement for a cloud logger, at every Trainer: we log to CSV (and W&B).
    "💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger]",
    # Its twin for a model registry, when Lightning adds its default checkpoint callback.
    "💡 Tip: For seamless cloud uploads and versioning, try installing [litmodels]",
    # The accelerator summary of every Trainer: the run's config and run_info.json say it once.
    "GPU available:",
    "TPU available:",
    # The end of every fit: the loop's "train (iter i): ..." line follows it.
    "`Trainer.fit` stopped:",
)


def hide_lightning_tips() -> None:
    """Lightning logs its tips with ``rank_zero_info`` (INFO) and has no flag to turn them off."""
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_LIGHTNING_TIPS)  # no-op if added


def route_lightning_logs() -> None:
    """Lightning's records go to the root handlers only, once.

    The cause of every Lightning INFO line printed twice: ``lightning/__init__.py``
    always adds a ``StreamHandler`` ("INFO: %(message)s") to the ``lightning`` logger
    and leaves it propagating, so a record of ``lightning.pytorch.*`` is printed by
    that handler and again by the root's (Hydra's console handler, plus its log file).
    ``lightning.pytorch`` and ``lightning.fabric`` add a handler of their own (and stop
    propagating) only when the root had none at their import. With root handlers
    configured, all of these go: one line, in the job's format, also in its log file.
    Without root handlers (no logging configured) nothing changes."""
    import lightning  # noqa: F401  (its __init__ adds the handler; it must have run)

    if not logging.getLogger().hasHandlers():
        return
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:  # the library's; never a file handler
                logger.removeHandler(handler)
        logger.propagate = True


def hide_transformers_bars() -> None:
    """Hide transformers' "Loading weights" tqdm bar (one per ``from_pretrained``), and
    only it: the GGUF conversion's bar (first load, 15-25 s) and hub downloads keep theirs."""
    from transformers.utils import logging as hf_logging

    set_hook = getattr(hf_logging, "set_tqdm_hook", None)
    if set_hook is None:  # an older transformers 5.x has no per-bar hook: all its bars go (and the hub's)
        hf_logging.disable_progress_bar()
        return
    previous = set_hook(None)
    if getattr(previous, "_agentq_hides", False):
        previous = previous.previous

    def hook(factory, args, kwargs):
        if kwargs.get("desc") in HIDDEN_TRANSFORMERS_BARS:
            return hf_logging.EmptyTqdm(*args, **kwargs)
        return previous(factory, args, kwargs) if previous else factory(*args, **kwargs)

    hook._agentq_hides = True
    hook.previous = previous
    set_hook(hook)


# ------------------------------------------------------------------ phases


class StdoutHandler(logging.StreamHandler):
    """A console handler that writes to ``sys.stdout`` as it is at each record.

    A live display (a :func:`phase` bar, Lightning's training bar) swaps ``sys.stdout``
    for a proxy that prints above the bar; a plain ``StreamHandler`` keeps the stream it
    was built with (Hydra's ``ext://sys.stdout``) and writes through the bar instead.
    conf/hydra/default.yaml makes it the job's console handler. ``stream`` is ignored."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__()

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:
        pass


def format_duration(seconds: float) -> str:
    """``4.2s``, ``3m04s``, ``1h02m03s``."""
    seconds = max(0.0, seconds)
    if round(seconds, 1) < 60:
        return f"{seconds:.1f}s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def format_number(value: float) -> str:
    """Counts and rates: ``12``, ``3.9``, ``0.25``, ``1240``."""
    if value == int(value) and abs(value) >= 1:
        return str(int(value))
    if abs(value) >= 99.95:  # what .1f would round to 100.0
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.1f}"
    return f"{value:.2g}"


# Below this a phase's rate is timer noise (building pairs from trees: thousands per minute).
MIN_SECONDS_FOR_A_RATE = 1.0


def per_minute(done: float, seconds: float) -> float | None:
    """The average rate in units per minute, or None when there is none worth giving."""
    if done <= 0 or seconds < MIN_SECONDS_FOR_A_RATE:
        return None
    return done * 60.0 / seconds


def singular(unit: str) -> str:
    """``episodes`` -> ``episode``, ``searches`` -> ``search``."""
    if unit.endswith(("ches", "shes", "sses", "xes")):
        return unit[:-2]
    return unit[:-1] if unit.endswith("s") else unit


def summary_line(
    name: str, done: float, total: float | None, unit: str, seconds: float, *, stopped: bool = False
) -> str:
    """``collect: 12 episodes in 3m04s (3.9 episodes/min)``; ``5 of 12`` when short of
    ``total``; ``stopped after ...`` when the phase raised."""
    count = format_number(done)
    noun = singular(unit) if done == 1 else unit
    if total is not None and done != total:
        count = f"{count} of {format_number(total)}"
        noun = unit
    line = f"{name}: {'stopped after ' if stopped else ''}{count} {noun} in {format_duration(seconds)}"
    rate = per_minute(done, seconds)
    return line if rate is None else f"{line} ({format_number(rate)} {unit}/min)"


class _Shared:
    """The one live Progress that every active phase adds its row to."""

    progress: Any = None  # rich.progress.Progress while a bar is shown
    users = 0


def _make_progress(console):
    from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class CountColumn(ProgressColumn):
        def render(self, task) -> Text:
            total = "" if task.total is None else f"/{format_number(task.total)}"
            return Text(f"{format_number(task.completed)}{total} {task.fields['unit']}")

    class RateColumn(ProgressColumn):
        def render(self, task) -> Text:
            rate = per_minute(task.completed, task.elapsed or 0.0)
            shown = "-" if rate is None else format_number(rate)
            return Text(f"{shown} {task.fields['unit']}/min", style="progress.data.speed")

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        CountColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,  # when the phase ends only its summary line stays
        refresh_per_second=2,  # rates per minute: no need to spend a shared CPU on 10 Hz
    )


def _start_bar(console) -> bool:
    """Start (or join) the shared Progress; False when no bar can be shown."""
    from rich import get_console
    from rich.errors import LiveError

    console = console or get_console()
    if _Shared.progress is None:
        if not console.is_interactive:  # CI, a log file, a pipe: summary lines only
            return False
        progress = _make_progress(console)
        try:
            progress.start()
        except LiveError:  # another live display on an older rich, which cannot nest them
            return False
        _Shared.progress = progress
    _Shared.users += 1
    return True


def _leave_bar() -> None:
    _Shared.users -= 1
    if _Shared.users == 0:
        progress, _Shared.progress = _Shared.progress, None
        progress.stop()


def _forget_bar_in_child() -> None:
    """A process forked while a bar is live (agentq.parallel's workers) neither draws nor
    stops the parent's bar: its stdout and stderr are the real files again, not rich's
    proxies, and it has no bar of its own."""
    if _Shared.progress is None:
        return
    _Shared.progress, _Shared.users = None, 0
    for name in ("stdout", "stderr"):
        proxied = getattr(getattr(sys, name), "rich_proxied_file", None)
        if proxied is not None:
            setattr(sys, name, proxied)


os.register_at_fork(after_in_child=_forget_bar_in_child)


@contextlib.contextmanager
def phase(
    name: str,
    total: float | None = None,
    unit: str = "items",
    *,
    bar: bool = True,
    logger: logging.Logger | None = None,
    clock: Callable[[], float] = time.monotonic,
    console: Any = None,
) -> Iterator[Callable[[float], None]]:
    """Show a bar for one phase and log its summary line when it ends; yields
    ``advance(n=1)``. See the module docstring.

    Args:
        name: the phase, first word of the bar and of the summary line.
        total: how many units the phase will do, or None when unknown (the bar pulses).
        unit: plural noun of the unit (``episodes``, ``sims``, ``pairs``); the rate is
            given in ``unit``/min.
        bar: False for no bar even on a terminal (e.g. around a phase that shows its
            own, such as Lightning's training bar): the summary line only.
        logger: where the summary goes (default ``agentq``), at INFO; at WARNING,
            "stopped after", when the phase raised.
        clock: seconds, for the summary (tests inject one).
        console: a ``rich.console.Console`` (default rich's global console, which
            Lightning's bar also uses).
    """
    logger = logger or log
    done = 0.0
    started = clock()
    shown = bar and _start_bar(console)
    task = _Shared.progress.add_task(name, total=total, unit=unit) if shown else None

    def advance(n: float = 1) -> None:
        nonlocal done
        done += n
        if task is not None:
            _Shared.progress.advance(task, n)

    stopped = False
    try:
        yield advance
    except BaseException:
        stopped = True
        raise
    finally:
        seconds = clock() - started
        if shown:
            _Shared.progress.remove_task(task)
            _leave_bar()
        level = logging.WARNING if stopped else logging.INFO
        logger.log(level, "%s", summary_line(name, done, total, unit, seconds, stopped=stopped))
