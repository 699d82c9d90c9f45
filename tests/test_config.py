"""Every config composes; every experiment builds without loading weights; bad values fail early."""

import os
import resource
import subprocess
import sys
import time

import pytest
import transformers
from hydra.errors import HydraException, InstantiationException

from agentq.components import build
from tests.conftest import CONF, ROOT

GROUPS = ["model", "env", "agent", "search", "critic", "objective", "pairs", "trainer", "logger", "paths"]
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def group_options():
    for group in GROUPS:
        for path in sorted((CONF / group).glob("*.yaml")):
            yield group, path.stem


@pytest.mark.parametrize("group, option", list(group_options()))
def test_every_group_option_composes(make_cfg, group, option):
    overrides = [f"{group}={option}"]
    if (group, option) == ("model", "hf"):
        overrides.append("model.name_or_path=/nonexistent")
    cfg = make_cfg(*overrides)
    assert cfg[group] is not None


def test_option_count_is_what_the_folders_hold():
    found = sum(len(list((CONF / g).glob("*.yaml"))) for g in GROUPS)
    assert len(list(group_options())) == found >= 12


@pytest.fixture
def no_weights(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded while building components")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.LlamaForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.LlamaForCausalLM, "__init__", refuse)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_builds_without_weights(make_cfg, no_weights, experiment):
    parts = build(make_cfg(f"+experiment={experiment}"))
    assert hasattr(parts.model, "load")
    assert parts.env.unwrapped.task_ids("test")
    parts.env.close()


def test_experiments_exist():
    assert {"smoke", "textcraft_mcts_dpo"} <= set(EXPERIMENTS)


@pytest.mark.parametrize(
    "override, key",
    [
        ("search.num_actions=0", "search.num_actions"),
        ("search.num_actions=12", "search.num_actions"),
        ("objective.beta=0", "objective.beta"),
        ("objective.beta=-1", "objective.beta"),
        ("pairs.threshold=1.5", "pairs.threshold"),
        ("pairs.threshold=-0.1", "pairs.threshold"),
        ("search.alpha=2", "search.alpha"),
        ("agent.sampling.temperature=-1", "agent.sampling.temperature"),
        ("iterations=-1", "iterations"),
        ("env.make.id=nope/Nothing-v0", "env.make.id"),
    ],
)
def test_invalid_values_fail_before_any_model_loads(make_cfg, no_weights, override, key):
    with pytest.raises(Exception) as info:
        build(make_cfg("+experiment=smoke", override))
    assert key in str(info.value) or key in str(info.value.__cause__)


def test_unknown_env_group_is_refused(make_cfg):
    with pytest.raises(HydraException, match="env"):
        make_cfg("env=nonexistent")


SEARCHES = ["mcts", "tot_bfs", "tot_dfs", "best_of_n", "self_consistency"]
OBJECTIVES = ["dpo", "ipo", "conservative_dpo", "traj_dpo", "sft", "masked_sft"]


def expected_to_run(search: str, objective: str) -> bool:
    if objective == "conservative_dpo":  # weighs pairs by MCTS visit counts
        return search == "mcts"
    if objective in ("dpo", "ipo"):  # step pairs need sibling values
        return search in ("mcts", "tot_bfs", "tot_dfs")
    return True  # trajectories: every search records them


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_search_objective_matrix_runs_or_refuses_clearly(make_cfg, no_weights, search, objective):
    from agentq.components import IncompatibleConfig

    cfg = make_cfg("+experiment=smoke", f"search={search}", f"objective={objective}")
    if expected_to_run(search, objective):
        build(cfg).env.close()
    else:
        with pytest.raises(IncompatibleConfig, match="use search=|objective="):
            build(cfg)


@pytest.mark.parametrize("search, critic", [("mcts", "llm_value"), ("tot_bfs", "llm_rank"), ("tot_dfs", "llm_rank")])
def test_a_search_with_the_wrong_kind_of_critic_is_refused(make_cfg, no_weights, search, critic):
    from agentq.components import IncompatibleConfig

    with pytest.raises(IncompatibleConfig, match="critic"):
        build(make_cfg("+experiment=smoke", f"search={search}", f"critic={critic}"))


def test_an_objective_on_the_wrong_kind_of_examples_is_refused(make_cfg, no_weights):
    from agentq.components import IncompatibleConfig

    with pytest.raises(IncompatibleConfig, match="sft examples"):
        build(make_cfg("+experiment=smoke", "objective=sft", "pairs=step"))


def test_mcts_eval_budget_with_another_search_is_refused(make_cfg, no_weights):
    from agentq.components import IncompatibleConfig

    with pytest.raises(IncompatibleConfig, match="eval.num_simulations"):
        build(make_cfg("+experiment=smoke", "search=tot_bfs", "eval.num_simulations=2"))


# ---------------------------------------------------------------- every value checked before any model loads
# (issue 14 §5: a bad trainer value used to surface after the base evaluation and the
# collection; a bad model path inside HFModel.load, after config.yaml was written)


@pytest.fixture
def no_load(monkeypatch, no_weights):
    """Any model source's load() fails the test: build must not need one."""
    from agentq.models import loading

    def refuse(self):
        raise AssertionError(f"{type(self).__name__}.load() was called while building components")

    for source in (loading.EmbeddedSmolLM2, loading.HFModel, loading.TinyRandomModel):
        monkeypatch.setattr(source, "load", refuse)


def refused(make_cfg, *overrides, match=None):
    """build() on the overrides: returns the ValueError's message after checking it was
    quick (no model, no env episode) and named what ``match`` says."""
    started = time.monotonic()
    with pytest.raises((ValueError, InstantiationException)) as info:  # Hydra's names the target's key
        build(make_cfg(*overrides)).env.close()
    assert time.monotonic() - started < 15
    message = f"{info.value} {info.value.__cause__ or ''}"
    if match is not None:
        assert match in message, message
    return message


@pytest.mark.parametrize(
    "overrides, key",
    [
        # The issue's example: an evaluation-only run (iterations=0) never trains, and still refuses it.
        (["+experiment=textcraft_zero_shot", "model=tiny", "trainer.lightning.max_epochs=abc"], "trainer.lightning.max_epochs"),
        (["+experiment=smoke", "trainer.lightning.max_epochs=abc"], "trainer.lightning.max_epochs"),
        (["+experiment=smoke", "trainer.lightning.max_epochs=-5"], "trainer.lightning.max_epochs"),
        (["+experiment=smoke", "trainer.lightning.max_epochs=1.5"], "trainer.lightning.max_epochs"),
        (["+experiment=smoke", "+trainer.lightning.max_step=3"], "trainer.lightning.max_step"),  # unknown: did you mean max_steps
        (["+experiment=smoke", "trainer.lightning.accumulate_grad_batches=0"], "trainer.lightning.accumulate_grad_batches"),
        (["+experiment=smoke", "trainer.lightning.gradient_clip_val=-1"], "trainer.lightning.gradient_clip_val"),
        (["+experiment=smoke", "trainer.lightning.devices=0"], "trainer.lightning.devices"),
        (["+experiment=smoke", "trainer.lightning.precision=33"], "trainer.lightning.precision"),
        (["+experiment=smoke", "trainer.lightning.accelerator=tpu"], "trainer.lightning"),  # only a Trainer knows
        (["+experiment=smoke", "+trainer.lightning.default_root_dir=/tmp"], "trainer.lightning.default_root_dir"),
        (["+experiment=smoke", "+trainer.lightning.enable_checkpointing=false"], "trainer.lightning.enable_checkpointing"),
        (["+experiment=smoke", "trainer.batch_size=0"], "trainer.batch_size"),
        (["+experiment=smoke", "trainer.batch_size=two"], "trainer.batch_size"),
        (["+experiment=smoke", "trainer.max_prompt_tokens=4"], "trainer.max_prompt_tokens"),
        (["+experiment=smoke", "trainer.checkpoint_every_n_steps=-1"], "trainer.checkpoint_every_n_steps"),
        (["+experiment=smoke", "trainer.shared_prefix=yes"], "trainer.shared_prefix"),
        (["+experiment=smoke", "trainer.gradient_checkpointing=true"], "trainer.shared_prefix"),
        (["+experiment=smoke", "+trainer.batchsize=4"], "trainer.batchsize"),
        (["+experiment=smoke", "trainer.optimizer.lr=-1"], "trainer.optimizer"),
        (["+experiment=smoke", "trainer.optimizer.lr=fast"], "trainer.optimizer.lr"),
        (["+experiment=smoke", "+trainer.optimizer.momentum=0.9"], "trainer.optimizer.momentum"),
        (["+experiment=smoke", "trainer.lora.r=0"], "trainer.lora.r"),
        (["+experiment=smoke", "trainer.lora.lora_dropout=1.5"], "trainer.lora.lora_dropout"),
    ],
)
def test_bad_trainer_values_fail_in_build_naming_the_key(make_cfg, no_load, overrides, key):
    refused(make_cfg, *overrides, match=key)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["seed=abc"], "seed"),
        (["seed=-1"], "seed"),
        (["iterations=true"], "iterations"),
        (["eval.max_steps=0"], "eval.max_steps"),
        (["eval.max_steps=abc"], "eval.max_steps"),
        (["threads=0"], "threads"),
        (["dense_reward=1"], "dense_reward"),
        (["eval.num_simulations=0"], "eval.num_simulations"),
        (["eval.split=validation"], "eval.split"),
        (["collect.split=nope"], "collect.split"),
        (["eval.recovery=true", "eval.base=false"], "eval.recovery"),
        (["eval.recovery=true", "eval.recovery_from=/nonexistent/run"], "eval.recovery_from"),
        (["eval.recovery=true", "eval.recovery_fraction=0"], "eval.recovery_fraction"),
        (["search.num_simulations=abc"], "search.num_simulations"),
        (["+search.num_simulation=3"], "search.num_simulation"),  # a typo'd key: did you mean
        (["critic.max_prompt_tokens=-1"], "critic.max_prompt_tokens"),  # a partial: built after the model loads
        (["+critic.max_prevous=3"], "critic.max_prevous"),
        (["critic.rank_score.top=-1"], "critic.rank_score"),
        (["critic=llm_vote", "search=tot_bfs", "critic.num_votes=0"], "critic.num_votes"),
        (["critic=llm_value", "search=tot_bfs", "critic.scale=maybe"], "critic.scale"),
        (["objective=masked_sft", "search=mcts", "pairs.judge.max_chars=0"], "pairs.judge.max_chars"),
        (["objective=masked_sft", "search=mcts", "+objective.beta=1.0"], "drop it with ~objective.beta"),  # left by another objective
        (["agent.sampling.max_new_tokens=many"], "agent.sampling.max_new_tokens"),
        (["+logger.csv.flush_every=3"], "logger.csv.flush_every"),
        (["model.num_heads=0"], "model.num_heads"),
    ],
)
def test_bad_loop_and_group_values_fail_in_build_naming_the_key(make_cfg, no_load, overrides, key):
    refused(make_cfg, "+experiment=smoke", *overrides, match=key)


def test_trees_from_must_name_a_run_that_searched_as_this_run_would(make_cfg, no_load, tmp_path):
    from omegaconf import OmegaConf

    source = tmp_path / "source"
    source.mkdir()
    OmegaConf.save(make_cfg("+experiment=smoke"), source / "config.yaml", resolve=True)
    refused(make_cfg, "+experiment=smoke", f"collect.trees_from={tmp_path}", match="collect.trees_from")
    for override, key in [("search.num_simulations=7", "search"), ("collect.num_tasks=3", "collect.num_tasks"), ("seed=1", "seed")]:
        refused(make_cfg, "+experiment=smoke", f"collect.trees_from={source}", override, match=f"another {key} ")
    # The update may differ: that is what the trees are reused for.
    build(make_cfg("+experiment=smoke", f"collect.trees_from={source}", "objective.beta=0.5", "pairs.threshold=0.2")).env.close()


def test_trees_from_reads_a_run_saved_before_a_search_key_existed_as_that_key_off(make_cfg, tmp_path):
    from omegaconf import OmegaConf

    from agentq.validation import check_trees_from

    source = tmp_path / "source"
    source.mkdir()
    older = OmegaConf.to_container(make_cfg("+experiment=smoke"), resolve=True)
    del older["search"]["distinct_actions"]  # saved before search.distinct_actions existed
    OmegaConf.save(OmegaConf.create(older), source / "config.yaml")
    check_trees_from(make_cfg("+experiment=smoke", f"collect.trees_from={source}"))
    with pytest.raises(ValueError, match="another search "):
        check_trees_from(make_cfg("+experiment=smoke", "search.distinct_actions=true", f"collect.trees_from={source}"))


def test_trees_from_reads_one_adapter_however_its_path_is_written(make_cfg, tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from agentq.validation import check_trees_from

    monkeypatch.chdir(tmp_path)  # the runs' relative paths are relative to where they were launched
    (tmp_path / "clone" / "adapter").mkdir(parents=True)
    source = tmp_path / "source"
    source.mkdir()
    OmegaConf.save(make_cfg("+experiment=smoke", "model.adapter=clone/adapter"), source / "config.yaml", resolve=True)
    for written in (f"{tmp_path}/clone/adapter", "[clone/adapter]", "./clone/../clone/adapter"):
        check_trees_from(make_cfg("+experiment=smoke", f"model.adapter={written}", f"collect.trees_from={source}"))
    with pytest.raises(ValueError, match="another model "):
        check_trees_from(make_cfg("+experiment=smoke", "model.adapter=[clone/adapter,clone/adapter]", f"collect.trees_from={source}"))


def test_gpu_trainer_is_refused_only_for_runs_that_train(make_cfg, no_load):
    import torch

    build(make_cfg("+experiment=smoke", "trainer=ddp_gpu", "iterations=0")).env.close()
    build(make_cfg("+experiment=smoke", "trainer=ddp_cpu")).env.close()  # spawned workers on CPU: fine
    if not torch.cuda.is_available():
        refused(make_cfg, "+experiment=smoke", "trainer=ddp_gpu", match="trainer.lightning (accelerator='gpu'")


@pytest.mark.parametrize(
    "name_or_path, says",
    [
        ("/nonexistent", "no such folder"),  # the issue's example
        ("./models/absent", "no such folder"),
        ("a/b/c", "no such folder"),
        ("not a repo id!", "neither an existing folder"),
        ("agentq-tests/not-in-any-local-cache", "not in the local Hugging Face cache"),
    ],
)
def test_hf_model_that_cannot_load_fails_in_build(make_cfg, no_load, name_or_path, says):
    message = refused(make_cfg, "model=hf", f"model.name_or_path='{name_or_path}'", match="model.name_or_path")
    assert says in message


def test_hf_model_folder_without_weights_or_tokenizer_fails_in_build(make_cfg, no_load, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    message = refused(make_cfg, "model=hf", f"model.name_or_path={folder}", match="model.name_or_path")
    assert "no weights and no tokenizer" in message
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer.json").write_text("{}")
    build(make_cfg("model=hf", f"model.name_or_path={folder}", "iterations=0")).env.close()  # files present: accepted


def test_hf_hub_id_in_the_local_cache_is_accepted_offline(make_cfg, no_load, tmp_path, monkeypatch):
    """The hub cache layout (models--org--name/refs/main -> snapshots/<commit>/...)."""
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--agentq-tests--cached"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    overrides = ["model=hf", "model.name_or_path=agentq-tests/cached", "model.local_files_only=false", "iterations=0"]
    assert "HF_HUB_OFFLINE" in refused(make_cfg, *overrides, match="model.name_or_path")  # a config, no weights
    (snapshot / "model.safetensors").write_bytes(b"")
    build(make_cfg(*overrides)).env.close()


def test_smollm2_without_its_package_or_cache_fails_in_build(make_cfg, no_load, tmp_path, monkeypatch):
    from agentq.models import loading

    monkeypatch.setattr(loading, "SMOLLM2_PACKAGE", "agentq_tests_no_such_package")
    refused(make_cfg, "model=smollm2", f"paths.model_cache={tmp_path}", "iterations=0", match="model.cache_dir")


def test_a_refused_config_writes_no_config_yaml(make_cfg, no_load, tmp_path):
    from agentq.loop import run

    cfg = make_cfg("+experiment=smoke", "trainer.lightning.max_epochs=abc")
    with pytest.raises(ValueError, match="trainer.lightning.max_epochs"):
        run(cfg)
    assert not (tmp_path / "run" / "config.yaml").exists()


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["+experiment=textcraft_zero_shot", "model=tiny", "trainer.lightning.max_epochs=abc"], "trainer.lightning.max_epochs"),
        (["model=hf", "model.name_or_path=/nonexistent"], "model.name_or_path"),
    ],
)
def test_the_issue_examples_fail_fast_through_run_py(tmp_path, overrides, key):
    """The real entry point, in a fresh process (imports included): refused in seconds,
    naming the key, with nothing written to the run directory."""
    run_dir = tmp_path / "run"
    env = os.environ | {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    started, cpu_before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *overrides, f"hydra.run.dir={run_dir}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    wall, cpu_after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime
    assert done.returncode != 0
    assert any(line.startswith("ValueError: ") and key in line for line in done.stderr.splitlines()), done.stderr[-2000:]
    assert "AssertionError" not in done.stderr
    assert not (run_dir / "config.yaml").exists()
    # Most of it is importing torch, transformers and Lightning. CPU time, because wall
    # time on a shared machine measures the neighbours (12 s wall for 4.5 s CPU at load 10).
    assert cpu < 15, f"{cpu:.1f} s CPU, {wall:.1f} s wall"


def test_the_trainer_keys_validation_checks_are_the_ones_the_loop_reads():
    import dataclasses

    from agentq.components import Training
    from agentq.validation import LOOP_READS

    assert set(LOOP_READS) == {f.name for f in dataclasses.fields(Training)}
