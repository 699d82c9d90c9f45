"""The report's figures (matplotlib, PNG bytes).

Figures are built with ``matplotlib.figure.Figure`` rather than pyplot: no global
figure state and no GUI backend, so reports can be built from any process.
"""

from __future__ import annotations

import base64
import io
import textwrap
from collections import defaultdict

from matplotlib.figure import Figure

from agentq.modes import PLOTTED, TITLES, ZERO_SHOT
from agentq.report.collect import Study, eval_metric, num_pairs, short_key
from agentq.report.tables import phases, train_accuracy

METRICS = {"success_rate": "success rate", "avg_reward": "average reward"}


def to_png(fig: Figure, dpi: int = 100) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _legend(fig: Figure, axes, count: int) -> None:
    handles, labels = axes.get_legend_handles_labels()
    if handles:
        fig.legend(
            handles,
            # A run's label lists every swept key; unwrapped, it widens the figure far past its axes.
            [textwrap.fill(label, 60, break_long_words=False) for label in labels],
            loc="outside lower center",
            ncol=min(3, count),
            fontsize=8,
            frameon=False,
        )


def _integer_ticks(ax, iterations: set[int]) -> None:
    if iterations:
        ax.set_xticks(sorted(iterations))


def learning_curves(study: Study) -> Figure:
    """Success rate and average reward per iteration, zero-shot and with each search mode
    some run evaluated (no empty panels for a study without search): a line per run."""
    runs = [r for r in study.runs if r.ok]
    evaluated = {
        m for run in runs for it in run.iterations for m in PLOTTED if eval_metric(it, m, "success_rate") is not None
    }
    modes = [m for m in PLOTTED if m in evaluated or m == ZERO_SHOT]
    fig = Figure(figsize=(5 * len(modes), 6.5), layout="constrained")
    axes = fig.subplots(2, len(modes), sharex=True, squeeze=False)
    for row, (metric, metric_name) in enumerate(METRICS.items()):
        for col, mode in enumerate(modes):
            ax = axes[row][col]
            for run in runs:
                points = [
                    (it["iteration"], eval_metric(it, mode, metric))
                    for it in run.iterations
                    if eval_metric(it, mode, metric) is not None
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, marker="o", label=study.label(run))
            ax.set_title(f"{TITLES[mode]}: {metric_name}", fontsize=10)
            ax.set_ylim(-0.05, 1.05)
            ax.grid(alpha=0.3)
            if row == 1:
                ax.set_xlabel("iteration")
            _integer_ticks(ax, {it["iteration"] for run in runs for it in run.iterations})
    _legend(fig, axes[0][0], len(runs))
    fig.suptitle("Evaluation per iteration (iteration 0: base policy)")
    return fig


def _as_numbers(values: list[str]) -> list[float] | None:
    try:
        return [float(v) for v in values]
    except ValueError:
        return None


def sweep_figure(study: Study) -> Figure | None:
    """Final-iteration success against each swept key: a dot per job, a line through the
    mean over the other swept keys."""
    keys = study.swept
    runs = [r for r in study.runs if r.final() is not None]
    if not keys or not runs:
        return None
    fig = Figure(figsize=(4.2 * len(keys), 3.6), layout="constrained")
    axes = fig.subplots(1, len(keys), squeeze=False)[0]
    for ax, key in zip(axes, keys, strict=True):
        raw = [r.overrides.get(key, "default") for r in runs]  # "default": the run did not set it
        numbers = _as_numbers(raw)
        if numbers is None:  # categorical: positions in first-seen order
            categories = list(dict.fromkeys(raw))
            xs = [float(categories.index(v)) for v in raw]
            ax.set_xticks(range(len(categories)), categories, rotation=20, fontsize=8)
        else:
            xs = numbers
        offsets = [0.02 * (i - (len(PLOTTED) - 1) / 2) for i in range(len(PLOTTED))]
        for offset, mode in zip(offsets, PLOTTED, strict=True):
            ys = [eval_metric(r.final(), mode, "success_rate") for r in runs]
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            if not pts:
                continue
            span = (max(xs) - min(xs)) or 1.0
            dots = ax.scatter([x + offset * span for x, _ in pts], [y for _, y in pts], alpha=0.6)
            by_x = defaultdict(list)
            for x, y in pts:
                by_x[x].append(y)
            mean_x = sorted(by_x)
            ax.plot(
                mean_x,
                [sum(by_x[x]) / len(by_x[x]) for x in mean_x],
                color=dots.get_facecolor()[0],
                label=TITLES[mode],
            )
        ax.set_xlabel(f"{short_key(key)} ({key})" if short_key(key) != key else key)
        ax.set_ylabel("final success rate")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Sweep: final-iteration success per swept key (dots: jobs, lines: mean)")
    return fig


def pairs_and_training(study: Study) -> Figure | None:
    """Training examples built, final training loss and reward accuracy per iteration."""
    runs = [r for r in study.runs if any(it.get("iteration", 0) > 0 for it in r.iterations)]
    if not runs:
        return None
    fig = Figure(figsize=(12, 3.6), layout="constrained")
    axes = fig.subplots(1, 3, squeeze=False)[0]
    series = (
        ("pairs (training examples)", lambda it: num_pairs(it)),
        ("train loss", lambda it: (it.get("train") or {}).get("loss")),
        ("train reward accuracy", lambda it: train_accuracy(it.get("train") or {})),
    )
    for ax, (title, get) in zip(axes, series, strict=True):
        for run in runs:
            pts = [
                (it["iteration"], get(it)) for it in run.iterations if it.get("iteration", 0) > 0
            ]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="o", label=study.label(run))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration")
        _integer_ticks(
            ax,
            {
                it["iteration"]
                for run in runs
                for it in run.iterations
                if it.get("iteration", 0) > 0
            },
        )
        ax.grid(alpha=0.3)
    _legend(fig, axes[0], len(runs))
    return fig


def wall_time(study: Study) -> Figure | None:
    """Wall time per run, split by phase (summed over iterations) when the summary has
    ``iterations[i].seconds``; the rest of the wall time (model loading, ...) is "other"."""
    runs = [r for r in study.runs if r.wall_seconds is not None]
    if not runs:
        return None
    timed = phases(study)
    fig = Figure(figsize=(9, 0.5 * len(runs) + 1.6), layout="constrained")
    ax = fig.subplots()
    labels = [study.label(r) for r in runs]
    left = [0.0] * len(runs)
    for phase in timed:
        widths = [
            sum((it.get("seconds") or {}).get(phase, 0.0) for it in r.iterations) for r in runs
        ]
        ax.barh(labels, widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    rest = [max(float(r.wall_seconds) - done, 0.0) for r, done in zip(runs, left, strict=True)]
    ax.barh(labels, rest, left=left, label="other" if timed else "wall", color="lightgray")
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.tick_params(axis="y", labelsize=8)
    fig.legend(fontsize=8, loc="outside right upper")
    ax.set_title(
        "Wall time"
        + (" per phase (summed over iterations)" if timed else " (no per-phase times recorded)")
    )
    return fig
