"""The benchmark table's judging and re-rendering (no timing here: see benchmarks/)."""

import json

from benchmarks import run_all


def mcts_results(tree_sims_per_min: float, identical: bool = True) -> dict:
    mode = {
        "policy_computed_tokens": 300,
        "policy_reused_tokens": 600,
        "critic_computed_tokens": 100,
        "critic_reused_tokens": 0,
    }
    return {
        "modes": {
            "none": {**mode, "sims_per_min": 2.0},
            "tree": {**mode, "sims_per_min": tree_sims_per_min},
        },
        "identical": {"tree": identical},
    }


def test_mcts_row_judges_the_ratio_and_the_trees():
    row = run_all.mcts_row(mcts_results(5.0))
    assert (row.ratio, row.met, row.reason) == ("2.50x", True, "")
    slow = run_all.mcts_row(mcts_results(3.0))
    assert slow.ratio == "1.50x" and slow.met is False
    assert "reused 60% of prompt tokens" in slow.reason
    changed = run_all.mcts_row(mcts_results(5.0, identical=False))
    assert changed.met is False and changed.reason == "the cache changed the trees"


def test_render_rejudges_saved_figures(tmp_path):
    saved = tmp_path / "table.json"
    machine = {
        "cpu": "test cpu", "avx512_bf16": False, "cores": 2, "ram_gb": 1.0, "python": "3",
        "torch": "t", "transformers": "x", "trl": "y", "threads": 2, "date": "today",
        "git": "abc", "load_average": 0.5,
    }  # fmt: skip
    outcome = {"status": "ok", "argv": [], "seconds": 1.0, "results": mcts_results(3.0), "report": "",
               "row": {"measured": "stale", "ratio": "stale", "met": True, "reason": ""}}  # fmt: skip
    failed = {"status": "error", "detail": "RuntimeError: boom", "argv": []}
    saved.write_text(json.dumps({"machine": machine, "command": "python -m benchmarks.run_all",
                                 "benchmarks": {"mcts": outcome, "dpo": failed}}))  # fmt: skip
    text = run_all.main(["--render", str(saved)]).read_text()
    mcts_line = next(line for line in text.splitlines() if line.startswith("| MCTS"))
    assert "1.50x" in mcts_line and "**not met**" in mcts_line and "stale" not in mcts_line
    assert "RuntimeError: boom" in text
    assert "test cpu" in text and "`python -m benchmarks.run_all`" in text


def test_update_reruns_some_and_keeps_the_others(tmp_path, monkeypatch):
    out = tmp_path / "table.md"
    fake = {"mcts": mcts_results(3.0), "mcts_tail": mcts_results(5.0)}

    def run_one(bench, quick):
        return {"status": "ok", "argv": [], "seconds": 1.0, "results": fake[bench.name], "report": "",
                "row": bench.row(fake[bench.name]).__dict__}  # fmt: skip

    monkeypatch.setattr(run_all, "run_one", run_one)
    run_all.main(["--only", "mcts", "--out", str(out)])
    assert "| MCTS sims/min, tree KV reuse vs none, actions cut" not in out.read_text()
    text = run_all.main(["--only", "mcts_tail", "--update", "--out", str(out)]).read_text()
    lines = [line for line in text.splitlines() if line.startswith("| MCTS")]
    assert len(lines) == 2 and "1.50x" in lines[0] and "2.50x" in lines[1]
    assert "run_all --only mcts --out" in text and "; then python -m benchmarks.run_all --only mcts_tail --update" in text
    assert set(json.loads((tmp_path / "table.json").read_text())["benchmarks"]) == {"mcts", "mcts_tail"}


def throughput_results(speedup: float, bf16_gap: float) -> dict:
    sides = {"per_pair_fp32": 10.0, "grouped_bf16": 10.0 * speedup, "grouped_fp32": 8.0 * speedup}
    batch = {
        "batch_size": 4, "pairs_per_min": sides, "speedup_grouped_bf16": speedup, "speedup_grouped_fp32": 0.8 * speedup,
        "loss_abs_diff_grouped_fp32": 1e-7, "loss_abs_diff_grouped_bf16": bf16_gap,
    }  # fmt: skip
    return {"nodes": 4, "k": 5, "by_batch_size": [batch]}


def test_dpo_throughput_row_needs_3x_pairs_per_minute_and_the_bf16_loss_within_1e_3():
    row = run_all.dpo_throughput_row(throughput_results(3.5, 4e-4))
    assert row.met is True and row.ratio.startswith("3.50x") and "(b) grouped bf16 35.00" in row.measured
    slow = run_all.dpo_throughput_row(throughput_results(2.0, 4e-4))
    assert slow.met is False and "below 3x with the loss within 1e-3 at batch 4" in slow.reason
    drifted = run_all.dpo_throughput_row(throughput_results(3.5, 5e-3))  # fp32 2.8x, bf16 off by 5e-3
    assert drifted.met is False and "bf16 moves the loss by more than 1e-3" in drifted.reason
    fp32 = run_all.dpo_throughput_row(throughput_results(4.0, 5e-3))  # fp32 3.2x within 1e-7: met without bf16
    assert fp32.met is True and "bf16 moves the loss" in fp32.reason


def hf_dtype_results(mcts_ratio: float, eval_ratio: float, identical: int) -> dict:
    side = {"sims_per_min": 4.0, "episodes_per_min": 2.0, "goals": 3, "load_average": [2.0, 2.0]}
    return {
        "agreement": {"states": 50, "identical_commands": identical},
        "mcts": {"float32": side, "bfloat16": side | {"sims_per_min": 4.0 * mcts_ratio}, "ratio": mcts_ratio},
        "eval": {"float32": side, "bfloat16": side | {"episodes_per_min": 2.0 * eval_ratio}, "ratio": eval_ratio},
    }


def test_the_bf16_engine_row_needs_both_speedups_and_the_greedy_commands():
    row = run_all.engine_hf_bf16_row(hf_dtype_results(1.6, 1.5, 45))
    assert row.met is True and row.ratio == "MCTS 1.60x, episodes 1.50x, 90% commands" and "4.00 / 6.40 sims/min" in row.measured
    slow = run_all.engine_hf_bf16_row(hf_dtype_results(1.2, 1.6, 50))
    assert slow.met is False and slow.reason == "MCTS below 1.5x"
    flipped = run_all.engine_hf_bf16_row(hf_dtype_results(2.0, 2.0, 44))
    assert flipped.met is False and "near-tied greedy tokens" in flipped.reason


def batched_results(hf_rate: float, batched_rate: float, commands: int) -> dict:
    def side(rate, concurrency, engine=None):
        out = {"sims_per_min": rate, "sims_per_cpu_min": rate, "episodes_per_min": rate, "steps_per_min": rate,
               "goals": 4 * concurrency, "concurrency": concurrency, "avg_steps": 5.0, "avg_reward": 0.4,
               "load_average": [2.0, 2.0]}  # fmt: skip
        return out | ({"engine": engine} if engine else {})

    engine = {"seconds": {"shared_steps": 30.0, "prefill": 60.0, "critic": 10.0}}
    ratio = batched_rate / hf_rate
    return {
        "agreement": {"states": 50, "identical_completions": commands, "identical_commands": commands, "mean_logprob_gap": 1e-5},
        "mcts": {"hf": side(hf_rate, 1), "hf_batched": side(batched_rate, 16, engine), "ratio_cpu": ratio, "ratio_wall": ratio},
        "eval": {"hf": side(hf_rate, 1), "hf_batched": side(batched_rate, 16, engine), "ratio": ratio, "ratio_steps": ratio},
    }


def test_the_batched_engine_rows_judge_the_ratios_and_say_where_the_time_went():
    fast, slow = batched_results(2.0, 25.0, 50), batched_results(2.0, 8.0, 44)
    assert run_all.batched_mcts_row(fast).met and run_all.batched_eval_row(fast).met
    row = run_all.batched_mcts_row(slow)
    assert (row.ratio, row.met) == ("4.0x per CPU-min, 4.0x wall", False)
    assert "prefill 60%, shared_steps 30%, critic 10%" in row.reason
    assert "10x needs fewer tokens" not in row.reason  # no ceiling measured
    slow["mcts"]["ceiling"] = {"tokens": 12345, "ratio_cpu": 3.25}
    assert "ran (12,345) cost a token of a 256-token prefill" in run_all.batched_mcts_row(slow).reason
    assert "the ratio would be 3.2x per CPU-min" in run_all.batched_mcts_row(slow).reason
    assert run_all.batched_eval_row(slow).met is False
    assert run_all.batched_agreement_row(fast).met and not run_all.batched_agreement_row(slow).met


def test_the_openvino_batches_row_needs_sequential_requests_bitwise_and_reports_the_concurrent_ones():
    def counts(samples: int, other_tokens: int = 0, other_logprob: int = 0) -> dict:
        identical = samples - other_tokens - other_logprob
        return {"samples": samples, "identical": identical, "other_logprob": other_logprob,
                "other_tokens": other_tokens, "max_logprob_gap": 1e-4 if other_logprob else 0.0}  # fmt: skip

    def results(sequential_drift: int) -> dict:
        cases = {k: {"sequential_again": counts(12), "concurrent": counts(60, 5, 50)} for k in ("k=1", "k=3", "k=1..3")}
        cases["k=3"]["sequential_again"] = counts(12, other_logprob=sequential_drift)
        return {"model": "tiny", "load_average": [1.0, 1.0, 1.0], **cases}

    row = run_all.openvino_batches_row(results(0))
    assert row.met is True and row.ratio == "sequential 36/36 identical"
    assert "k=1: 5/60 other tokens, 50 other log-probs" in row.measured
    assert run_all.openvino_batches_row(results(1)).met is False
