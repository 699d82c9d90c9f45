"""Write the report files: ``report.html`` (self-contained), ``report.md``,
``report.png`` (the learning curves), ``tree.svg`` and ``episodes.csv`` (every evaluation
episode's outcome, goal by goal)."""

from __future__ import annotations

import csv
import html
import time
from dataclasses import dataclass
from pathlib import Path

from agentq.report import plots
from agentq.report.collect import EPISODE_COLUMNS, Study, episode_records, largest_tree, short_key
from agentq.report.tables import iterations_table, runs_table
from agentq.report.tree_render import render_tree_svg

NUMBERS_NOTE = (
    "Numbers are read from each run's summary.json and printed with 3 decimals "
    "(wall seconds with 1); success and reward are fractions in [0, 1]; "
    "'pairs (all iterations)' sums iterations[i].num_pairs."
)

EPISODES_NOTE = (
    "run, iteration, mode, task id, success, score, steps and the commands, so that a later row "
    "can be paired with these goals without the run folders"
)

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1300px; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; } td { white-space: nowrap; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; } .tree { overflow-x: auto; border: 1px solid #ddd; padding: 4px; }
.note { color: #666; font-size: 13px; } code { background: #f5f5f5; padding: 0 3px; }
"""


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path
    png: Path
    tree_svg: Path | None
    episodes: Path | None = None


def _describe(study: Study) -> list[str]:
    ok = sum(r.ok for r in study.runs)
    lines = [f"{study.kind} `{study.path}`: {len(study.runs)} run(s), {ok} with a summary."]
    if study.swept:
        names = [f"`{k}`" + (f" ({short_key(k)})" if short_key(k) != k else "") for k in study.swept]
        lines.append("Swept: " + ", ".join(names) + ".")
    if study.common:
        lines.append(
            "Common overrides: " + " ".join(f"`{k}={v}`" for k, v in study.common.items()) + "."
        )
    missing = [r for r in study.runs if not r.ok]
    if missing:
        lines.append(
            "Without summary: " + ", ".join(f"{r.name} ({r.status})" for r in missing) + "."
        )
    return lines


def _inline_md(text: str) -> str:
    """The few markdown marks ``_describe`` uses, as HTML (everything else escaped)."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if k % 2 else p for k, p in enumerate(parts))


def write_report(study: Study, out_dir: str | Path, *, max_tree_nodes: int = 40) -> ReportFiles:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = {
        "Evaluation per iteration": plots.learning_curves(study),
        "Sweep": plots.sweep_figure(study) if len(study.runs) > 1 else None,
        "Pairs and training": plots.pairs_and_training(study),
        "Wall time": plots.wall_time(study),
    }
    pngs = {name: plots.to_png(fig) for name, fig in figures.items() if fig is not None}
    png_path = out / "report.png"
    png_path.write_bytes(pngs["Evaluation per iteration"])

    found = largest_tree(study)
    tree_svg, tree_caption, svg_path = (
        None,
        "no search tree found (no iter_XXX/collect/task_*.json)",
        None,
    )
    if found is not None:
        run, file, tree = found
        tree_svg = render_tree_svg(tree, max_nodes=max_tree_nodes)
        svg_path = out / "tree.svg"
        svg_path.write_text(render_tree_svg(tree, max_nodes=max_tree_nodes, standalone=True))
        tree_caption = (
            f"run {run.name}: {file.relative_to(run.path)} (the largest tree of its last collect)"
        )

    records = episode_records(study)
    episodes_path = out / "episodes.csv" if records else None
    counted = f"{len(records)} evaluation episodes ({EPISODES_NOTE})"
    if episodes_path is not None:
        with episodes_path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=EPISODE_COLUMNS)
            writer.writeheader()
            writer.writerows(records)

    runs, iterations = runs_table(study), iterations_table(study)
    title = f"agentq report: {study.path.name}"
    description = _describe(study)

    md = [
        f"# {title}",
        "",
        *description,
        "",
        f"_{NUMBERS_NOTE}_",
        "",
        "## Runs (final iteration)",
        "",
    ]
    md += [runs.to_markdown(), "", "## Per iteration", "", iterations.to_markdown(), ""]
    md += ["![learning curves](report.png)", ""]
    md += [f"Search tree: {tree_caption}" + (" ([tree.svg](tree.svg))" if svg_path else ""), ""]
    if episodes_path is not None:
        md += [f"Goal by goal: [episodes.csv](episodes.csv), {counted}.", ""]
    md_path = out / "report.md"
    md_path.write_text("\n".join(md))

    body = [f"<h1>{html.escape(title)}</h1>"]
    body += [f"<p>{_inline_md(line)}</p>" for line in description]
    body += [f'<p class="note">{html.escape(NUMBERS_NOTE)}</p>']
    body += [
        f"<h2>Evaluation per iteration</h2><img alt='learning curves' src='{plots.data_uri(pngs['Evaluation per iteration'])}'>"
    ]
    body += ["<h2>Runs (final iteration)</h2>", runs.to_html()]
    for name in ("Sweep", "Pairs and training", "Wall time"):
        if name in pngs:
            body.append(
                f"<h2>{name}</h2><img alt='{name.lower()}' src='{plots.data_uri(pngs[name])}'>"
            )
    body += ["<h2>Per iteration</h2>", iterations.to_html()]
    body += ["<h2>Search tree</h2>", f'<p class="note">{html.escape(tree_caption)}</p>']
    if tree_svg:
        body.append(f'<div class="tree">{tree_svg}</div>')
    if episodes_path is not None:
        body.append(f'<p class="note">Goal by goal: <a href="episodes.csv">episodes.csv</a>, {html.escape(counted)}.</p>')
    body.append(
        f'<p class="note">generated {time.strftime("%Y-%m-%d %H:%M:%S")} by python -m agentq.report</p>'
    )
    page = (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
    html_path = out / "report.html"
    html_path.write_text(page)
    return ReportFiles(html=html_path, markdown=md_path, png=png_path, tree_svg=svg_path, episodes=episodes_path)
