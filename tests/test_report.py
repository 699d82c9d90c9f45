"""The report: tables equal the summaries, the page is self-contained, a job without a
summary is listed, the tree renderer draws what was explored, the W&B spec builds offline."""

from __future__ import annotations

import csv
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from agentq.compare import by_goal, paired, recorded_by_goal
from agentq.intervals import wilson_interval
from agentq.report.__main__ import main as report_main
from agentq.report.collect import load_study
from agentq.report.page import write_report
from agentq.report.plots import learning_curves
from agentq.report.tree_render import render_tree_svg, select_nodes

# (beta, threshold) -> final results per evaluation mode of the fake jobs; job 2's summary
# is from before the committed mode (the verifier mode was "search"); job 3 has no summary.
VERIFIER = "search (verifier, upper bound)"
JOBS = {
    0: ((0.1, 0.1), {"zero_shot": (0.25, 0.4567), "committed": (0.375, 0.5), "verifier": (0.5, 0.61234)}, 12),
    1: ((0.3, 0.1), {"zero_shot": (0.125, 0.2), "committed": (0.5, 0.6), "verifier": (0.75, 0.80001)}, 7),
    2: ((0.1, 0.3), {"zero_shot": (0.0, 0.0333), "search": (0.375, 0.5)}, 3),
    3: ((0.3, 0.3), None, None),
}
WANDB_ID = "abc123xy"


def small_tree() -> dict:
    """root -> a (expanded, 2 visits) -> {c (terminal fail), d (never stepped into) -> e};
    root -> b (never stepped into); root -> s (terminal success)."""

    def node(i, parent, depth, command, children=(), **kw):
        return {
            "id": i,
            "parent": parent,
            "depth": depth,
            "command": command,
            "action": f"COMMAND: {command}",
            "children": list(children),
            "critic_score": kw.pop("critic", 0.0),
            "q_mcts": kw.pop("q_mcts", 0.0),
            "visits": kw.pop("visits", 0),
            "expanded_env": kw.pop("expanded", False),
            "reward": 0.0,
            "terminal": False,
            "success": False,
            **kw,
        }

    nodes = [
        node(0, None, 0, "", (1, 2, 3), visits=3, expanded=True),
        node(1, 0, 1, "go north", (4, 5), visits=2, expanded=True, q_mcts=0.5, critic=1.0, q=0.75),
        node(2, 0, 1, "go south", critic=0.25, q=0.125),
        node(
            3,
            0,
            1,
            "take key",
            visits=1,
            expanded=True,
            terminal=True,
            success=True,
            reward=1.0,
            q=1.0,
        ),
        node(4, 1, 2, "open door", visits=1, expanded=True, terminal=True, reward=0.0, q=0.0),
        node(5, 1, 2, "look", (6,), q=0.0),
        node(6, 5, 3, "never drawn", q=0.0),
    ]
    return {"task_id": 7, "alpha": 0.5, "nodes": nodes}


def summary(results: dict, pairs: int) -> dict:
    def metrics(success, reward):
        return {
            "success_rate": success,
            "avg_reward": reward,
            "num_tasks": 8,
            "success_pct": 100 * success,
            "score": 100 * reward,
            "avg_policy_calls": 4.0,
        }

    base = {
        "iteration": 0,
        "eval": {m: metrics(0.0, 0.0) for m in results},
        "seconds": {"eval_zero_shot": 1.0},
    }
    final = {
        "iteration": 1,
        "eval": {m: metrics(*v) for m, v in results.items()},
        "num_pairs": pairs,
        "train": {"loss": 0.6543, "reward_accuracy": 0.625, "steps": 3},
        "seconds": {"collect": 4.0, "train": 2.5, "eval_zero_shot": 1.0, "eval_search": 3.5},
    }
    return {"iterations": [base, final], "wall_seconds": 42.5}


@pytest.fixture
def multirun(tmp_path) -> Path:
    root = tmp_path / "multirun"
    (root).mkdir()
    (root / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    for job, ((beta, theta), results, pairs) in JOBS.items():
        job_dir = root / str(job)
        (job_dir / ".hydra").mkdir(parents=True)
        overrides = ["+experiment=smoke", f"objective.beta={beta}", f"pairs.threshold={theta}"]
        (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        config = {
            "iterations": 1,
            "objective": {"beta": beta},
            "pairs": {"threshold": theta},
            "logger": {"wandb": {"project": "agentq-test", "group": None}},
        }
        (job_dir / "config.yaml").write_text(yaml.safe_dump(config))
        if results is not None:
            (job_dir / "summary.json").write_text(json.dumps(summary(results, pairs)))
    collect = root / "0" / "iter_001" / "collect"
    collect.mkdir(parents=True)
    (collect / "task_7.json").write_text(json.dumps({"tree": small_tree(), "trajectories": []}))
    tiny = small_tree()
    tiny["nodes"] = tiny["nodes"][:1]
    tiny["nodes"][0]["children"] = []
    (collect / "task_8.json").write_text(json.dumps({"tree": tiny, "trajectories": []}))
    (root / "2" / "wandb" / f"offline-run-20261121_182403-{WANDB_ID}").mkdir(parents=True)
    return root


def table_rows(markdown: str, heading: str) -> list[dict[str, str]]:
    """The rows of the table under ``## heading`` as dicts."""
    section = markdown.split(f"## {heading}", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    split = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    header, rows = split[0], split[2:]
    end = next((i for i, r in enumerate(rows) if len(r) != len(header)), len(rows))
    return [dict(zip(header, r, strict=True)) for r in rows[:end]]


def test_study_reads_swept_keys_and_statuses(multirun):
    study = load_study(multirun)
    assert study.kind == "multirun"
    assert study.swept == ["objective.beta", "pairs.threshold"]
    assert study.common == {"experiment": "smoke"}
    assert [r.status for r in study.runs] == ["complete", "complete", "complete", "no summary"]
    assert study.runs[2].wandb_ids == [WANDB_ID]


def test_markdown_table_equals_the_summaries(multirun, tmp_path):
    files = write_report(load_study(multirun), tmp_path / "out")
    rows = table_rows(files.markdown.read_text(), "Runs (final iteration)")
    assert [r["run"] for r in rows] == ["0", "1", "2", "3"]
    for row, (job, ((beta, theta), results, pairs)) in zip(rows, JOBS.items(), strict=True):
        assert (row["β"], row["θ"]) == (str(beta), str(theta))
        if results is None:
            assert row["status"] == "no summary"
            assert row["zero-shot success"] == row[f"{VERIFIER} reward"] == "-"
            continue
        data = json.loads((multirun / str(job) / "summary.json").read_text())
        final = data["iterations"][-1]["eval"]
        for mode, name in (("zero_shot", "zero-shot"), ("committed", "search (committed)"), ("verifier", VERIFIER)):
            result = final.get(mode, final.get("search" if mode == "verifier" else mode))
            if result is None:  # job 2 has no committed row
                assert row[f"{name} success"] == row[f"{name} reward"] == "-"
                continue
            lo, hi = wilson_interval(round(result["success_rate"] * 8), 8)  # 8 tasks per fake summary
            assert row[f"{name} success"] == f"{result['success_rate']:.3f} [{lo:.2f}, {hi:.2f}]"
            assert row[f"{name} reward"] == f"{result['avg_reward']:.3f}"
        assert row["pairs (all iterations)"] == str(pairs)
        assert row["wall s"] == "42.5"
    per_iteration = table_rows(files.markdown.read_text(), "Per iteration")
    assert len(per_iteration) == 6  # two iterations of three jobs; the failed job has none
    first = per_iteration[1]
    assert (
        first["train loss"],
        first["train accuracy"],
        first["collect s"],
        first["eval_search s"],
    ) == ("0.654", "0.625", "4.0", "3.5")


def test_html_is_self_contained(multirun, tmp_path):
    files = write_report(load_study(multirun), tmp_path / "out")
    page = files.html.read_text()
    assert page.count("data:image/png;base64,") >= 3  # curves, sweep, pairs/training, wall time
    text = re.sub(
        r"""src=['"]data:image/png;base64,[A-Za-z0-9+/=]+['"]""", "", page
    )  # base64 may spell anything
    assert not re.search(r"""(src|href)\s*=|url\(|<link|<script""", text)
    assert "http" not in text
    assert "no summary" in page and "<svg" in page and "go north" in page
    assert files.png.read_bytes().startswith(b"\x89PNG")


def test_curves_draw_only_the_modes_a_study_evaluated(multirun, tmp_path):
    assert len(learning_curves(load_study(multirun)).axes) == 2 * 3  # zero-shot, committed, verifier
    job = tmp_path / "zero_shot_only"
    job.mkdir()
    (job / "config.yaml").write_text(yaml.safe_dump({"iterations": 1}))
    (job / "summary.json").write_text(json.dumps(summary({"zero_shot": (0.25, 0.4)}, 3)))
    figure = learning_curves(load_study(job))
    assert [ax.get_title() for ax in figure.axes] == ["zero-shot: success rate", "zero-shot: average reward"]


def test_a_single_run_and_the_cli(multirun, tmp_path, capsys):
    report_main([str(multirun / "1"), "--out", str(tmp_path / "one")])
    text = (tmp_path / "one" / "report.md").read_text()
    rows = table_rows(text, "Runs (final iteration)")
    assert (
        len(rows) == 1
        and rows[0][f"{VERIFIER} success"] == "0.750 [0.41, 0.93]"
        and rows[0][f"{VERIFIER} reward"] == "0.800"
        and rows[0]["search (committed) success"] == "0.500 [0.22, 0.78]"
    )
    assert "no search tree found" in text  # job 1 collected nothing
    assert "report.html" in capsys.readouterr().out


def test_a_job_dir_without_anything_but_hydra_is_listed(multirun, tmp_path):
    refused = multirun / "4"
    (refused / ".hydra").mkdir(parents=True)
    (refused / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["objective.beta=9"]))
    (refused / "refused.txt").write_text("search X needs a 'rank' critic\n")
    files = write_report(load_study(multirun), tmp_path / "out")
    row = table_rows(files.markdown.read_text(), "Runs (final iteration)")[-1]
    assert row["run"] == "4" and row["status"].startswith("refused: search X needs")


def test_tree_renderer_draws_the_explored_part():
    tree = small_tree()
    order, _ = select_nodes(tree, max_nodes=40)
    assert order == [0, 1, 2, 3, 4, 5]  # breadth first; node 6's parent was never stepped into
    svg = render_tree_svg(tree, standalone=True)
    root = ET.fromstring(svg)  # well-formed XML
    drawn = [int(g.get("data-node")) for g in root.iter("{http://www.w3.org/2000/svg}g")]
    assert drawn == order
    assert "never drawn" not in svg
    assert "Q=0.750  N=2" in svg and "critic=1.000" in svg  # node 1
    assert "R=1.000 success" in svg and "R=0.000 fail" in svg
    assert "stroke-dasharray" in svg  # unexpanded children are dashed
    capped = render_tree_svg(tree, max_nodes=3)
    assert (
        capped.count("<rect") == 3
        and "take key" not in capped
        and "explored nodes beyond the cap" in capped
    )
    assert "xmlns" not in capped  # inline in HTML: no namespace URL


def test_parent_is_centred_over_its_children():
    from agentq.report.tree_render import layout

    order, nodes = select_nodes(small_tree(), max_nodes=40)
    pos = layout(order, nodes)
    assert pos[1][0] == (pos[4][0] + pos[5][0]) / 2 and pos[4][1] == 2
    assert len({p for p in pos.values()}) == len(pos)  # no two boxes on one spot


def test_wandb_report_spec_builds_offline(multirun, tmp_path, monkeypatch):
    wr = pytest.importorskip("wandb_workspaces.reports.v2")
    import wandb

    monkeypatch.delenv("WANDB_API_KEY", raising=False)

    def no_network(*args, **kwargs):
        raise AssertionError("the offline W&B report touched the API")

    monkeypatch.setattr(wandb, "Api", no_network)
    from agentq.report.wandb_report import build_report, write_wandb_report

    study = load_study(multirun)
    report = build_report(study, entity="me")
    assert report.project == "agentq-test"
    kinds = [type(b).__name__ for b in report.blocks]
    assert kinds == ["H2", "MarkdownBlock", "H2", "PanelGrid"]
    markdown, grid = report.blocks[1].text, report.blocks[3]
    assert (
        "| 1 | complete | 0.3 | 0.1 | 1 | 0.125 [0.02, 0.47] | 0.200 | 0.500 [0.22, 0.78] | 0.600 "
        "| 0.750 [0.41, 0.93] | 0.800 | 7 | 42.5 |"
    ) in markdown
    (runset,) = grid.runsets
    assert WANDB_ID in runset.filters and runset.project == "agentq-test"
    lines = [p for p in grid.panels if isinstance(p, wr.LinePlot)]
    assert {getattr(y, "name", y) for p in lines for y in p.y} == {
        f"eval/{m}/{k}" for m in ("zero_shot", "committed", "verifier") for k in ("success_rate", "avg_reward")
    }
    assert any(isinstance(p, wr.ParallelCoordinatesPlot) for p in grid.panels)

    path, url = write_wandb_report(study, tmp_path)
    assert url is None
    record = json.loads(path.read_text())
    assert record["saved"] is False and WANDB_ID in record["runset_filter"]
    spec = json.dumps(record["viewspec"])
    assert spec.count("Run History Line Plot") == 2 * 3 and '"op": "IN"' in spec and WANDB_ID in spec


def test_html_report_does_not_need_wandb_workspaces(multirun, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb_workspaces", None)
    monkeypatch.setitem(sys.modules, "wandb_workspaces.reports", None)
    monkeypatch.setitem(sys.modules, "wandb_workspaces.reports.v2", None)
    files = write_report(load_study(multirun), tmp_path / "out")
    assert files.html.exists()
    from agentq.report.wandb_report import build_report

    with pytest.raises(ImportError, match="pip install wandb-workspaces"):
        build_report(load_study(multirun))


def test_the_runs_table_ends_with_the_scripted_oracle(multirun, tmp_path):
    oracle = {
        "policy": "scripted oracle", "env": "envs.textcraft:agentq/TextCraft-v0", "split": "test",
        "max_steps": 40, "num_tasks": 8, "success_rate": 1.0, "avg_reward": 1.0, "cache_key": "k",
    }  # fmt: skip
    for job in (0, 1, 2):  # the same goals and budget in every job: one row
        path = multirun / str(job) / "summary.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"oracle": oracle}))
    files = write_report(load_study(multirun), tmp_path / "out")
    rows = table_rows(files.markdown.read_text(), "Runs (final iteration)")
    assert [r["run"] for r in rows] == ["0", "1", "2", "3", "scripted oracle (test, 40 steps)"]
    assert rows[-1]["status"] == "oracle, 8 tasks"
    assert (rows[-1]["zero-shot success"], rows[-1]["zero-shot reward"]) == ("1.000 [0.68, 1.00]", "1.000")
    assert rows[-1]["β"] == rows[-1]["wall s"] == "-"


def test_episodes_csv_keeps_every_evaluation_goal_by_goal(multirun, tmp_path):
    """The run folders are not committed; episodes.csv keeps what a later paired row needs."""

    def episode(task_id, commands, success, score):
        steps = [{"command": c} for c in commands]
        trajectory = {"task_id": task_id, "steps": steps, "success": success, "score": score}
        return json.dumps({"trajectory": trajectory, "stats": {}})

    job = multirun / "0"
    for iteration, mode, task_id, commands, success, score in [
        (0, "zero_shot", 12, ["search[a | b]", "click[Buy Now]"], False, 0.5),
        (0, "zero_shot", 3, ["search[x, y]"], False, 0.0),
        (1, "zero_shot", 3, ["search[x, y]", "click[b1]", "click[Buy Now]"], True, 1.0),
        (1, "search_committed", 3, [], False, 0.0),
    ]:
        folder = job / f"iter_{iteration:03d}" / "eval" / mode
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"task_{task_id}.json").write_text(episode(task_id, commands, success, score))
    (job / "iter_001" / "eval" / "zero_shot" / "task_5.json").write_text("{")  # a partial write

    files = write_report(load_study(multirun), tmp_path / "out")
    with files.episodes.open() as f:
        rows = list(csv.DictReader(f))
    got = [(r["run"], r["iteration"], r["mode"], r["task_id"], r["success"], r["score"], r["steps"]) for r in rows]
    assert got == [
        ("0", "0", "zero_shot", "3", "False", "0.0", "1"),
        ("0", "0", "zero_shot", "12", "False", "0.5", "2"),  # by task id, not by file name
        ("0", "1", "search_committed", "3", "False", "0.0", "0"),
        ("0", "1", "zero_shot", "3", "True", "1.0", "3"),
    ]
    assert json.loads(rows[1]["commands"]) == ["search[a | b]", "click[Buy Now]"]
    assert "[episodes.csv](episodes.csv), 4 evaluation episodes" in files.markdown.read_text()
    assert '<a href="episodes.csv">episodes.csv</a>, 4 evaluation episodes' in files.html.read_text()
    assert write_report(load_study(multirun / "1"), tmp_path / "none").episodes is None  # nothing evaluated

    # Read back in place of the run folder: the same goals, outcomes and commands as the episodes.
    (job / "iter_001" / "eval" / "zero_shot" / "task_5.json").unlink()  # compare reads whole files only
    for iteration, mode in ((0, "zero_shot"), (1, "zero_shot"), (1, "search_committed")):
        recorded = recorded_by_goal(files.episodes, "0", iteration, mode)
        assert recorded == {
            task_id: {k: t[k] for k in ("task_id", "success", "score", "steps")}
            for task_id, t in by_goal(job, iteration, mode).items()
        }
    pair = paired(recorded_by_goal(files.episodes, "0", 1), by_goal(job, 0, "zero_shot"))
    assert (pair["goals"], pair["won"], pair["lost"], pair["identical"]) == (1, 1, 0, 0)
    with pytest.raises(ValueError, match="no zero_shot episodes of run '1' at iteration 0"):
        recorded_by_goal(files.episodes, "1", 0)
