"""The same comparison as a W&B report (``wandb-workspaces``).

Report objects are built and validated offline: the spec is converted to the
view model that ``Report.save()`` would upload (every block and panel goes
through the library's own conversion, and the result reloads), and written to
``wandb_report.json``. ``save()`` needs a server, so it is called only when an API
key is set and the server answers (docs/method.md §11).

The runset selects the runs by their W&B ids, read from the run directories'
``wandb/*run-<time>-<id>`` folders (the loop's WandbLogger leaves them, online or
offline); runs logged without W&B fall back to the configured W&B group, if any.
``wandb-workspaces`` is imported only here, so the HTML report does not need it.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from agentq.modes import PLOTTED, TITLES
from agentq.report.collect import Study, short_key
from agentq.report.tables import runs_table


def _wr():
    try:
        import wandb_workspaces.reports.v2 as wr
    except ImportError as e:  # an optional extra: the HTML report works without it
        raise ImportError(
            "--wandb needs the wandb-workspaces package: pip install wandb-workspaces"
        ) from e
    return wr


def wandb_settings(study: Study) -> dict[str, Any]:
    """Project, entity and group from the first run's ``logger.wandb`` config."""
    for run in study.runs:
        spec = (run.config.get("logger") or {}).get("wandb") or {}
        if spec:
            return {k: spec.get(k) for k in ("project", "entity", "group")}
    return {}


def runset_filter(study: Study) -> str:
    """A runset filter expression selecting exactly the study's runs ("" if unknown)."""
    ids = [i for run in study.runs for i in run.wandb_ids]
    if ids:
        return "Metric('ID') in [" + ", ".join(repr(i) for i in ids) + "]"
    group = wandb_settings(study).get("group")
    return f"Metric('Group') == {group!r}" if group else ""


def build_report(study: Study, *, entity: str = "", project: str | None = None):
    """The report object (not saved): a markdown block with the runs table, line plots
    of success and reward per iteration, and for a sweep a parallel-coordinates plot
    of the swept config keys against the final success rates."""
    wr = _wr()
    project = project or wandb_settings(study).get("project") or "agentq"
    runset = wr.Runset(
        entity=entity, project=project, name=study.path.name, filters=runset_filter(study)
    )
    panels = [
        wr.LinePlot(
            title=f"{TITLES[mode]} {name}",
            x="iteration",
            y=[f"eval/{mode}/{metric}"],
            range_y=(0.0, 1.0),
            layout=wr.Layout(x=8 * col, y=6 * row, w=8, h=6),
        )
        for row, (metric, name) in enumerate(
            (("success_rate", "success"), ("avg_reward", "reward"))
        )
        for col, mode in enumerate(PLOTTED)
    ]
    if study.swept:
        columns = [
            wr.ParallelCoordinatesPlotColumn(metric=wr.Config(key), display_name=short_key(key))
            for key in study.swept
        ]
        columns += [
            wr.ParallelCoordinatesPlotColumn(
                metric=wr.SummaryMetric(f"eval/{mode}/success_rate"),
                display_name=f"{TITLES[mode]} success",
            )
            for mode in PLOTTED
        ]
        panels.append(
            wr.ParallelCoordinatesPlot(
                title="sweep", columns=columns, layout=wr.Layout(x=8 * len(PLOTTED), y=0, w=8, h=12)
            )
        )
    text = [
        f"Runs of `{study.path}` ({study.kind}, {len(study.runs)} runs). "
        "Final-iteration results from each run's summary.json (3 decimals):",
        "",
        runs_table(study).to_markdown(),
    ]
    if not runset.filters:
        text += [
            "",
            "No W&B run ids or group were found in the run directories: the runset is unfiltered.",
        ]
    return wr.Report(
        project=project,
        entity=entity,
        title=f"agentq: {study.path.name}"[:128],
        description=f"{study.kind} with {len(study.runs)} runs"
        + ("; swept " + ", ".join(study.swept) if study.swept else ""),
        blocks=[
            wr.H2(text="Results"),
            wr.MarkdownBlock(text="\n".join(text)),
            wr.H2(text="Evaluation per iteration"),
            wr.PanelGrid(runsets=[runset], panels=panels),
        ],
    )


def offline_spec(report) -> dict[str, Any]:
    """The view model ``save()`` would upload, built without a server (runsets need a
    project lookup on the server, so this copy's runsets name no project: the saved
    report's do), checked by reloading it into a report."""
    wr = _wr()
    from wandb_workspaces.reports.v2 import internal

    offline = copy.deepcopy(report)
    for block in offline.blocks:
        for runset in getattr(block, "runsets", []):
            runset.entity, runset.project = "", ""
    spec = offline._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)
    reloaded = wr.Report._from_model(internal.ReportViewspec.model_validate(spec))
    if len(reloaded.blocks) != len(report.blocks):
        raise ValueError(
            f"W&B report spec did not round-trip: {len(reloaded.blocks)} != {len(report.blocks)} blocks"
        )
    return spec


def server_reachable(timeout: float = 10.0) -> str | None:
    """The default entity when an API key is set and the server answers, else None."""
    if not os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE") in (
        "offline",
        "disabled",
    ):
        return None
    try:
        import wandb

        return wandb.Api(timeout=timeout).default_entity or None
    except Exception:  # any failure means "no server": the spec is still written
        return None


def write_wandb_report(
    study: Study,
    out_dir: str | Path,
    *,
    entity: str | None = None,
    project: str | None = None,
    save: bool = True,
) -> tuple[Path, str | None]:
    """Write ``wandb_report.json``; save the report when a server is reachable.
    Returns the spec's path and the report's URL (None when not saved)."""
    entity = entity or os.environ.get("WANDB_ENTITY") or wandb_settings(study).get("entity") or ""
    report = build_report(study, entity=entity, project=project)
    spec = offline_spec(report)
    path = Path(out_dir) / "wandb_report.json"
    url = None
    if save and (default_entity := server_reachable()):
        if not entity:
            report = build_report(study, entity=default_entity, project=project)
        url = report.save().url
    record = {
        "saved": url is not None,
        "url": url,
        "runset_filter": runset_filter(study),
        "viewspec": spec,
    }
    path.write_text(json.dumps(record, indent=1))
    return path, url
