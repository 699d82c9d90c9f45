"""The report's tables, as strings ready for markdown and HTML.

Every number is read from the runs' ``summary.json`` and printed with 3 decimals
(``fmt``); nothing is recomputed except sums over iterations (total pairs, time
per phase), which say so in their column names. The runs table ends with the
scripted oracle on the runs' goals and step budget (``summary["oracle"]``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from agentq.intervals import wilson_interval
from agentq.modes import PLOTTED, TITLES
from agentq.report.collect import (
    Run,
    Study,
    eval_metric,
    num_pairs,
    oracle_entries,
    short_key,
)

MISSING = "-"
PHASES = ("collect", "train", *(f"eval_{mode}" for mode in PLOTTED))  # the loop's phase names (RunBook.phase)


def fmt(value: Any, digits: int = 3) -> str:
    """Numbers with ``digits`` decimals (ints as they are), None as ``-``."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]

    def to_markdown(self) -> str:
        def cell(text: str) -> str:
            return str(text).replace("|", "\\|").replace("\n", " ")

        lines = ["| " + " | ".join(cell(c) for c in self.columns) + " |"]
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines)

    def to_html(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def status_text(run: Run) -> str:
    if run.status == "refused" and run.note:
        return f"refused: {run.note[:120]}"
    return run.status


def runs_table(study: Study) -> Table:
    """One row per run: its swept values, then the final iteration's results."""
    columns = ["run", "status", *(short_key(k) for k in study.swept), "iteration"]
    for mode in PLOTTED:
        columns += [f"{TITLES[mode]} success", f"{TITLES[mode]} reward"]
    columns += ["pairs (all iterations)", "wall s"]
    rows = []
    for run in study.runs:
        final = run.final()
        row = [run.name, status_text(run), *(run.overrides.get(k, MISSING) for k in study.swept)]
        row.append(fmt(final.get("iteration")) if final else MISSING)
        for mode in PLOTTED:
            row += [
                success_cell(eval_metric(final, mode, "success_rate"), eval_metric(final, mode, "num_tasks")),
                fmt(eval_metric(final, mode, "avg_reward")),
            ]
        row += [fmt(run.total_pairs()), fmt(run.wall_seconds, 1)]
        rows.append(row)
    rows += oracle_rows(study, len(columns))
    return Table(columns, rows)


def success_cell(rate: float | None, n: float | None) -> str:
    """A success rate with its 95% Wilson interval over the ``n`` evaluated tasks."""
    if rate is None or not n:
        return fmt(rate)
    lo, hi = wilson_interval(round(rate * n), int(n))
    return f"{rate:.3f} [{lo:.2f}, {hi:.2f}]"


def oracle_rows(study: Study, width: int) -> list[list[str]]:
    """The scripted oracle on the runs' goals and step budget, as rows of the runs table: its
    success and reward in the zero-shot columns (one episode per goal, no search)."""
    entries = oracle_entries(study)
    several_envs = len({e.get("env") for e in entries}) > 1
    rows = []
    for oracle in entries:
        env = f"{str(oracle.get('env', '')).rpartition('/')[2]}, " if several_envs else ""
        label = f"scripted oracle ({env}{oracle.get('split')}, {oracle.get('max_steps')} steps)"
        row = [label, f"oracle, {oracle.get('num_tasks')} tasks"] + [MISSING] * (len(study.swept) + 1)
        for mode in PLOTTED:
            if mode == "zero_shot":
                success = success_cell(oracle.get("success_rate"), oracle.get("num_tasks"))
                row += [success, fmt(oracle.get("avg_reward"))]
            else:
                row += [MISSING, MISSING]
        rows.append(row + [MISSING] * (width - len(row)))
    return rows


def phases(study: Study) -> list[str]:
    """Phases timed in any iteration of any run: the loop's order, then any others."""
    seen: list[str] = []
    for run in study.runs:
        for it in run.iterations:
            seen += [p for p in (it.get("seconds") or {}) if p not in seen]
    return [p for p in PHASES if p in seen] + [p for p in seen if p not in PHASES]


def iterations_table(study: Study) -> Table:
    """One row per (run, iteration): evaluation, pairs, training and phase times."""
    timed = phases(study)
    columns = ["run", "iteration"]
    for mode in PLOTTED:
        columns += [f"{TITLES[mode]} success", f"{TITLES[mode]} reward"]
    columns += ["pairs", "outcome-backed pairs", "critic tau", "critic top-1", "critic tau vs first returns"]
    columns += ["train loss", "train accuracy"]
    columns += [f"{p} s" for p in timed]
    rows = []
    for run in study.runs:
        for it in run.iterations:
            row = [run.name, fmt(it.get("iteration"))]
            for mode in PLOTTED:
                row += [
                    fmt(eval_metric(it, mode, "success_rate")),
                    fmt(eval_metric(it, mode, "avg_reward")),
                ]
            train = it.get("train") or {}
            search = it.get("search") or {}  # agentq.data.diagnostics, from the iteration's trees
            critic, sources = search.get("critic") or {}, search.get("pairs") or {}
            row += [fmt(num_pairs(it)), fmt(sources.get("outcome")), fmt(critic.get("kendall_tau")), fmt(critic.get("top1"))]
            row += [fmt(critic.get("first_return_tau"))]
            row += [fmt(train.get("loss")), fmt(train_accuracy(train))]
            row += [fmt((it.get("seconds") or {}).get(p), 1) for p in timed]
            rows.append(row)
    return Table(columns, rows)


def train_accuracy(train: dict[str, Any]) -> float | None:
    """DPO-style objectives log ``reward_accuracy``; others may log ``accuracy`` or none."""
    for key in ("reward_accuracy", "accuracy"):
        if train.get(key) is not None:
            return float(train[key])
    return None
