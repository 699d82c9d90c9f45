"""agentq.console: the phase summary lines and bars, and each library message it hides."""

from __future__ import annotations

import io
import logging
import sys
import warnings

import pytest
from rich.console import Console

from agentq import console as con
from agentq.console import format_duration, phase, singular, summary_line


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def quiet_console() -> Console:
    """What stdout is in CI or a log file: not a terminal."""
    return Console(file=io.StringIO(), force_terminal=False, force_interactive=False)


def terminal_console() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, force_interactive=True, width=120)


def lines(caplog) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "agentq"]


# ------------------------------------------------------------------ summary lines


@pytest.mark.parametrize(
    ("done", "total", "seconds", "expected"),
    [
        (12, 12, 184, "collect: 12 episodes in 3m04s (3.9 episodes/min)"),
        (5, 12, 62, "collect: 5 of 12 episodes in 1m02s (4.8 episodes/min)"),
        (40, None, 30, "collect: 40 episodes in 30.0s (80 episodes/min)"),
        (1, 1, 4.2, "collect: 1 episode in 4.2s (14.3 episodes/min)"),
        (0, 3, 0.0, "collect: 0 of 3 episodes in 0.0s"),
        (3, 3, 0.4, "collect: 3 episodes in 0.4s"),  # too short for a rate
        (3000, None, 3723, "collect: 3000 episodes in 1h02m03s (48.3 episodes/min)"),
        (7, None, 1800, "collect: 7 episodes in 30m00s (0.23 episodes/min)"),
    ],
)
def test_summary_line(done, total, seconds, expected):
    assert summary_line("collect", done, total, "episodes", seconds) == expected


def test_singular_units():
    assert [singular(u) for u in ("episodes", "searches", "trees", "examples", "sims", "passes")] == [
        "episode", "search", "tree", "example", "sim", "pass"
    ]


def test_durations():
    assert [format_duration(s) for s in (0.04, 4.2, 59.96, 60, 184, 3723)] == [
        "0.0s", "4.2s", "1m00s", "1m00s", "3m04s", "1h02m03s"
    ]


def test_phase_logs_one_line_with_the_rate_of_the_injected_clock(caplog):
    clock = Clock()
    caplog.set_level(logging.INFO, logger="agentq")
    console = quiet_console()
    with phase("collect", total=12, unit="episodes", clock=clock, console=console) as advance:
        for _ in range(12):
            clock.now += 184 / 12
            advance(1)
    assert lines(caplog) == [(logging.INFO, "collect: 12 episodes in 3m04s (3.9 episodes/min)")]
    assert console.file.getvalue() == ""  # not a terminal: no bar, no escape codes


def test_unknown_total_and_fractional_advance(caplog):
    clock = Clock()
    caplog.set_level(logging.INFO, logger="agentq")
    with phase("train", unit="pairs", clock=clock, console=quiet_console()) as advance:
        advance(30)
        advance(12)
        clock.now += 21
    assert lines(caplog) == [(logging.INFO, "train: 42 pairs in 21.0s (120 pairs/min)")]


def test_a_failed_phase_says_where_it_stopped_and_reraises(caplog):
    clock = Clock()
    caplog.set_level(logging.INFO, logger="agentq")
    with pytest.raises(KeyError):
        with phase("eval", total=4, unit="tasks", clock=clock, console=quiet_console()) as advance:
            advance()
            clock.now += 30
            raise KeyError("boom")
    assert lines(caplog) == [(logging.WARNING, "eval: stopped after 1 of 4 tasks in 30.0s (2 tasks/min)")]


def test_nested_phases_share_one_bar_on_a_terminal(caplog):
    clock = Clock()
    caplog.set_level(logging.INFO, logger="agentq")
    console = terminal_console()
    with phase("iteration 1", unit="phases", clock=clock, console=console) as outer:
        with phase("collect", total=2, unit="episodes", clock=clock, console=console) as inner:
            assert con._Shared.users == 2  # one live display, two rows
            clock.now += 60
            inner(2)
            con._Shared.progress.refresh()
        outer(1)
    assert con._Shared.progress is None and con._Shared.users == 0
    assert lines(caplog) == [
        (logging.INFO, "collect: 2 episodes in 1m00s (2 episodes/min)"),
        (logging.INFO, "iteration 1: 1 phase in 1m00s (1 phases/min)"),
    ]
    drawn = console.file.getvalue()
    assert "collect" in drawn and "2/2 episodes" in drawn and "episodes/min" in drawn


def test_log_lines_go_above_the_bar():
    """The job's console handler (conf/hydra/default.yaml) writes through rich's proxy of
    stdout while a bar is live, so its lines land in the live display, not through it."""
    console = terminal_console()
    root = logging.getLogger()
    handler = con.StdoutHandler(sys.stdout)
    root.addHandler(handler)
    try:
        with phase("collect", total=1, unit="episodes", console=console, logger=logging.getLogger("x.quiet")):
            logging.getLogger("x.test").warning("a line during the bar")
            assert handler.stream is sys.stdout and sys.stdout is not sys.__stdout__
    finally:
        root.removeHandler(handler)
    assert "a line during the bar" in console.file.getvalue()


def test_the_job_console_handler_is_ours():
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
    assert cfg.hydra.job_logging.handlers.console["class"] == "agentq.console.StdoutHandler"


def test_bar_false_shows_nothing_on_a_terminal(caplog):
    caplog.set_level(logging.INFO, logger="agentq")
    console = terminal_console()
    with phase("train", total=3, unit="pairs", bar=False, console=console) as advance:
        assert con._Shared.progress is None
        advance(3)
    assert console.file.getvalue() == ""
    assert lines(caplog)[0][1].startswith("train: 3 pairs in ")


# ------------------------------------------------------------------ library messages


@pytest.fixture
def restore_libraries():
    """quiet_libraries changes process-wide state: put it back for the other tests."""
    from transformers.utils import logging as hf_logging

    names = ("lightning", "lightning.pytorch", "lightning.fabric", "lightning.pytorch.utilities.rank_zero", "bm25s")
    loggers = {n: logging.getLogger(n) for n in names}
    saved = {n: (list(lg.handlers), list(lg.filters), lg.propagate, lg.level) for n, lg in loggers.items()}
    hook = hf_logging.set_tqdm_hook(None) if hasattr(hf_logging, "set_tqdm_hook") else None
    if hasattr(hf_logging, "set_tqdm_hook"):
        hf_logging.set_tqdm_hook(hook)
    enabled = hf_logging.is_progress_bar_enabled()
    yield
    for n, (handlers, filters, propagate, level) in saved.items():
        logger = loggers[n]
        logger.handlers[:], logger.filters[:], logger.propagate = handlers, filters, propagate
        logger.setLevel(level)
    if hasattr(hf_logging, "set_tqdm_hook"):
        hf_logging.set_tqdm_hook(hook)
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()


def recorded(fn) -> list[str]:
    """Messages of the warnings ``fn`` emits, every one shown (no once-per-location)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught]


def leafspec():
    from lightning.pytorch.utilities._pytree import _tree_flatten

    _tree_flatten(1)  # Lightning builds torch's deprecated LeafSpec


def gradient_checkpointing_alias():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    LlamaForCausalLM(config).is_gradient_checkpointing  # what peft's PeftModel reads  # noqa: B018


def old_cache_keyword():
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    LlamaForCausalLM(config)(input_ids=torch.tensor([[1, 2]]), past_key_values=DynamicCache(), use_cache=True)  # as our forwards pass it


@pytest.mark.parametrize(
    ("trigger", "text"),
    [(leafspec, "LeafSpec"), (gradient_checkpointing_alias, "is_gradient_checkpointing"), (old_cache_keyword, "`past_key_values`")],
)
def test_each_named_warning_is_silenced(trigger, text):
    assert any(text in m for m in recorded(trigger))  # the library still warns: the filter is not stale

    def silenced():
        con.silence_warnings()
        trigger()

    assert not any(text in m for m in recorded(silenced))


@pytest.mark.parametrize(
    ("message", "module"),
    [
        ("`is_gradient_checkpointing` is about to change", "transformers.modeling_utils"),  # same module, other message
        ("`is_gradient_checkpointing` is deprecated and will be removed", "transformers.modeling_bert"),  # other module
        ("`isinstance(treespec, LeafSpec)` is deprecated, use ...", "agentq.training.fit"),
        ("something else is deprecated", "lightning.pytorch.utilities._pytree"),
    ],
)
def test_other_warnings_of_the_same_category_still_show(message, module):
    def emit():
        con.silence_warnings()
        warnings.warn_explicit(message, FutureWarning, "somewhere.py", 1, module=module)

    assert recorded(emit) == [message]


def test_lightning_info_lines_print_once(restore_libraries):
    import lightning  # noqa: F401

    ours, theirs = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handler = logging.StreamHandler(ours)
    root.addHandler(handler)
    lightning_logger = logging.getLogger("lightning")
    library = [h for h in lightning_logger.handlers if type(h) is logging.StreamHandler]
    for h in library:
        h.setStream(theirs)
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    try:
        rank_zero.info("GPU available: False, used: False")
        before = (ours.getvalue().count("GPU available"), theirs.getvalue().count("GPU available"))
        con.route_lightning_logs()
        rank_zero.info("TPU available: False")
        after = (ours.getvalue().count("TPU available"), theirs.getvalue().count("TPU available"))
    finally:
        root.removeHandler(handler)
    assert library, "lightning no longer adds its own handler: route_lightning_logs may go"
    assert before == (1, 1)  # the doubled line
    assert after == (1, 0)


def test_the_tips_and_accelerator_lines_are_hidden_and_nothing_else(restore_libraries):
    import lightning as L

    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    seen = io.StringIO()
    handler = logging.StreamHandler(seen)
    rank_zero.addHandler(handler)  # after the logger's own filters, before any propagation
    try:
        def trainer() -> str:
            seen.truncate(0)
            seen.seek(0)
            L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
            return seen.getvalue()

        assert "litlogger" in trainer() and "GPU available" in trainer()
        con.hide_lightning_tips()
        shown = trainer()
        rank_zero.info("Epoch 3: a message of our own")
        shown_after = seen.getvalue()
    finally:
        rank_zero.removeHandler(handler)
    assert "litlogger" not in shown and "GPU available" not in shown and "TPU available" not in shown
    assert "Epoch 3: a message of our own" in shown_after


def test_only_the_loading_weights_bar_is_hidden(restore_libraries):
    from transformers.utils import logging as hf_logging

    if not hasattr(hf_logging, "set_tqdm_hook"):
        pytest.skip("this transformers has no tqdm hook (quiet_libraries disables its bars instead)")
    hf_logging.enable_progress_bar()
    con.hide_transformers_bars()
    con.hide_transformers_bars()  # idempotent: one hook, not two stacked
    current = hf_logging.set_tqdm_hook(None)
    hf_logging.set_tqdm_hook(current)
    assert current._agentq_hides and not getattr(current.previous, "_agentq_hides", False)
    loading = hf_logging.tqdm(range(3), desc="Loading weights", file=io.StringIO())
    other = hf_logging.tqdm(range(3), desc="Converting", file=io.StringIO())
    assert isinstance(loading, hf_logging.EmptyTqdm)
    assert not isinstance(other, hf_logging.EmptyTqdm)
    other.close()


def test_bm25s_debug_lines_are_dropped(restore_libraries):
    seen = io.StringIO()
    logger = logging.getLogger("bm25s")
    handler = logging.StreamHandler(seen)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)  # what bm25s does at import
    try:
        con.quiet_libraries()
        logger.debug("Building index from tokens")
        logger.info("an info line")
    finally:
        logger.removeHandler(handler)
    assert seen.getvalue() == "an info line\n"


def test_a_forked_worker_leaves_the_bar_to_its_parent():
    import multiprocessing as mp

    def child(queue) -> None:
        queue.put((con._Shared.progress is None, type(sys.stdout).__name__))

    console = terminal_console()
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    with phase("collect", total=1, unit="episodes", console=console, logger=logging.getLogger("x.quiet")):
        assert type(sys.stdout).__name__ == "FileProxy"
        worker = ctx.Process(target=child, args=(queue,))
        worker.start()
        worker.join(timeout=60)
        no_bar, stdout = queue.get(timeout=10)
    assert worker.exitcode == 0
    assert no_bar and stdout != "FileProxy"
