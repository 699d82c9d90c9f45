"""The comparison table: intervals, and rows read from the runs' evaluation files."""

import json

import pytest

from agentq import compare


def test_wilson_interval_known_values():
    # Wilson 95% intervals as tabulated (e.g. Newcombe 1998): 0/3 -> [0, .5615], 5/10 -> [.2366, .7634].
    lo, hi = compare.wilson_interval(0, 3)
    assert lo == 0.0 and hi == pytest.approx(0.5615, abs=1e-4)
    lo, hi = compare.wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert compare.wilson_interval(3, 3)[1] == 1.0


def test_bootstrap_interval_brackets_the_mean_and_is_seeded():
    values = [0.0, 0.5, 1.0, 1.0]
    lo, hi = compare.bootstrap_interval(values)
    assert lo <= sum(values) / 4 <= hi and 0.0 <= lo < hi <= 1.0
    assert compare.bootstrap_interval(values) == (lo, hi)
    assert compare.bootstrap_interval([0.3, 0.3]) == (pytest.approx(0.3), pytest.approx(0.3))


def _episode(folder, task, success, score, calls):
    folder.mkdir(parents=True, exist_ok=True)
    trajectory = {"task_id": task, "steps": [], "reward": score, "success": success, "score": score}
    (folder / f"task_{task}.json").write_text(json.dumps({"trajectory": trajectory, "stats": {"policy_calls": calls}}))


def test_table_rows_come_from_the_evaluation_files(tmp_path):
    runs = tmp_path / "runs"
    for method in ("agentq", "rft"):
        (runs / method).mkdir(parents=True)
        (runs / method / "config.yaml").write_text("iterations: 2\n")
    base = runs / "agentq" / "iter_000" / "eval" / "zero_shot"
    _episode(base, 0, False, 0.0, 4)
    _episode(base, 1, True, 1.0, 6)
    last_search = runs / "agentq" / "iter_002" / "eval" / "search"
    _episode(last_search, 0, True, 1.0, 20)
    _episode(last_search, 1, True, 0.5, 30)
    rows = {r["method"]: r for r in compare.table_rows(tmp_path)}
    assert rows["base"]["success_pct"] == 50.0 and rows["base"]["avg_reward"] == 0.5
    assert rows["base"]["model_calls"] == 5.0 and rows["base"]["tasks"] == 2
    assert rows["Agent Q + MCTS"]["success_pct"] == 100.0 and rows["Agent Q + MCTS"]["avg_reward"] == 0.75
    assert rows["RFT"]["tasks"] == 0 and rows["Agent-R (zero-shot)"]["tasks"] == 0  # not evaluated / no run
    markdown = compare.to_markdown(list(rows.values()))
    assert "| base | 50.0 [" in markdown and "| RFT | - | - | 0 | - | - |" in markdown
    lines = compare.to_csv(list(rows.values())).splitlines()
    assert lines[0].startswith("method,success_pct") and len(lines) == 1 + len(compare.ROWS)
    # A comparison of some methods tables only their rows.
    chosen = tuple(m for m in compare.METHODS if m.name in ("agentq", "rft"))
    labels = [r["method"] for r in compare.table_rows(tmp_path, chosen)]
    assert labels == [r.label for r in compare.ROWS if r.method in ("agentq", "rft")]
    assert "RFT" in labels and "Agent-R (zero-shot)" not in labels
