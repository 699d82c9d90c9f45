"""Every config composes; every experiment builds without loading weights; bad values fail early."""

import pytest
import transformers
from hydra.errors import HydraException

from agentq.loop import build
from tests.conftest import CONF

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
    from agentq.loop import IncompatibleConfig

    cfg = make_cfg("+experiment=smoke", f"search={search}", f"objective={objective}")
    if expected_to_run(search, objective):
        build(cfg).env.close()
    else:
        with pytest.raises(IncompatibleConfig, match="use search=|objective="):
            build(cfg)


@pytest.mark.parametrize("search, critic", [("mcts", "llm_value"), ("tot_bfs", "llm_rank"), ("tot_dfs", "llm_rank")])
def test_a_search_with_the_wrong_kind_of_critic_is_refused(make_cfg, no_weights, search, critic):
    from agentq.loop import IncompatibleConfig

    with pytest.raises(IncompatibleConfig, match="critic"):
        build(make_cfg("+experiment=smoke", f"search={search}", f"critic={critic}"))


def test_an_objective_on_the_wrong_kind_of_examples_is_refused(make_cfg, no_weights):
    from agentq.loop import IncompatibleConfig

    with pytest.raises(IncompatibleConfig, match="sft examples"):
        build(make_cfg("+experiment=smoke", "objective=sft", "pairs=step"))


def test_mcts_eval_budget_with_another_search_is_refused(make_cfg, no_weights):
    from agentq.loop import IncompatibleConfig

    with pytest.raises(IncompatibleConfig, match="eval.num_simulations"):
        build(make_cfg("+experiment=smoke", "search=tot_bfs", "eval.num_simulations=2"))
