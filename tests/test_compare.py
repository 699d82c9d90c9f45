"""The comparison table: intervals, and rows read from the runs' evaluation files."""

import json
from pathlib import Path

import pytest

from agentq import compare
from agentq.modes import COMMITTED, HOW_PICKED, VERIFIER


def test_wilson_interval_known_values():
    # Wilson 95% intervals as tabulated (e.g. Newcombe 1998): 0/3 -> [0, .5615], 5/10 -> [.2366, .7634].
    lo, hi = compare.wilson_interval(0, 3)
    assert lo == 0.0 and hi == pytest.approx(0.5615, abs=1e-4)
    lo, hi = compare.wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert compare.wilson_interval(3, 3)[1] == 1.0


def test_exact_mcnemar_known_values():
    # Two-sided binomial(n, 1/2) tails: 0 of 5 discordant goals won -> 2/32; 1 of 7 -> 2*8/128; 3 vs 3 -> 1.
    from agentq.intervals import mcnemar_exact

    assert mcnemar_exact(0, 5) == pytest.approx(0.0625) and mcnemar_exact(5, 0) == pytest.approx(0.0625)
    assert mcnemar_exact(1, 6) == pytest.approx(16 / 128) and mcnemar_exact(6, 1) == mcnemar_exact(1, 6)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 7) == pytest.approx(2 / 128)


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
    last_verifier = runs / "agentq" / "iter_002" / "eval" / "search"  # a run from before "verifier"
    _episode(last_verifier, 0, True, 1.0, 20)
    _episode(last_verifier, 1, True, 0.5, 30)
    last_committed = runs / "agentq" / "iter_002" / "eval" / "committed"
    _episode(last_committed, 0, False, 0.25, 40)
    rows = {r["method"]: r for r in compare.table_rows(tmp_path)}
    assert rows["base"]["success_pct"] == 50.0 and rows["base"]["avg_reward"] == 0.5
    assert rows["base"]["model_calls"] == 5.0 and rows["base"]["tasks"] == 2
    verifier = rows[f"Agent Q + MCTS ({HOW_PICKED[VERIFIER]})"]
    assert verifier["success_pct"] == 100.0 and verifier["avg_reward"] == 0.75
    committed = rows[f"Agent Q + MCTS ({HOW_PICKED[COMMITTED]})"]
    assert committed["success_pct"] == 0.0 and committed["avg_reward"] == 0.25 and committed["tasks"] == 1
    assert "best rollout by the env's reward" in HOW_PICKED[VERIFIER] and "no env reward" in HOW_PICKED[COMMITTED]
    assert rows["RFT"]["tasks"] == 0 and rows["Agent-R (zero-shot)"]["tasks"] == 0  # not evaluated / no run
    markdown = compare.to_markdown(list(rows.values()))
    assert "| base | 50.0 [" in markdown and "| RFT | - | - | 0 | - | - |" in markdown
    lines = compare.to_csv(list(rows.values())).splitlines()
    assert lines[0].startswith("method,success_pct") and len(lines) == 1 + len(compare.ROWS) + 1  # + the oracle
    assert rows["scripted oracle"]["tasks"] == 0  # the agentq run wrote no oracle.json
    # A comparison of some methods tables only their rows.
    chosen = tuple(m for m in compare.METHODS if m.name in ("agentq", "rft"))
    labels = [r["method"] for r in compare.table_rows(tmp_path, chosen)]
    assert labels == [r.label for r in compare.ROWS if r.method in ("agentq", "rft", compare.ANCHOR)] + ["scripted oracle"]
    assert "RFT" in labels and "Agent-R (zero-shot)" not in labels


def test_trained_on_counts_the_buffers_examples_not_a_stale_summary(tmp_path):
    # A run killed mid-training keeps the summary written before its examples were built.
    run_dir = tmp_path / "runs" / "rft"
    (run_dir / "iter_002").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("iterations: 2\n")
    stale = {"iterations": [{"iteration": 0, "eval": {}}, {"iteration": 2, "num_examples": 0}]}
    (run_dir / "summary.json").write_text(json.dumps(stale))
    assert compare.trained_on(run_dir, "last") == compare.NOT_EVALUATED  # no examples built yet
    (run_dir / "iter_002" / "examples.jsonl").write_text('{"type": "a"}\n{"type": "b"}\n\n{"type": "c"}\n')
    assert compare.trained_on(run_dir, "last") == 3 and compare.trained_on(run_dir, "base") == compare.NOT_EVALUATED
    rft = next(r for r in compare.table_rows(tmp_path) if r["method"] == "RFT")
    assert rft["examples"] == 3 and rft["tasks"] == 0


def test_the_oracle_row_reads_the_agentq_runs_oracle_file(tmp_path):
    run_dir = tmp_path / "runs" / "agentq"
    run_dir.mkdir(parents=True)
    episodes = [{"task_id": t, "success": t != 2, "score": 1.0 if t != 2 else 0.5, "steps": 5} for t in range(4)]
    oracle = {"policy": "scripted oracle", "split": "test", "max_steps": 40, "num_tasks": 4, "episodes": episodes}
    (run_dir / "oracle.json").write_text(json.dumps(oracle))
    row = compare.table_rows(tmp_path)[-1]
    assert row["method"] == "scripted oracle (test, 40 steps)" and row["source"] == "agentq/oracle"
    assert row["tasks"] == 4 and row["success_pct"] == 75.0 and row["avg_reward"] == 0.875
    assert row["success_ci"] == tuple(100 * x for x in compare.wilson_interval(3, 4))
    assert "| scripted oracle (test, 40 steps) | 75.0 [" in compare.to_markdown([row])


def test_cost_per_success_and_where_the_data_came_from(tmp_path):
    run_dir = tmp_path / "runs" / "agentq"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("iterations: 1\n")
    folder = run_dir / "iter_001" / "eval" / "zero_shot"
    folder.mkdir(parents=True)
    for task, (success, steps, tokens) in enumerate([(True, 3, 30), (False, 15, 150), (True, 4, 40)]):
        trajectory = {"task_id": task, "steps": [{}] * steps, "reward": 1.0, "success": success, "score": float(success)}
        record = {"trajectory": trajectory, "stats": {"policy_calls": steps, "policy_tokens": tokens}}
        (folder / f"task_{task}.json").write_text(json.dumps(record))
    (run_dir / "iter_001" / "seconds.json").write_text(json.dumps({"eval_zero_shot": 90.0}))
    row = next(r for r in compare.table_rows(tmp_path) if r["method"] == "Agent Q (zero-shot)")
    # everything the row spent, over its 2 successes
    assert (row["tokens_per_success"], row["steps_per_success"], row["seconds_per_success"]) == (110.0, 11.0, 45.0)
    assert "| 110 / 11 / 45 |" in compare.to_markdown([row])
    base = next(r for r in compare.table_rows(tmp_path) if r["method"] == "base")
    assert base["tasks"] == 0 and "| - | - | 0 | - | - |" in compare.to_markdown([base])

    assert compare.diagnostics_markdown(run_dir) == ""  # no summary yet
    search = {"pairs": {"outcome": 7, "critic_only": 5, "unmatched": 0, "untried": 3, "against_outcome": 2,
                        "chose_later": 4, "chose_earlier": 1},
              "critic": {"nodes": 9, "kendall_tau": 0.25, "tau_nodes": 4, "top1": 0.5,
                         "first_return_tau": -0.5, "first_return_nodes": 6}}  # fmt: skip
    summary = {"iterations": [{"iteration": 0, "eval": {}}, {"iteration": 1, "num_examples": 12, "search": search}]}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert "| 1 | 12 | 7 | 2 | 5 | 3 | 4 / 1 | 0.25 (4) | 0.50 | -0.50 (6) |" in compare.diagnostics_markdown(run_dir)
    assert "| 0 |" not in compare.diagnostics_markdown(run_dir)  # the base was not evaluated: no line
    _episode(run_dir / "iter_000" / "eval" / "zero_shot", 0, False, 0.25, 5)
    lines = compare.diagnostics_markdown(run_dir).splitlines()
    # Each iteration's line ends with its policy's zero-shot evaluation (iteration 0: the base).
    lo, hi = (100 * x for x in compare.wilson_interval(2, 3))
    assert lines[2] == "| 0 | - | - | - | - | - | - | - | - | - | - | 0.0 [0.0, 79.3] | 0.250 [0.250, 0.250] |"
    assert lines[3].endswith(f"| 66.7 [{lo:.1f}, {hi:.1f}] | 0.667 [0.000, 1.000] |")
    compare.write_table(tmp_path, "python -m agentq.compare --env webshop", (compare.METHODS[0],))
    assert "| 1 | 12 | 7 | 2 | 5 | 3 |" in (tmp_path / "table.md").read_text()
    assert "tokens_per_success" in (tmp_path / "table.csv").read_text().splitlines()[0]


def _played(success, score, *commands):
    return {"success": success, "score": score, "steps": [{"command": c} for c in commands]}


def test_two_policies_are_compared_goal_by_goal_on_the_goals_both_played():
    base = {0: _played(False, 0.5, "search[a]", "click[b]"), 1: _played(True, 1.0, "search[a]"),
            2: _played(True, 1.0, "search[c]"), 3: _played(False, 0.0, "search[d]")}  # fmt: skip
    policy = {0: _played(True, 1.0, "search[a]", "click[c]"), 1: _played(False, 0.25, "search[a]"),
              2: _played(True, 1.0, "search[c]"), 9: _played(True, 1.0)}  # fmt: skip
    a = compare.paired(policy, base)
    # goal 3 (base only) and goal 9 (policy only) are left out
    assert (a["goals"], a["won"], a["lost"], a["p"]) == (3, 1, 1, 1.0)
    assert a["diff"] == pytest.approx((0.5 - 0.75 + 0.0) / 3)
    assert a["lo"] <= a["diff"] <= a["hi"]
    assert a["identical"] == 2  # goals 1 and 2 took the same commands (goal 1 to another score)
    assert compare.paired_cells(a) == ("1 / 1 (1.00)", f"{a['diff']:+.3f} [{a['lo']:+.3f}, {a['hi']:+.3f}]")
    worse = {g: _played(False, 0.0) for g in range(6)}
    better = {g: _played(True, 1.0) for g in range(6)}
    a = compare.paired(worse, better)
    assert (a["won"], a["lost"], a["p"], a["diff"], a["lo"], a["hi"]) == (0, 6, 2 / 64, -1.0, -1.0, -1.0)
    with pytest.raises(ValueError, match="no goal in common"):
        compare.paired({0: better[0]}, {1: better[1]})


def test_out_of_steps_counts_whole_budgets_that_earned_nothing():
    played = [_played(False, 0.0, *["click[x]"] * 15), _played(False, 0.4, *["click[x]"] * 15),
              _played(False, 0.0, "search[a]"), _played(True, 1.0, *["click[x]"] * 15)]  # fmt: skip
    assert compare.out_of_steps(played, 15) == 1 and compare.out_of_steps(played, 16) == 0


def test_a_studys_own_table_is_written_as_markdown_and_csv(tmp_path):
    rows = [{"policy": "base", "success %": "24.0 [18.6, 30.4]", "vs base": "-"}, {"policy": "oracle, 15 steps"}]
    markdown = compare.write_rows(tmp_path, "table_200", rows)
    assert (tmp_path / "table_200.md").read_text() == markdown
    assert markdown.splitlines() == ["| policy | success % | vs base |", "|---|---|---|",
                                     "| base | 24.0 [18.6, 30.4] | - |", "| oracle, 15 steps | - | - |"]  # fmt: skip
    assert (tmp_path / "table_200.csv").read_text().splitlines() == [
        "policy,success %,vs base", 'base,"24.0 [18.6, 30.4]",-', '"oracle, 15 steps",-,-']
    # An appendix (a run's data, say) follows the markdown table and stays out of the CSV.
    with_data = compare.write_rows(tmp_path, "table_200", rows, appendix="\nWhere the data came from.\n")
    assert with_data == markdown + "\nWhere the data came from.\n" == (tmp_path / "table_200.md").read_text()
    assert "data" not in (tmp_path / "table_200.csv").read_text()


def test_a_studys_rows_carry_the_intervals_the_budget_and_the_paired_comparison(tmp_path):
    run_dir = tmp_path / "base"
    (run_dir / "iter_000").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("iterations: 0\neval:\n  max_steps: 2\n")
    folder = run_dir / "iter_000" / "eval" / "zero_shot"
    for task, (success, score, calls) in enumerate([(True, 1.0, 1), (False, 0.0, 2), (False, 0.5, 3)]):
        _episode(folder, task, success, score, calls)
    (folder / "task_1.json").write_text(
        (folder / "task_1.json").read_text().replace('"steps": []', '"steps": [{"command": "x"}, {"command": "x"}]')
    )  # goal 1 used both steps and bought nothing
    (run_dir / "iter_000" / "seconds.json").write_text(json.dumps({"eval_zero_shot": 30.0}))
    base = compare.by_goal(run_dir, 0, "zero_shot")
    assert compare.last_by_goal(run_dir) == base  # iterations: 0, so its last policy is the base
    row = compare.evaluated_row("base", run_dir, "base", "zero_shot")
    lo, hi = (100 * x for x in compare.wilson_interval(1, 3))
    assert row["row"] == "base" and row["goals"] == 3 and row["success %"] == f"33.3 [{lo:.1f}, {hi:.1f}]"
    assert row["avg reward"].startswith("0.500 [") and row[compare.OUT_OF_STEPS] == 1
    assert row["model calls / goal"] == "2.0" and row["per success: tokens / env steps / wall s"] == "- / 2 / 30"
    assert [row[k] for k in compare.AGAINST_BASE] == ["-", "-", "-"]
    policy = {0: base[0], 1: _played(True, 1.0, "y"), 2: _played(False, 0.25, "z")}
    against = compare.study_row("policy", policy, 2, base)
    assert [against[k] for k in compare.AGAINST_BASE[:1] + compare.AGAINST_BASE[2:]] == ["1 / 0 (1.00)", 1]
    assert against[compare.AGAINST_BASE[1]].startswith(f"{(1.0 - 0.25) / 3:+.3f} [")
    assert compare.study_row("base", base, 2, base)[compare.AGAINST_BASE[0]] == "-"  # the base against itself
    with pytest.raises(FileNotFoundError, match="no committed episodes"):
        compare.evaluated_row("base + MCTS", run_dir, "base", "committed")
    assert compare.oracle_study_row(run_dir) == {"row": "scripted oracle", "goals": 0}  # no oracle.json
    oracle = {"split": "test", "max_steps": 2, "episodes": [{"task_id": t, "success": True, "score": 1.0} for t in range(3)]}
    (run_dir / "oracle.json").write_text(json.dumps(oracle))
    lo, hi = (100 * x for x in compare.wilson_interval(3, 3))
    assert compare.oracle_study_row(run_dir) == {
        "row": "scripted oracle (test, 2 steps)", "goals": 3, "success %": f"100.0 [{lo:.1f}, {hi:.1f}]", "avg reward": "1.000"
    }  # fmt: skip


def test_a_curves_rows_read_each_iteration_by_number(tmp_path):
    (tmp_path / "config.yaml").write_text("iterations: 2\neval:\n  max_steps: 2\n")
    scores = {0: (False, 0.5), 1: (True, 1.0), 2: (False, 0.0)}  # iteration -> goal 0's episode
    for iteration, (success, score) in scores.items():
        _episode(tmp_path / f"iter_{iteration:03d}" / "eval" / "zero_shot", 0, success, score, 1)
        (tmp_path / f"iter_{iteration:03d}" / "seconds.json").write_text(json.dumps({"eval_zero_shot": 10.0 + iteration}))
    assert [compare.iteration_index(tmp_path, i) for i in ("base", 1, "last")] == [0, 1, 2]
    pi_1 = compare.evaluated_row("pi_1", tmp_path, 1, "zero_shot", compare.by_goal(tmp_path, 0, "zero_shot"))
    assert pi_1["success %"].startswith("100.0 [") and pi_1["avg reward"].startswith("1.000 [")
    assert pi_1[compare.AGAINST_BASE[0]] == "1 / 0 (1.00)"
    assert pi_1["per success: tokens / env steps / wall s"] == "- / 0 / 11"  # iteration 1's own eval seconds
    assert compare.evaluated_row("pi_2", tmp_path, 2, "zero_shot")["success %"].startswith("0.0 [")


def test_an_agent_r_study_is_anchored_on_the_agent_r_run(tmp_path):
    methods = {m.name: m for m in compare.METHODS}
    study = (methods["agent_r"], methods["agent_r_good"])
    anchor = compare.anchor_of(study)
    assert anchor.name == "agent_r" and compare.anchor_of(compare.METHODS).name == "agentq"
    with pytest.raises(ValueError, match="agentq"):
        compare.anchor_of((methods["rft"], methods["agent_r_good"]))
    with pytest.raises(SystemExit):  # refused before any run starts
        compare.main(["--env", "textcraft", "--methods", "rft,agent_r_good", "--out", str(tmp_path)])
    # As the anchor, agent_r evaluates the base policy and its own recovery prefixes; the
    # ablation trains on agent_r's trees and continues the anchor's failed prefixes.
    own = compare.method_overrides(anchor, anchor, tmp_path)
    assert "eval.base=false" not in own and "eval.recovery=true" in own
    assert not any(o.startswith("eval.recovery_from") for o in own)
    ablation = compare.method_overrides(methods["agent_r_good"], anchor, tmp_path)
    assert "pairs=good_only" in ablation and "eval.base=false" in ablation
    assert f"eval.recovery_from={tmp_path / 'runs' / 'agent_r'}" in ablation
    # A study run from the repository with a relative --out saves a relative path, as paths.run_dir.
    relative = compare.method_overrides(methods["agent_r_good"], anchor, Path("experiments/study"))
    assert "eval.recovery_from=experiments/study/runs/agent_r" in relative
    assert methods["agent_r_good"].shares_collection == "agent_r"
    # In Agent Q's study agent_r is a trained row like the others.
    beside_agentq = compare.method_overrides(anchor, methods["agentq"], tmp_path)
    assert "eval.base=false" in beside_agentq
    assert f"eval.recovery_from={tmp_path / 'runs' / 'agentq'}" in beside_agentq

    runs = tmp_path / "runs"
    for method in ("agent_r", "agent_r_good"):
        (runs / method).mkdir(parents=True)
        (runs / method / "config.yaml").write_text("iterations: 1\n")
    _episode(runs / "agent_r" / "iter_000" / "eval" / "zero_shot", 0, False, 0.0, 40)
    _episode(runs / "agent_r_good" / "iter_001" / "eval" / "zero_shot", 0, True, 1.0, 8)
    oracle = {"split": "test", "max_steps": 40, "episodes": [{"task_id": 0, "success": True, "score": 1.0}]}
    (runs / "agent_r" / "oracle.json").write_text(json.dumps(oracle))
    rows = {r["method"]: r for r in compare.table_rows(tmp_path, study)}
    assert rows["base"]["source"] == "agent_r/base/zero_shot" and rows["base"]["tasks"] == 1
    assert rows["Agent-R, good paths only (zero-shot)"]["success_pct"] == 100.0
    assert rows["scripted oracle (test, 40 steps)"]["source"] == "agent_r/oracle"
    assert "Agent Q (zero-shot)" not in rows and "RFT" not in rows


def test_an_agent_r_study_runs_end_to_end_without_an_agentq_run(tmp_path):
    # The tiny random model: nothing is crafted, so this checks the plumbing (anchor,
    # shared trees, recovery prefixes, the table), not learning.
    # (run_methods, not main: main configures the process's logging, which later tests own)
    study = tuple(m for m in compare.METHODS if m.name in ("agent_r", "agent_r_good"))
    overrides = ["model=tiny", "logger=csv", "collect.num_tasks=1", "eval.num_tasks=1",
                 "agent.sampling.max_new_tokens=8", "search.num_simulations=1"]  # fmt: skip
    compare.run_methods(tmp_path, compare.plan_runs("textcraft", tmp_path, overrides, study), study)
    compare.write_table(tmp_path, "python -m agentq.compare --env textcraft --methods agent_r,agent_r_good", study)
    runs = tmp_path / "runs"
    assert (runs / "agent_r" / "done").exists() and (runs / "agent_r_good" / "done").exists()
    trees = sorted(p.name for p in (runs / "agent_r" / "iter_001" / "collect").glob("task_*.json"))
    assert trees and trees == sorted(p.name for p in (runs / "agent_r_good" / "iter_001" / "collect").glob("task_*.json"))
    good = (runs / "agent_r_good" / "config.yaml").read_text()
    assert "include_revisions: false" in good and f"recovery_from: {runs / 'agent_r'}" in good
    rows = {r["method"]: r for r in compare.table_rows(tmp_path, study)}
    assert rows["base"]["tasks"] == 1 and rows["base, recovery"]["tasks"] == 1  # the anchor's own base episodes
    assert rows["Agent-R, good paths only, recovery"]["tasks"] == 1
    assert "| base | 0.0 [" in (tmp_path / "table.md").read_text()


def test_how_far_episodes_got_when_the_env_names_milestones(tmp_path):
    run_dir = tmp_path / "runs" / "agentq"
    base = run_dir / "iter_000" / "eval" / "zero_shot"
    base.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("iterations: 1\n")
    for task, milestone in enumerate([0, 2, 1, 3]):
        trajectory = {"task_id": task, "steps": [], "reward": 0.0, "success": False, "score": 0.0, "milestone": milestone}
        (base / f"task_{task}.json").write_text(json.dumps({"trajectory": trajectory, "stats": {}}))
    _episode(run_dir / "iter_001" / "eval" / "zero_shot", 0, False, 0.0, 3)  # recorded none (an older file)
    names = ["start", "page", "times", "form", "booked"]
    rows = compare.table_rows(tmp_path, (compare.METHODS[0],))
    table = compare.milestones_markdown(rows, names)
    assert table.splitlines()[0] == (
        "| method | tasks | reached: page | reached: times | reached: form | reached: booked | mean furthest (0-4) |"
    )
    assert table.splitlines()[2] == "| base | 4 | 3 | 2 | 1 | 0 | 1.50 |"
    assert len(table.splitlines()) == 3  # the row without milestones is left out
    assert compare.milestones_markdown(rows, []) == ""  # an env without milestones: no table
    booked = {"task_id": 0, "success": True, "score": 1.0, "steps": 17, "milestone": 4}
    oracle = {"split": "test", "max_steps": 30, "episodes": [booked, booked | {"task_id": 1}], "milestones": names}
    (run_dir / "oracle.json").write_text(json.dumps(oracle))
    compare.write_table(tmp_path, "python -m agentq.compare --env opentable", (compare.METHODS[0],))
    written = (tmp_path / "table.md").read_text()
    assert "| base | 4 | 3 | 2 | 1 | 0 | 1.50 |" in written
    assert "| scripted oracle (test, 30 steps) | 2 | 2 | 2 | 2 | 2 | 4.00 |" in written


def test_a_study_cannot_change_what_a_method_is(tmp_path):
    methods = tuple(m for m in compare.METHODS if m.name in ("agentq", "rft", "traj_dpo"))
    shared, scoped = compare.split_overrides(["logger=csv", "agentq:objective=ipo", "paths.x=a:b"], methods)
    assert shared == ["logger=csv", "paths.x=a:b"] and scoped == {"agentq": ["objective=ipo"], "rft": [], "traj_dpo": []}
    with pytest.raises(ValueError, match="agent_r"):  # scoped to a method the study does not run
        compare.split_overrides(["agent_r:pairs.alpha=1"], methods)
    model = ["model=tiny", "model.adapter=x"]
    # A study's objective for every run would make the RFT row IPO on step pairs.
    with pytest.raises(ValueError, match="_target_ of the rft run is agentq.*, but rft is agentq"):
        compare.plan_runs("webshop", tmp_path, [*model, "+study=webshop_clone_iter"], methods)
    with pytest.raises(ValueError, match="pairs._target_ of the agentq run"):
        compare.plan_runs("webshop", tmp_path, [*model, "pairs=successes"], methods)
    planned = compare.plan_runs("webshop", tmp_path, [*model, "agentq:objective=ipo", "agentq:objective.beta=1.0"], methods)
    assert planned["agentq"][1].objective._target_.endswith("IPOLoss") and planned["agentq"][1].objective.beta == 1.0
    assert planned["rft"][1].objective._target_.endswith("SFTLoss")
    assert planned["traj_dpo"][1].objective._target_.endswith("DPOLoss") and planned["traj_dpo"][1].objective.beta == 0.1
    with pytest.raises(SystemExit):  # main refuses before any run starts
        compare.main(["--env", "webshop", "--methods", "agentq,rft", "--out", str(tmp_path), *model, "+study=webshop_clone_iter"])
    assert not (tmp_path / "runs").exists()
