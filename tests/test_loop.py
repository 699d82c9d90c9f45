"""End-to-end runs of the whole loop with the tiny random model (slow tier)."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from agentq.loop import run
from tests.conftest import ROOT, fit_tiny_dpo

pytestmark = pytest.mark.slow


def check_summary(summary: dict, iterations: int, modes=("zero_shot", "committed", "verifier"), base: bool = True) -> None:
    assert [it["iteration"] for it in summary["iterations"]] == list(range(iterations + 1))
    for it in summary["iterations"]:
        if it["iteration"] == 0 and not base:
            assert it["eval"] == {}
            continue
        assert set(it["eval"]) == set(modes)
        for mode in modes:
            ev = it["eval"][mode]
            assert 0.0 <= ev["success_rate"] <= 1.0 and 0.0 <= ev["avg_reward"] <= 1.0
            assert ev["num_tasks"] > 0
            assert ev["score"] == pytest.approx(100 * ev["avg_reward"])
        if it["iteration"] > 0:
            assert it["num_examples"] > 0
            assert set(it["seconds"]) >= {"collect", "train"}
            # The process's peak memory when each phase ended (a resumed phase: its own process's).
            assert set(it["peak_rss_gb"]) == set(it["seconds"]) and min(it["peak_rss_gb"].values()) > 0
            assert set(it["train"]) >= {"loss", "reward_accuracy"}
            search = it["search"]  # agentq.data.diagnostics of the iteration's trees and pairs
            assert set(search["critic"]) == {"nodes", "kendall_tau", "tau_nodes", "top1", "first_return_tau", "first_return_nodes"}
            pairs = search["pairs"]  # every pair outcome-backed or critic-only; "untried" counts some of either
            assert pairs["unmatched"] == 0 and pairs["outcome"] + pairs["critic_only"] == it["num_examples"]
            assert 0 <= pairs["untried"] <= it["num_examples"]
    assert summary["wall_seconds"] > 0
    assert summary["decoding"]["dpo_reference"] in ("the trainer's forward pass", "logged at sampling (the HF engine, the trainer's numerics)")


def test_smoke_loop_trains_the_adapter_only(make_cfg, tmp_path):
    cfg = make_cfg("+experiment=smoke")
    summary = run(cfg)
    check_summary(summary, iterations=1)
    run_dir = Path(cfg.paths.run_dir)
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    assert (run_dir / "config.yaml").exists()
    assert list((run_dir / "iter_001" / "collect").glob("task_*.json"))
    # The saved adapter moved away from its initialisation (LoRA B starts at zero) ...
    adapter = load_file(run_dir / "iter_001" / "adapter" / "adapter_model.safetensors")
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and any(v.abs().max() > 0 for v in lora_b)
    # ... and it holds adapter weights only, not the base model.
    assert all("lora_" in k for k in adapter)


def test_training_changes_lora_and_not_base(tmp_path):
    from agentq.models.loading import TinyRandomModel
    from agentq.records.examples import StepPair

    model, tokenizer = TinyRandomModel().load()
    base_before = {k: v.clone() for k, v in model.state_dict().items()}
    prompt = [{"role": "user", "content": "Goal: craft a stick."}]
    pairs = [
        StepPair(0, 0, prompt, f"COMMAND: get {i} planks", f"COMMAND: jump {i}", [], [], -5.0, -6.0, 1.0, 0.0, 1, 1)
        for i in range(4)
    ]
    peft_model, metrics = fit_tiny_dpo(model, tokenizer, pairs, tmp_path, max_epochs=3)
    assert metrics["steps"] == 6 and metrics["reward_accuracy"] > 0.5
    lora = {k: v for k, v in peft_model.named_parameters() if "lora_B" in k}
    assert lora and all(v.abs().max() > 0 for v in lora.values())
    base_after = peft_model.get_base_model().state_dict()
    for key, before in base_before.items():
        after_key = key if key in base_after else key.replace(".weight", ".base_layer.weight")
        assert torch.equal(base_after[after_key], before), key
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()


def _run_py(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "run.py"), *args]


def test_multirun_sweep_writes_one_summary_per_job(tmp_path):
    sweep_dir = tmp_path / "sweep"
    done = subprocess.run(
        _run_py(
            "-m", "+experiment=smoke", "objective.beta=0.1,0.3", "search.num_actions=2,3",
            f"hydra.sweep.dir={sweep_dir}", "eval.search=false", "eval.num_tasks=1",
        ),
        cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = sorted(sweep_dir.glob("*/summary.json"))
    assert len(summaries) == 4
    combos = set()
    for path in summaries:
        cfg = OmegaConf.load(path.parent / "config.yaml")
        combos.add((cfg.objective.beta, cfg.search.num_actions))
        assert len(json.loads(path.read_text())["iterations"]) == 2
    assert combos == {(0.1, 2), (0.1, 3), (0.3, 2), (0.3, 3)}


def test_training_runs_with_no_engine_thread_alive_and_the_engine_serves_again_after(make_cfg, monkeypatch):
    # An idle decoding thread keeps its OpenMP team and slows training (benchmarks/bench_idle_thread.py).
    import threading

    import agentq.loop

    alive_during_fit = []

    def fit(*args, **kwargs):
        alive_during_fit.extend(t.name for t in threading.enumerate() if "engine" in t.name)
        return real_fit(*args, **kwargs)

    real_fit = agentq.loop.fit
    monkeypatch.setattr(agentq.loop, "fit", fit)
    cfg = make_cfg("+experiment=smoke", "engine=hf_batched", "eval.base=false", "eval.search=false", "eval.num_tasks=1")
    summary = run(cfg)
    assert alive_during_fit == []
    assert summary["iterations"][-1]["eval"]["zero_shot"]["num_tasks"] == 1  # decoded after training


def test_a_run_stopped_by_sigterm_in_training_exits_as_killed(make_cfg, monkeypatch):
    # Lightning turns SIGTERM into SIGTERMException, a SystemExit(0): a sweep would count the run as done.
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    import agentq.loop

    def fit(*args, **kwargs):
        raise SIGTERMException()

    monkeypatch.setattr(agentq.loop, "fit", fit)
    cfg = make_cfg("+experiment=smoke", "eval.base=false", "eval.search=false", "eval.num_tasks=1")
    with pytest.raises(SystemExit) as stopped:
        run(cfg)
    assert stopped.value.code == 143  # 128 + SIGTERM, as a shell reports a process the signal killed
    assert not (Path(cfg.paths.run_dir) / "iter_001" / "adapter").exists()


def test_wandb_offline_run_is_written_and_finished(make_cfg, monkeypatch):
    import wandb

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = make_cfg("+experiment=smoke", "logger=default", "iterations=0", "eval.search=false", "eval.num_tasks=1")
    run(cfg)
    assert wandb.run is None  # finished, so the next multirun job starts a new run
    runs = list((Path(cfg.paths.run_dir) / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("run-*.wandb")), "no offline run file"
    assert (Path(cfg.paths.run_dir) / "logs" / "metrics.csv").exists()


def test_wandb_offline_run_holds_trees_examples_and_adapter(make_cfg, monkeypatch):
    import wandb

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = make_cfg("+experiment=smoke", "logger=default", "eval.base=false", "eval.search=false", "eval.num_tasks=1")
    run(cfg)
    assert wandb.run is None
    (offline,) = (Path(cfg.paths.run_dir) / "wandb").glob("offline-run-*")
    (table,) = (offline / "files" / "media" / "table" / "search").glob("trees_*.table.json")
    data = json.loads(table.read_text())
    assert data["columns"][:5] == ["task", "node", "parent", "depth", "command"] and data["data"]
    assert list((offline / "files" / "media" / "html" / "search").glob("largest_tree_*.html"))
    records = next(offline.glob("run-*.wandb")).read_bytes()
    assert b"examples-iter1" in records and b"adapter-iter1" in records  # the two artifacts


def test_a_run_trains_on_another_runs_first_trees_and_searches_its_later_iterations(make_cfg, tmp_path, monkeypatch):
    from agentq import loop

    quick = ("+experiment=smoke", "eval.base=false", "eval.search=false", "eval.num_tasks=1")
    source = make_cfg(*quick, "eval.zero_shot=false")  # its trees are all it is for
    run(source)
    trees = Path(source.paths.run_dir) / "iter_001" / "collect"
    searched = []

    def counting(parts, buffer, iteration, lane, task_id):
        searched.append((iteration, task_id))
        return search_task(parts, buffer, iteration, lane, task_id)

    search_task = loop.search_task
    monkeypatch.setattr(loop, "search_task", counting)
    cfg = OmegaConf.merge(  # another update (DPO's beta) on the same trees, then a second iteration
        make_cfg(*quick, f"collect.trees_from={source.paths.run_dir}", "objective.beta=0.5", "iterations=2"),
        {"paths": {"run_dir": str(tmp_path / "sweep")}},
    )
    check_summary(run(cfg), iterations=2, modes=("zero_shot",), base=False)
    ours = tmp_path / "sweep" / "iter_001" / "collect"
    assert sorted(p.name for p in ours.glob("task_*.json")) == sorted(p.name for p in trees.glob("task_*.json"))
    assert all((ours / p.name).read_bytes() == p.read_bytes() for p in trees.glob("task_*.json"))
    assert [i for i, _ in searched] == [2, 2]  # pi_1 is this run's own: its trees are searched


def test_smoke_loop_on_webshop(make_cfg):
    cfg = make_cfg("+experiment=smoke", "env=webshop")
    summary = run(cfg)
    check_summary(summary, iterations=1)
    zero_shot = summary["iterations"][0]["eval"]["zero_shot"]  # the shares of its steps' groundings
    shares = [zero_shot[f"grounding_{k}"] for k in ("exact", "rewritten", "refused", "missing", "unchecked")]
    assert zero_shot["grounding_steps"] > 0 and sum(shares) == pytest.approx(1.0)
    trees = list((Path(cfg.paths.run_dir) / "iter_001" / "collect").glob("task_*.json"))
    assert trees
    # Every edge records how its command relates to the page's actions: a listed
    # (or filled) action, or the random model's text sent as written (refused) or
    # nothing (missing); never a guessed button (the loop still has to run).
    for tree in trees:
        nodes = json.loads(tree.read_text())["tree"]["nodes"]
        for node in nodes[1:]:
            valid = nodes[node["parent"]]["valid_actions"] or []
            if node["grounding"] in ("exact", "normalized"):
                assert node["command"] in valid or "search[...]" in valid
            elif node["grounding"] == "filled":
                assert node["command"].startswith("search[")
            else:
                assert node["grounding"] in ("refused", "missing", "unchecked") and node["command"] not in valid
                assert node["grounding"] != "unchecked" or not valid  # unchecked: the page listed nothing


def test_parallel_workers_reproduce_a_sequential_run(make_cfg, tmp_path):
    """workers=2 searches and evaluates in forked processes: the same trees and episodes as workers=1."""
    runs = {}
    for workers in (1, 2):
        cfg = make_cfg(
            "+experiment=smoke", f"workers={workers}", "collect.num_tasks=3", "eval.num_tasks=3",
            f"paths.run_dir={tmp_path / str(workers)}",
        )
        runs[workers] = run(cfg)
    check_summary(runs[2], iterations=1)
    one, two = tmp_path / "1", tmp_path / "2"
    files = sorted(p.relative_to(one) for p in one.glob("iter_*/*/**/task_*.json"))
    # Collected trees; zero-shot, committed and verifier episodes at iterations 0 and 1.
    assert len(files) == 3 + 2 * 3 * 3
    for path in files:  # log-probs differ in float noise: 1 torch thread per worker instead of 2
        assert_same(json.loads((two / path).read_text()), json.loads((one / path).read_text()), str(path))


def assert_same(a, b, where: str) -> None:
    """Equal JSON, floats within 1e-4 (relative)."""
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_workers_refused_for_an_env_in_another_process(make_cfg):
    from agentq.components import IncompatibleConfig, build

    cfg = make_cfg("+experiment=smoke", "workers=2", "env=sciworld")
    with pytest.raises(IncompatibleConfig, match="workers=1"):
        build(cfg)


@pytest.mark.parametrize("critic_model", ["base", "policy"])
def test_critic_model_after_training(make_cfg, monkeypatch, critic_model):
    """critic_model=base: every critic ranks with the base LLM's weights, also after
    the adapter is merged into the policy; policy: the trained policy's weights."""
    import dataclasses

    import agentq.loop as loop

    seen = []  # one weight fingerprint per critic built
    real_build = loop.build

    def build(cfg):
        parts = real_build(cfg)

        def critic(model, tokenizer):
            seen.append(model.model.layers[0].self_attn.q_proj.weight.detach().clone())  # LoRA-trained
            return parts.critic(model, tokenizer)

        return dataclasses.replace(parts, critic=critic)

    monkeypatch.setattr(loop, "build", build)
    run(make_cfg("+experiment=smoke", f"critic_model={critic_model}"))
    base_eval, collect, trained_eval = seen  # iteration 0's search, iteration 1's collection, its search
    assert torch.equal(collect, base_eval)
    assert torch.equal(trained_eval, base_eval) == (critic_model == "base")


def test_critic_model_refuses_unknown_values(make_cfg):
    with pytest.raises(ValueError, match="critic_model must be 'base' or 'policy'"):
        run(make_cfg("+experiment=smoke", "critic_model=trained"))


def test_training_a_16_bit_model_is_refused(make_cfg):
    from agentq.components import IncompatibleConfig, build

    with pytest.raises(IncompatibleConfig, match="model.dtype=bfloat16 would merge"):
        build(make_cfg("+experiment=smoke", "+model.dtype=bfloat16"))
    build(make_cfg("+experiment=smoke", "+model.dtype=bfloat16", "iterations=0")).env.close()


def test_search_modes_run_on_the_first_search_num_tasks_goals(make_cfg):
    summary = run(make_cfg("+experiment=smoke", "iterations=0", "eval.search_num_tasks=1", "eval.num_tasks=2"))
    [base] = summary["iterations"]
    assert base["eval"]["zero_shot"]["num_tasks"] == 2
    assert base["eval"]["committed"]["num_tasks"] == base["eval"]["verifier"]["num_tasks"] == 1


def test_behaviour_cloning_trains_on_the_oracle_and_becomes_the_next_runs_base(make_cfg, tmp_path, caplog):
    tiny = ("model=tiny", "logger=csv", "eval.num_tasks=1", "agent.sampling.max_new_tokens=8")
    cfg = make_cfg("+experiment=webshop_bc", "collect.num_tasks=2", "trainer.lightning.max_epochs=2", *tiny)
    caplog.set_level(logging.INFO, logger="agentq")
    summary = run(cfg)
    # The training line's rate counts the batches of every epoch (2 examples x 2 epochs, batch 1).
    assert any(r.getMessage().startswith("train (iter 1, 2 examples): 4 batches in ") for r in caplog.records)
    assert [set(it["eval"]) for it in summary["iterations"]] == [{"zero_shot"}, {"zero_shot"}]
    run_dir = Path(cfg.paths.run_dir)
    examples = [json.loads(line) for line in (run_dir / "iter_001" / "examples.jsonl").read_text().splitlines()]
    assert len(examples) == 2  # both goals bought by the oracle, one SFT example each
    for trees in (run_dir / "iter_001" / "collect").glob("task_*.json"):
        best = json.loads(trees.read_text())["best"]
        assert best["source"] == "oracle" and best["success"]
        assert all(s["action"] == f"COMMAND: {s['command']}" for s in best["steps"])
    assert summary["iterations"][1]["train"]["loss"] > 0
    adapter = run_dir / "iter_001" / "adapter"

    cfg = OmegaConf.merge(  # the clone as the base of an evaluation run
        make_cfg("+experiment=webshop_zero_shot", f"model.adapter={adapter}", "eval.search=false", *tiny),
        {"paths": {"run_dir": str(tmp_path / "from_clone")}},
    )
    cloned = run(cfg)
    assert cloned["iterations"][0]["eval"]["zero_shot"]["num_tasks"] == 1
    assert OmegaConf.load(tmp_path / "from_clone" / "config.yaml").model.adapter == str(adapter)
