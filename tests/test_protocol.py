"""The evaluation protocol (docs/method.md §8): every committed experiment evaluates goals and a
step budget under which the scripted oracle succeeds >= 95%; the oracle row is cached and
reaches summary.json. Starts the ScienceWorld JVM and the OpenTable browser (about 20 s,
once per session thanks to the cache)."""

from __future__ import annotations

import json

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentq import oracle
from agentq.bookkeeping import write_summary
from agentq.data.buffer import ReplayBuffer
from agentq.layout import RunLayout
from envs.textcraft import ENV_ID, TextCraftEnv
from tests.conftest import CONF

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
TEXTCRAFT = {"_target_": "gymnasium.make", "id": f"envs.textcraft:{ENV_ID}", "max_steps": 40}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One oracle cache for the module: experiments that share env, goals and budget compute once."""
    return tmp_path_factory.mktemp("oracle_cache")


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_evaluates_where_the_oracle_succeeds(make_cfg, cache, experiment):
    cfg = make_cfg(f"+experiment={experiment}")
    row = oracle.for_config(cfg, cache_dir=cache)
    assert (row["split"], row["max_steps"]) == (cfg.eval.split, cfg.eval.max_steps)
    assert row["num_tasks"] == cfg.eval.num_tasks > 0
    assert row["success_rate"] >= oracle.MIN_SUCCESS, (
        f"{experiment}: the scripted oracle solves {row['success_rate']:.0%} of its {row['num_tasks']} "
        f"{row['split']} goals in eval.max_steps={row['max_steps']}: {row['episodes']}"
    )
    # An env experiment evaluates in the env's own budget (conf/env/*.yaml, from the literature).
    if experiment != "smoke":
        assert cfg.eval.max_steps == cfg.env.make.max_steps


def test_the_old_textcraft_protocol_fails_the_oracle_check():
    # Before: test = ids 0-99 (the deepest goals) and textcraft_base evaluated ids 0-2 in 4 steps.
    env = TextCraftEnv(max_steps=4)
    old = oracle.oracle_row(
        env, TEXTCRAFT | {"max_steps": 4}, split="test", task_ids=[0, 1, 2], max_steps=4
    )
    assert old["success_rate"] == 0.0 < oracle.MIN_SUCCESS
    unbounded = oracle.play_tasks(TextCraftEnv(max_steps=100), [0, 1, 2], 100)
    assert [e["steps"] for e in unbounded] == [39, 36, 28] and all(e["success"] for e in unbounded)


def test_agentgyms_textcraft_budget_is_too_short_for_the_test_split(make_cfg, cache):
    # AgentGym's max_round 20 on all 100 test goals: the oracle needs more on 9 of them.
    cfg = make_cfg("+experiment=textcraft_base", "eval.num_tasks=100", "env.make.max_steps=20")
    assert cfg.eval.max_steps == 20
    assert oracle.for_config(cfg, cache_dir=cache)["success_rate"] == pytest.approx(0.91)
    cfg = make_cfg("+experiment=textcraft_base", "eval.num_tasks=100")
    assert oracle.for_config(cfg, cache_dir=cache)["success_rate"] == 1.0


def test_rows_are_cached_per_env_goals_and_budget(tmp_path, monkeypatch):
    env = TextCraftEnv(max_steps=40)
    ids = env.task_ids("test")[:3]
    first = oracle.oracle_row(
        env, TEXTCRAFT, split="test", task_ids=ids, max_steps=40, cache_dir=tmp_path
    )
    assert first["success_rate"] == 1.0 and first["success_ci"] == list(
        oracle.wilson_interval(3, 3)
    )
    assert [e["task_id"] for e in first["episodes"]] == ids and first["avg_steps"] == 7.0
    assert len(list((tmp_path / "oracle").glob("*.json"))) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("played although cached")

    monkeypatch.setattr(oracle, "play_tasks", refuse)
    assert (
        oracle.oracle_row(
            env, TEXTCRAFT, split="test", task_ids=ids, max_steps=40, cache_dir=tmp_path
        )
        == first
    )
    # Another budget, other goals or other make kwargs are other rows.
    keys = {
        oracle.cache_key(TEXTCRAFT, "test", ids, 40),
        oracle.cache_key(TEXTCRAFT, "test", ids, 12),
        oracle.cache_key(TEXTCRAFT, "test", ids[:2], 40),
        oracle.cache_key(TEXTCRAFT | {"max_steps": 12}, "test", ids, 40),
        oracle.cache_key(TEXTCRAFT, "dev", ids, 40),
    }
    assert len(keys) == 5
    with pytest.raises(AssertionError, match="played although cached"):
        oracle.oracle_row(
            env, TEXTCRAFT, split="test", task_ids=ids, max_steps=12, cache_dir=tmp_path
        )


def test_the_oracle_row_reaches_the_summary(make_cfg, tmp_path):
    cfg = make_cfg("+experiment=textcraft_base", f"paths.cache_dir={tmp_path / 'cache'}")
    env = instantiate(cfg.env.make)
    test_ids = env.unwrapped.task_ids(cfg.eval.split)[: cfg.eval.num_tasks]
    run_dir = tmp_path / "run"
    oracle.write_oracle(cfg, env, test_ids, RunLayout(run_dir).oracle)
    assert list((tmp_path / "cache" / "oracle").glob("*.json"))  # under paths.cache_dir
    summary = write_summary(RunLayout(run_dir), ReplayBuffer(RunLayout(run_dir)), cfg.iterations, wall_seconds=1.0)
    entry = summary["oracle"]
    assert entry["policy"] == "scripted oracle" and entry["env"] == cfg.env.make.id
    assert (entry["split"], entry["max_steps"], entry["num_tasks"]) == ("test", 40, 3)
    assert entry["success_rate"] == 1.0 and "episodes" not in entry
    assert json.loads((run_dir / "summary.json").read_text())["oracle"] == entry
    full = json.loads((run_dir / "oracle.json").read_text())
    assert [e["task_id"] for e in full["episodes"]] == test_ids


# Tune on dev, never on test (issue 17).


def test_the_webshop_dev_split_is_carved_from_training_goals_only():
    import gymnasium as gym

    plain = gym.make("envs.webshop:agentq/WebShop-v0").unwrapped
    with pytest.raises(ValueError, match="dev_size"):
        plain.task_ids("dev")  # none unless asked for
    env = gym.make("envs.webshop:agentq/WebShop-v0", dev_size=100).unwrapped
    train, dev, test = (set(env.task_ids(s)) for s in ("train", "dev", "test"))
    assert len(dev) == 100 and not dev & test and not dev & train
    assert train | dev == set(plain.task_ids("train")) and test == set(plain.task_ids("test"))
    with pytest.raises(ValueError, match="dev_size must be in"):
        gym.make("envs.webshop:agentq/WebShop-v0", dev_size=-1)


@pytest.mark.parametrize("key", ["eval.split", "collect.split"])
def test_a_sweep_cannot_read_test_goals(make_cfg, key):
    """A tuning run (every hparams_search preset sets tuning=true) is refused before any
    model loads when it would evaluate on, or collect from, the test split."""
    from agentq.components import build

    with pytest.raises(ValueError, match=f"tuning=true .* with {key}=test"):
        build(make_cfg("+experiment=smoke", "tuning=true", "eval.split=dev", f"{key}=test"))
    parts = build(make_cfg("+experiment=smoke", "tuning=true", "eval.split=dev"))
    train, held_out = parts.task_ids()
    assert not set(held_out) & set(parts.env.unwrapped.task_ids("test"))
    parts.close()


def test_the_opentable_study_searches_as_deep_as_a_booking_needs(make_cfg, cache):
    cfg = make_cfg("+experiment=opentable_mcts_dpo", "+study=opentable_depth")
    row = oracle.for_config(cfg, cache_dir=cache)
    assert row["success_rate"] >= oracle.MIN_SUCCESS
    # The trees may run the whole budget, so a rollout can get as far as the oracle's bookings.
    assert cfg.search.max_depth == cfg.eval.max_steps >= max(e["steps"] for e in row["episodes"])
    assert row["milestones"][-1] == "booked right"  # the names compare's "how far" table reads
    assert cfg.agent.sampling.constrain_command  # a COMMAND within the token budget (NOTES.md)


def test_the_textcraft_clone45_study_acts_as_its_clone_was_trained(make_cfg):
    from omegaconf import OmegaConf

    cfg = make_cfg("+experiment=textcraft_agent_r", "+study=textcraft_clone45", "model.adapter=clone")
    clone = OmegaConf.load(CONF.parent / "experiments/textcraft_bc/config/bc45_craftable_repeats.yaml")
    for key in ("env.make", "agent.prompt", "agent.sampling.constrain_command", "agent.sampling.max_tail_tokens",
                "agent.sampling.max_new_tokens", "eval.max_steps"):  # fmt: skip
        assert OmegaConf.select(cfg, key) == OmegaConf.select(clone, key), key
    assert not cfg.search.use_critic and cfg.search.max_depth == cfg.eval.max_steps  # Agent-R's UCT, whole episodes
    assert cfg.collect.split == "train" and cfg.eval.split == "test" and cfg.eval.recovery
    assert cfg.engine._target_.endswith("BatchedHFEngine")


def test_the_rft_study_samples_training_goals_and_is_evaluated_as_the_bases_200_goal_rows(make_cfg):
    from omegaconf import OmegaConf

    cfg = make_cfg("+experiment=webshop_base", "+study=webshop_clone_rft", "model.adapter=clone")
    assert cfg.search._target_.endswith("BestOfN") and cfg.search.max_depth == cfg.eval.max_steps
    assert cfg.pairs._target_.endswith("SuccessfulTrajectories") and cfg.objective._target_.endswith("SFTLoss")
    assert cfg.collect.split == "train" and not cfg.eval.base  # the base's episodes are another run's
    # Its row is paired goal by goal with the clone's 200-goal run: the same goals, budget and decoding.
    base = OmegaConf.load(CONF.parent / "experiments/webshop_clone_search/config/test200.yaml")
    for key in ("seed", "eval.split", "eval.num_tasks", "eval.max_steps", "env.make", "agent.prompt",
                "agent.sampling.constrain_command", "agent.sampling.max_tail_tokens", "agent.sampling.max_new_tokens"):  # fmt: skip
        assert OmegaConf.select(cfg, key) == OmegaConf.select(base, key), key


@pytest.mark.parametrize("study", ["webshop_clone80_rft", "webshop_clone80_agentq"])
def test_the_clone80_studies_read_dev_goals_only_and_pair_with_the_clones_dev_row(make_cfg, study):
    from omegaconf import OmegaConf

    from agentq.components import build

    cfg = make_cfg("+experiment=webshop_base", f"+study={study}", "model.adapter=clone")
    assert cfg.tuning and cfg.eval.split == "dev" and cfg.collect.split == "train" and not cfg.eval.base
    with pytest.raises(ValueError, match="tuning=true .* with eval.split=test"):
        build(make_cfg("+experiment=webshop_base", f"+study={study}", "model.adapter=clone", "eval.split=test"))
    # Paired goal by goal with the clone's dev row: the same goals, budget and decoding.
    base = OmegaConf.load(CONF.parent / "experiments/webshop_bc_scale/config/eval_n80.yaml")
    for key in ("seed", "eval.split", "eval.num_tasks", "eval.max_steps", "env.make", "agent.prompt", "agent.sampling"):
        assert OmegaConf.select(cfg, key) == OmegaConf.select(base, key), key
    # Searched on RFT's training goals: the two learn from the same goals by their own data.
    rft = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_rft", "model.adapter=clone")
    assert (cfg.seed, cfg.collect) == (rft.seed, rft.collect)


def test_the_clone80_fit_study_searches_a_quarter_of_the_dev_goals_it_is_evaluated_on(make_cfg):
    from omegaconf import OmegaConf

    from agentq.components import build

    adapter = "model.adapter=experiments/webshop_bc_scale/runs/n80/iter_001/adapter"
    cfg = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_fit", adapter)
    assert cfg.tuning and cfg.collect.split == cfg.eval.split == "dev" and cfg.eval.base
    assert cfg.collect.num_tasks == cfg.eval.num_tasks // 4 == cfg.env.make.dev_size // 4  # a quarter searched
    # The search, pairs and update of webshop_clone80_agentq's run at beta 0.1, which trained on training goals.
    b01 = OmegaConf.load(CONF.parent / "experiments/webshop_clone80_agentq/config/agentq_uct200_b01.yaml")
    for key in ("seed", "model.adapter", "agent", "critic", "search", "pairs", "objective", "trainer", "eval.max_steps"):
        assert settings(cfg, key) == settings(b01, key), key
    with pytest.raises(ValueError, match="tuning=true .* with eval.split=test"):
        build(make_cfg("+experiment=webshop_base", "+study=webshop_clone80_fit", adapter, "eval.split=test"))


def test_the_clone80_balanced_study_is_the_b01_update_on_order_balanced_pairs_beside_its_control(make_cfg, tmp_path):
    import shutil

    from omegaconf import OmegaConf

    from agentq.components import build
    from agentq.validation import check_trees_from

    adapter = "model.adapter=experiments/webshop_bc_scale/runs/n80/iter_001/adapter"
    cfg = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_balanced", adapter)
    assert cfg.tuning and cfg.collect.split == "train" and cfg.eval.split == "dev" and not cfg.eval.base
    assert cfg.pairs.balance_order and cfg.collect.num_tasks == 100
    with pytest.raises(ValueError, match="tuning=true .* with eval.split=test"):
        build(make_cfg("+experiment=webshop_base", "+study=webshop_clone80_balanced", adapter, "eval.split=test"))
    # webshop_clone80_agentq's b01 arm but for the goals searched and the pairs' selection.
    b01 = OmegaConf.load(CONF.parent / "experiments/webshop_clone80_agentq/config/agentq_uct200_b01.yaml")
    for key in ("seed", "model", "agent", "critic", "search", "objective", "trainer", "eval", "env.make"):
        assert settings(cfg, key) == settings(b01, key), key
    assert settings(cfg, "pairs") == settings(b01, "pairs") | {"balance_order": True}
    # Its base row is webshop_clone80_fit's clone episodes: the same weights, goals, budget and decoding.
    fit = OmegaConf.load(CONF.parent / "experiments/webshop_clone80_fit/config/fit.yaml")
    for key in ("seed", "model", "agent", "eval.split", "eval.num_tasks", "eval.max_steps", "env.make"):
        assert settings(cfg, key) == settings(fit, key), key
    # The control arm trains on the same trees without the selection.
    shutil.copy(CONF.parent / "experiments/webshop_clone80_balanced/config/balanced.yaml", tmp_path / "config.yaml")
    control = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_balanced", adapter,
                       "pairs.balance_order=false", f"collect.trees_from={tmp_path}")  # fmt: skip
    check_trees_from(control)


def test_the_clone80_iter3_study_runs_the_every_pair_arm_on_to_three_iterations(make_cfg):
    from omegaconf import OmegaConf

    from agentq.components import build

    adapter = "model.adapter=experiments/webshop_bc_scale/runs/n80/iter_001/adapter"
    cfg = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_iter3", adapter)
    with pytest.raises(ValueError, match="tuning=true .* with eval.split=test"):
        build(make_cfg("+experiment=webshop_base", "+study=webshop_clone80_iter3", adapter, "eval.split=test"))
    # webshop_clone80_balanced's every-pair arm as its second iteration ran, but for three
    # iterations, the clone evaluated in the run, and iteration 1 searching its own trees.
    all2 = OmegaConf.load(CONF.parent / "experiments/webshop_clone80_balanced/config/all2.yaml")
    for key in ("seed", "tuning", "model", "agent", "critic", "search", "pairs", "objective", "trainer", "env.make"):
        assert settings(cfg, key) == settings(all2, key), key
    assert settings(cfg, "eval") == settings(all2, "eval") | {"base": True}
    assert settings(cfg, "collect") == settings(all2, "collect") | {"trees_from": None}
    assert (cfg.iterations, all2.iterations) == (3, 2)


def test_the_clone80_explore_study_is_iter3s_first_iteration_but_for_c_exp(make_cfg):
    from agentq.components import build

    adapter = "model.adapter=experiments/webshop_bc_scale/runs/n80/iter_001/adapter"
    cfg = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_explore", adapter)
    with pytest.raises(ValueError, match="tuning=true .* with eval.split=test"):
        build(make_cfg("+experiment=webshop_base", "+study=webshop_clone80_explore", adapter, "eval.split=test"))
    iter3 = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_iter3", adapter)
    for key in ("seed", "tuning", "model", "agent", "critic", "pairs", "objective", "trainer", "env.make", "collect", "eval"):
        assert settings(cfg, key) == settings(iter3, key), key
    assert settings(cfg, "search") == settings(iter3, "search") | {"c_exp": 3.0}
    assert (cfg.iterations, iter3.iterations, iter3.search.c_exp) == (1, 3, 1.0)


def test_the_clone80_goals200_study_is_arm_5_of_explore_on_200_goals(make_cfg):
    from omegaconf import OmegaConf

    from agentq.components import build

    adapter = "model.adapter=experiments/webshop_bc_scale/runs/n80/iter_001/adapter"
    cfg = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_goals200", adapter)
    with pytest.raises(ValueError, match="tuning=true .* with eval.split=test"):
        build(make_cfg("+experiment=webshop_base", "+study=webshop_clone80_goals200", adapter, "eval.split=test"))
    arm5 = OmegaConf.load(CONF.parent / "experiments/webshop_clone80_explore/config/distinct_product.yaml")
    for key in ("seed", "tuning", "iterations", "dense_reward", "agent", "critic", "search", "pairs",
                "objective", "env.make", "eval.split", "eval.num_tasks", "eval.max_steps"):  # fmt: skip
        assert settings(cfg, key) == settings(arm5, key), key
    weights = [{k: v for k, v in settings(c, "model").items() if k != "cache_dir"} for c in (cfg, arm5)]
    assert weights[0] == weights[1]  # where converted weights are cached is not which weights
    trainer = ("batch_size", "use_logged_reference", "shared_prefix", "optimizer", "lora", "lightning")
    assert all(settings(cfg, f"trainer.{k}") == settings(arm5, f"trainer.{k}") for k in trainer)
    # Searched afresh on 200 goals (arm 5 took arm 4's 100 trees), the clone evaluated beside it.
    assert settings(cfg, "collect") == settings(arm5, "collect") | {"num_tasks": 200, "trees_from": None}
    assert cfg.eval.base and not arm5.eval.base


def test_the_goals200_iter3_study_is_the_goals200_run_to_three_iterations(make_cfg):
    from omegaconf import OmegaConf

    adapter = "model.adapter=experiments/webshop_bc_scale/runs/n80/iter_001/adapter"
    cfg = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_goals200_iter3", adapter)
    saved = OmegaConf.load(CONF.parent / "experiments/webshop_clone80_goals200/config/goals200.yaml")
    for key in ("seed", "tuning", "dense_reward", "agent", "critic", "search", "pairs", "objective",
                "env.make", "collect", "eval", "trainer"):  # fmt: skip
        assert settings(cfg, key) == settings(saved, key), key
    assert {k: v for k, v in settings(cfg, "model").items() if k != "cache_dir"} == {
        k: v for k, v in settings(saved, "model").items() if k != "cache_dir"
    }
    assert (cfg.iterations, saved.iterations) == (3, 1)


def test_the_table_study_is_the_iter3_recipe_without_the_clone_evaluated_again(make_cfg):
    adapter = "model.adapter=experiments/webshop_bc_scale/runs/n80/iter_001/adapter"
    table = make_cfg("+experiment=webshop_base", "+study=webshop_agentq_table", adapter)
    iter3 = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_goals200_iter3", adapter)
    for key in ("seed", "tuning", "iterations", "agent", "critic", "search", "pairs", "objective",
                "env.make", "collect", "model", "trainer"):  # fmt: skip
        assert settings(table, key) == settings(iter3, key), key
    assert settings(table, "eval") == settings(iter3, "eval") | {"base": False}
    assert table.tuning  # dev only: the test read is a separate run


def test_the_table_studys_rft_and_trajectory_dpo_runs_train_their_own_objective_on_its_trees(monkeypatch):
    from agentq import compare
    from agentq.validation import check_trees_from

    monkeypatch.chdir(CONF.parent)  # the script's paths are relative to the repo root, as its runs are
    baselines = experiment_script("webshop_agentq_table/baselines.py")
    table = compare.compose_config(["+experiment=webshop_base", "+study=webshop_agentq_table",
                                    f"model.adapter={baselines.CLONE_ADAPTER}"])  # fmt: skip
    for name in ("rft", "traj_dpo"):
        cfg = baselines.checked(name)[1]
        alone = compare.compose_config([f"+experiment=webshop_{name}"])
        # The method's own, not the study's Agent Q settings, with one example per goal.
        assert settings(cfg, "pairs") == settings(alone, "pairs") | baselines.CAP[name], name
        assert settings(cfg, "objective") == settings(alone, "objective"), name
        assert instantiate(cfg.pairs).from_search  # the capped builder is valid
        check_trees_from(cfg)  # the committed run searched what this run would
        assert cfg.collect.trees_from == "experiments/webshop_agentq_table/runs/agentq"
        for key in ("seed", "tuning", "search", "agent", "env.make", "trainer.optimizer", "trainer.lightning"):
            assert settings(cfg, key) == settings(table, key), (name, key)
        # webshop_mcts_dpo's search at inference, which no row of these runs uses (eval.search=false)
        assert settings(cfg, "eval") == settings(table, "eval") | {"num_simulations": 2} and not cfg.eval.search
        assert cfg.iterations == 1 and cfg.paths.run_dir == f"experiments/webshop_agentq_table/runs/{name}"
        # Without the restoring overrides the study's step pairs and IPO would be the method's.
        leaked = compare.compose_config(baselines.base_overrides(name))
        with pytest.raises(ValueError, match=f"_target_ of the {name} run is agentq.(data.pairs|objectives.ipo)"):
            compare.check_definition(baselines.METHODS[name], alone, leaked)


def test_the_table_studys_committed_test_md_is_what_table_py_writes_from_its_runs(monkeypatch, tmp_path):
    import ast

    path = CONF.parent / "experiments/webshop_agentq_table/table.py"
    table = experiment_script("webshop_agentq_table/table.py")
    monkeypatch.setattr(table, "STUDY", tmp_path)  # written here; read from the committed run folders
    table.test_rows()
    # A row read and not re-tabled, or a changed cell, fails here: the committed table is not stale.
    assert (tmp_path / "test.md").read_text() == (path.parent / "test.md").read_text()
    assert (tmp_path / "test.csv").read_text() == (path.parent / "test.csv").read_text()
    # `python table.py` writes the tables: its entry point was once cut without anything noticing.
    last = ast.parse(path.read_text()).body[-1]
    assert ast.unparse(last) == "if __name__ == '__main__':\n    main()"


@pytest.mark.parametrize(
    "study", ["sciworld_agent_r", "webshop_clone80_agent_r", "textcraft_agent_r", "webshop_engine_bf16", "webshop_engine_bf16_epyc"]
)
def test_an_agent_r_studys_committed_iteration_tables_are_what_agent_r_iterations_writes_from_its_runs(study, tmp_path):
    folder = CONF.parent / "experiments" / study
    iterations = experiment_script("agent_r_iterations.py")
    iterations.main(folder, out=tmp_path)  # read from the committed run folders, written here
    for name in ("iterations.md", "iterations.csv", "data.md", "data.csv"):
        assert (tmp_path / name).read_text() == (folder / name).read_text(), name
    # Every arm's policy is paired with the other arm's of its iteration, on both reads.
    rows = (folder / "iterations.md").read_text()
    good = iterations.arms(folder)["good paths only"]
    assert iterations.evaluated(good)
    for i in iterations.evaluated(good):
        assert rows.count(f"| Agent-R pi_{i} against good-only pi_{i}, ") == 2


@pytest.mark.parametrize(
    "script", ["webshop_clone80_agent_r/fit.py", "webshop_engine_bf16/table.py", "webshop_engine_bf16_epyc/phases.py"]
)
def test_a_studys_committed_table_is_what_its_script_writes_from_its_runs(script, tmp_path):
    module = experiment_script(script)
    module.main(tmp_path)  # read from the committed run folders, written here
    for name in (f"{module.STEM}.md", f"{module.STEM}.csv"):
        assert (tmp_path / name).read_text() == (module.HERE / name).read_text(), name


def experiment_script(relative: str):
    """A study's script under experiments/ (not a package), imported as a module."""
    import importlib.util

    path = CONF.parent / "experiments" / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def settings(cfg, key: str):
    """``key``'s value as plain data, with the keys added since a run was saved at the values it
    ran with (``validation.ADDED_LATER``)."""
    from omegaconf import OmegaConf

    from agentq.validation import ADDED_LATER

    value = OmegaConf.select(cfg, key)
    if not OmegaConf.is_config(value):
        return value
    return ADDED_LATER.get(key, {}) | OmegaConf.to_container(value, resolve=True)


def test_the_clone80_agent_r_study_trains_on_the_trees_agent_q_searched_and_reads_dev_goals_only(make_cfg, tmp_path):
    import shutil

    from omegaconf import OmegaConf

    from agentq.components import build
    from agentq.validation import check_trees_from

    adapter = "model.adapter=experiments/webshop_bc_scale/runs/n80/iter_001/adapter"  # as the trees' run
    source = CONF.parent / "experiments/webshop_clone80_agentq/config/agentq_uct200.yaml"
    shutil.copy(source, tmp_path / "config.yaml")
    for arm in ([], ["pairs=good_only"]):
        cfg = make_cfg("+experiment=webshop_base", "+study=webshop_clone80_agent_r", adapter, f"collect.trees_from={tmp_path}", *arm)
        check_trees_from(cfg)  # the same pi_0, search and draw as Agent Q's third arm
        assert cfg.pairs._target_.endswith("RevisionBuilder") and cfg.pairs.include_revisions == (not arm)
        assert cfg.tuning and cfg.eval.split == "dev" and cfg.eval.recovery
    with pytest.raises(ValueError, match="tuning=true .* with eval.split=test"):
        build(make_cfg("+experiment=webshop_base", "+study=webshop_clone80_agent_r", adapter, "eval.split=test"))
    # Its recovery prefixes are the clone's dev row's failures: the same goals, budget and decoding.
    assert cfg.eval.recovery_from == "experiments/webshop_bc_scale/runs/eval_n80"
    base = OmegaConf.load(CONF.parent / "experiments/webshop_bc_scale/config/eval_n80.yaml")
    for key in ("seed", "eval.split", "eval.num_tasks", "eval.max_steps", "env.make", "agent.prompt", "agent.sampling"):
        assert OmegaConf.select(cfg, key) == OmegaConf.select(base, key), key


def test_each_studys_test_read_runs_its_policies_through_the_shared_script(make_cfg, tmp_path):
    import os
    import subprocess

    from omegaconf import OmegaConf

    stub = tmp_path / "bin" / "python"  # records each `python run.py ...` the scripts would run
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@" --- >> "$CALLS"\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{stub.parent}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls")}

    def calls(script: str, *names: str) -> list[list[str]]:
        (tmp_path / "calls").unlink(missing_ok=True)
        subprocess.run(["bash", f"experiments/{script}/evaluate_test.sh", *names], cwd=CONF.parent, env=env, check=True)
        argv = (tmp_path / "calls").read_text().split("---\n")[:-1]
        return [[a for a in lines.splitlines() if a != "run.py" and not a.startswith("resume=")] for lines in argv]

    # goals200's test read as it ran (config/test200_pi_1.yaml): the same adapters and evaluation.
    clone, pi_1 = calls("webshop_clone80_goals200", "clone", "pi_1")
    saved = OmegaConf.load(CONF.parent / "experiments/webshop_clone80_goals200/config/test200_pi_1.yaml")
    cfg = make_cfg(*pi_1)
    for key in ("iterations", "tuning", "eval", "paths.run_dir", "env.make"):
        assert settings(cfg, key) == settings(saved, key), key
    assert list(cfg.model.adapter) == list(saved.model.adapter)
    assert make_cfg(*clone).model.adapter == saved.model.adapter[:1]
    (arm,) = calls("webshop_clone80_explore", "product10")
    explore = "experiments/webshop_clone80_explore/runs"
    assert list(make_cfg(*arm).model.adapter) == saved.model.adapter[:1] + [f"{explore}/product10/iter_001/adapter"]
    assert make_cfg(*arm).paths.run_dir == f"{explore}/test200/product10"
    # The three-iteration study's pi_3: the clone and the run's three adapters, in order.
    (pi_3,) = calls("webshop_clone80_goals200_iter3", "pi_3")
    cfg = make_cfg(*pi_3)
    run = "experiments/webshop_clone80_goals200_iter3/runs/iter3"
    assert list(cfg.model.adapter) == saved.model.adapter[:1] + [f"{run}/iter_00{i}/adapter" for i in (1, 2, 3)]
    assert (cfg.eval.split, cfg.eval.num_tasks, cfg.tuning, cfg.iterations) == ("test", 200, False, 0)
    assert cfg.paths.run_dir == "experiments/webshop_clone80_goals200_iter3/runs/test200/pi_3"
    # The table study's test rows: pi_3 as its run made it, RFT and trajectory DPO on the clone,
    # each with the clone's test settings (webshop_clone80_base's committed test episodes).
    table = "experiments/webshop_agentq_table/runs"
    names = ("pi_3", "rft", "traj_dpo")
    rows = {name: make_cfg(*argv) for name, argv in zip(names, calls("webshop_agentq_table", *names), strict=True)}
    assert list(rows["pi_3"].model.adapter) == saved.model.adapter[:1] + [f"{table}/agentq/iter_00{i}/adapter" for i in (1, 2, 3)]
    for name in ("rft", "traj_dpo"):
        assert list(rows[name].model.adapter) == saved.model.adapter[:1] + [f"{table}/{name}/iter_001/adapter"]
    clone_test = OmegaConf.load(CONF.parent / "experiments/webshop_clone80_base/config/test200.yaml")
    for name, cfg in rows.items():
        assert cfg.paths.run_dir == f"{table}/test200/{name}"
        for key in ("seed", "iterations", "tuning", "eval", "env.make", "agent", "engine"):
            assert settings(cfg, key) == settings(clone_test, key), (name, key)
    # Its search rows: the clone and pi_3 with the study's search, committed and verifier, on the
    # same goals and settings, with no greedy episode read again.
    policies = {"clone_mcts": saved.model.adapter[:1], "pi_3_mcts": list(rows["pi_3"].model.adapter)}
    for (name, adapters), argv in zip(policies.items(), calls("webshop_agentq_table", *policies), strict=True):
        cfg = make_cfg(*argv)
        assert list(cfg.model.adapter) == list(adapters)
        assert cfg.paths.run_dir == f"{table}/test200/{name}"
        assert settings(cfg, "eval") == settings(clone_test, "eval") | {"zero_shot": False, "search": True, "num_simulations": 2}
        assert settings(cfg, "search") == settings(rows["pi_3"], "search") and cfg.search.use_critic is False
        for key in ("seed", "iterations", "tuning", "env.make", "agent", "engine"):
            assert settings(cfg, key) == settings(clone_test, key), (name, key)


def test_revision_uptake_scores_the_header_the_model_gives_and_reads_the_states_it_names(tmp_path, monkeypatch):
    import torch

    from agentq.data.buffer import ReplayBuffer
    from agentq.models.logprobs import completion_logprobs
    from agentq.records.examples import Segment, SFTExample

    monkeypatch.syspath_prepend(str(CONF.parent / "experiments"))  # it imports agent_r_iterations
    uptake = experiment_script("agent_r_uptake.py")
    tiny = OmegaConf.create({"_target_": "agentq.models.loading.TinyRandomModel"})
    scorer = uptake.Scorer(tiny, [], max_prompt_tokens=512)
    with torch.no_grad():  # a random model's next-token distributions are nearly flat: sharpen them
        scorer.model.lm_head.weight.mul_(10.0)
    prompt = [{"role": "user", "content": "Current observation:\nyou see a door"}]
    turn = "THOUGHT: I realize my previous actions were wrong; I will go back and try another way."
    start, greedy, per_token = scorer.score(prompt, turn)
    # The same numbers from the trainer's log-prob function and the model's argmax, position by position.
    prompt_ids, completion_ids = scorer.encoder.segment(Segment(prompt, turn))
    ids = torch.tensor([prompt_ids + completion_ids])
    header = torch.zeros_like(ids)
    header[0, len(prompt_ids) : len(prompt_ids) + scorer.header_tokens] = 1
    whole = torch.zeros_like(ids)
    whole[0, len(prompt_ids) :] = 1
    with torch.inference_mode():
        logits = scorer.model(input_ids=ids).logits[0]
        expected_start = completion_logprobs(scorer.model, ids, torch.ones_like(ids), header).exp().item()
        expected_mean = completion_logprobs(scorer.model, ids, torch.ones_like(ids), whole).item() / len(completion_ids)
    argmax = logits[len(prompt_ids) - 1 : len(prompt_ids) - 1 + scorer.header_tokens].argmax(-1).tolist()
    assert start == pytest.approx(expected_start, rel=1e-4) and 0 < start < 1
    assert per_token == pytest.approx(expected_mean, rel=1e-4)
    assert greedy == (argmax == completion_ids[: scorer.header_tokens])
    with pytest.raises(ValueError, match="THOUGHT"):
        scorer.score(prompt, "COMMAND: look")

    # Revision points: the revision turn of revision examples only; recovery states: the first own step.
    layout = RunLayout(tmp_path)
    revision = SFTExample(0, [Segment(prompt, "COMMAND: go", train=False), Segment(prompt, turn), Segment(prompt, "COMMAND: look")], "revision")
    good = SFTExample(1, [Segment(prompt, "THOUGHT: fine.\nCOMMAND: look")], "good")
    ReplayBuffer(layout).write_examples(1, [revision, good])
    assert uptake.revision_points(tmp_path, 1) == [(prompt, turn)]
    folder = layout.episodes(0, "recovery")
    folder.mkdir(parents=True)
    actions = ("THOUGHT: first.\nCOMMAND: go", "COMMAND: go", "THOUGHT: I was wrong.")  # the first two the clone's
    steps = [{"prompt": [{"role": "user", "content": f"state {t}"}], "action": a} for t, a in enumerate(actions)]
    for task, cut in ((0, 2), (1, 3)):  # task 1's prefix used every step: no state left to act in
        (folder / f"task_{task}.json").write_text(json.dumps({"trajectory": {"steps": steps}, "stats": {"prefix_steps": cut}}))
    assert uptake.recovery_states(layout) == [steps[2]["prompt"]]
    assert uptake.own_turns(tmp_path, 0) == (1, 1)  # the policy's own turn only, not the prefix's


def test_saved_configs_name_paths_in_the_checkout_relative_to_it():
    """A study resumes or is read again from any clone: a saved config that named a run, adapter or
    log folder by an absolute path into one machine's checkout would break that. (Paths outside
    the checkout, such as /usr/bin/chromium, are the machine's and may be absolute.)"""
    import re

    into_a_checkout = re.compile(r":\s*/\S*/experiments/")
    saved = [p for p in (CONF.parent / "experiments").rglob("*.yaml") if "wandb" not in p.parts]
    assert len(saved) > 50  # the committed studies' configs were found
    offending = [f"{p.relative_to(CONF.parent)}: {line.strip()}" for p in saved
                 for line in p.read_text().splitlines() if into_a_checkout.search(line)]  # fmt: skip
    assert not offending, offending
