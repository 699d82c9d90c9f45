"""Grounding (issue 14 §4): only a command that is clearly a listed action is
rewritten; anything else goes to the env as written, a missing command is an
empty step whose observation says so, and every step records what happened."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hydra.utils import instantiate

from agentq.agent import episode
from agentq.agent.action import parse_composite
from agentq.agent.grounding import Grounded, Grounder, grounding_shares
from agentq.agent.policy import LLMPolicy, Sampling
from agentq.agent.prompt import PromptBuilder
from agentq.evaluate import aggregate
from agentq.records.action import GROUNDINGS, Candidate
from agentq.records.history import History
from agentq.records.trajectory import Step, Trajectory
from agentq.records.tree import Node, Tree
from agentq.search.position import child_node, path_steps
from envs.textcraft.env import TextCraftEnv
from envs.webshop.env import WebShopEnv
from tests.test_webshop_env import CATALOGUE

# What the old fuzzy grounder (rapidfuzz WRatio) made of these on TextCraft task 0.
BANNER = "craft 1 cyan banner using 6 cyan wool, 1 stick"
STICKS = "craft 4 stick using 2 planks"


@pytest.fixture(scope="module")
def textcraft():
    env = TextCraftEnv(max_steps=20)
    yield env
    env.close()


def test_get_2_stick_is_refused_and_the_env_says_why(textcraft) -> None:
    history = episode.start(textcraft, 0)
    assert BANNER in history.valid_actions and STICKS in history.valid_actions
    grounded = Grounder()("get 2 stick", history.valid_actions)
    assert grounded == Grounded("get 2 stick", "refused") and not grounded.changed
    after, reward, outcome = episode.step(textcraft, history, "COMMAND: get 2 stick", grounded.command)
    assert "Last result: Could not find stick" in after.observation  # not a crafted banner
    assert (reward, outcome.terminal) == (0.0, False)
    assert textcraft.snapshot().steps == 1


def test_plan_plan_is_not_a_craft_command(textcraft) -> None:
    history = episode.start(textcraft, 0)
    parsed = parse_composite("PLAN: PLAN:")
    grounded = Grounder()(parsed.command, history.valid_actions)
    assert grounded.grounding in ("refused", "missing") and grounded.command not in history.valid_actions
    after, _, _ = episode.step(textcraft, history, "PLAN: PLAN:", grounded.command)
    assert "You are not carrying anything" in after.observation  # nothing was crafted or fetched


def test_junk_on_webshop_is_not_a_click() -> None:
    env = WebShopEnv(max_steps=15, catalogue=CATALOGUE)
    history = episode.start(env, 0)
    history, *_ = episode.step(env, history, "", "search[lamp]")
    assert "click[Back to Search]" in history.valid_actions  # the old min_score 0 target
    junk = "I should think about which lamp is best for the customer"
    grounded = Grounder()(junk, history.valid_actions)
    assert grounded == Grounded(junk, "refused")
    after, _, outcome = episode.step(env, history, junk, grounded.command)
    assert "Invalid action: expected search[query] or click[button]" in after.observation
    assert "Page 1 (Total results" in after.observation and not outcome.terminal  # still the results page
    assert Grounder()("", history.valid_actions) == Grounded("", "missing")


def test_missing_command_is_an_observation_and_uses_a_step(textcraft) -> None:
    history = episode.start(textcraft, 0)
    grounded = Grounder()(parse_composite("THOUGHT: hmm\nEXPLANATION:").command, history.valid_actions)
    assert grounded == Grounded("", "missing")
    after, reward, outcome = episode.step(textcraft, history, "THOUGHT: hmm", grounded.command)
    assert after.observation.startswith(episode.NO_COMMAND)
    assert (reward, outcome.terminal, textcraft.snapshot().steps) == (0.0, False, 1)


RESULTS = ["click[Back to Search]", "click[Next >]", "click[B0123]", "click[B0456]"]
ITEM = ["click[Back to Search]", "click[< Prev]", "click[Large]", "click[X-Large]", "click[navy blue]", "click[Buy Now]"]
OPENTABLE = ["CLICK [1]", "CLICK [2]", "TYPE [3] [...]", "SUBMIT [3]", "SCROLL [DOWN]", "ASK USER HELP", "GOTO [...]"]


@pytest.mark.parametrize(
    "command, valid, expected",
    [
        ("click[B0123]", RESULTS, Grounded("click[B0123]", "exact")),
        ("click[b0123]", RESULTS, Grounded("click[B0123]", "normalized")),
        ("Click [ b0456 ]", RESULTS, Grounded("click[B0456]", "normalized")),
        ("B0123", RESULTS, Grounded("click[B0123]", "normalized")),  # a unique product id
        ("click on b0456", RESULTS, Grounded("click[B0456]", "normalized")),
        ("click back to search", RESULTS, Grounded("click[Back to Search]", "normalized")),
        ("click[next >]", RESULTS, Grounded("click[Next >]", "normalized")),
        ("large", ITEM, Grounded("click[Large]", "normalized")),  # a unique option name
        ("select Navy Blue", ITEM, Grounded("click[navy blue]", "normalized")),
        ("buy now", ITEM, Grounded("click[Buy Now]", "normalized")),
        ("search for red shoes", ["search[...]"], Grounded("search[red shoes]", "filled")),
        ("search[red shoes]", ["search[...]"], Grounded("search[red shoes]", "exact")),
        ("click 2", OPENTABLE, Grounded("CLICK [2]", "normalized")),
        ("type [3] sushi", OPENTABLE, Grounded("TYPE [3] [sushi]", "filled")),
        ("ask user help", OPENTABLE, Grounded("ASK USER HELP", "normalized")),
        ("Get 1 Oak Logs.", ["inventory", "get 1 oak logs"], Grounded("get 1 oak logs", "normalized")),
    ],
)
def test_the_same_action_written_differently_still_grounds(command, valid, expected) -> None:
    assert Grounder()(command, valid) == expected


@pytest.mark.parametrize(
    "command, valid",
    [
        ("click[Next]", RESULTS),  # close to "Next >", not the same button
        ("click[B012]", RESULTS),
        ("navy", ITEM),  # part of an option name
        ("large x", ITEM),
        ("purchase", ITEM),
        ("2", OPENTABLE),  # a bare number names nothing
        ("searching shoes", ["search[...]"]),
        ("search[lamp]", RESULTS),  # no search bar on this page
        ("get 2 oak logs", ["inventory", "get 1 oak logs"]),  # another count: the env decides
        ("look at the cup", ["look around", "look at cup"]),
    ],
)
def test_a_close_but_different_command_is_refused(command, valid) -> None:
    assert Grounder()(command, valid) == Grounded(command, "refused")


def test_an_ambiguous_name_is_refused() -> None:
    assert Grounder()("large", ["click[Large]", "select[large]"]).grounding == "refused"
    assert Grounder()("click[LARGE]", ["click[Large]", "click[large]"]).grounding == "refused"


def test_removed_min_score_override_fails_with_a_clear_error(make_cfg) -> None:
    cfg = make_cfg("+experiment=webshop_mcts_dpo")
    assert instantiate(cfg.agent.grounder) == Grounder()
    cfg = make_cfg("+experiment=smoke", "agent.grounder.min_score=0")
    with pytest.raises(Exception, match="min_score was removed"):
        instantiate(cfg.agent.grounder)


# -- recorded in candidates, steps, trees and evaluation --------------------------------


@dataclass
class _Sample:
    text: str
    token_ids: tuple[int, ...] = (1,)
    logprob: float = -1.0


def test_policy_steps_record_their_grounding(textcraft, monkeypatch) -> None:
    from agentq.models.loading import TinyRandomModel

    texts = iter(
        [
            "THOUGHT: t\nCOMMAND: GET 1 oak logs\nEXPLANATION: e",
            "THOUGHT: t\nCOMMAND: get 2 stick",
            "THOUGHT: nothing to do",
            "COMMAND: inventory",
        ]
    )
    monkeypatch.setattr(
        "agentq.models.engine.sample_k", lambda model, ids, k, **kw: [_Sample(next(texts)) for _ in range(k)]
    )
    model, tokenizer = TinyRandomModel().load()
    policy = LLMPolicy(
        model, tokenizer, prompt=PromptBuilder(), grounder=Grounder(), sampling=Sampling(reuse_prefix_cache=False)
    )
    steps, _ = episode.rollout(
        textcraft, policy, episode.start(textcraft, 0), max_steps=4, greedy=True, generator=torch.Generator()
    )
    assert [(s.command, s.grounding) for s in steps] == [
        ("get 1 oak logs", "normalized"),
        ("get 2 stick", "refused"),
        ("", "missing"),
        ("inventory", "exact"),
    ]
    assert "Got 1 oak logs" in steps[0].observation and "Could not find stick" in steps[1].observation
    assert steps[2].observation.startswith(episode.NO_COMMAND)
    trajectory = Trajectory(task_id=0, steps=steps, reward=0.0, success=False)
    assert Trajectory.from_dict(trajectory.to_dict()) == trajectory


def test_old_files_without_grounding_still_load() -> None:
    step = Step(prompt=[], action="a", command="c", observation="o", reward=0.0, grounding="refused").__dict__
    old = {k: v for k, v in step.items() if k != "grounding"}
    loaded = Trajectory.from_dict({"task_id": 1, "steps": [old], "reward": 0.0, "success": False})
    assert loaded.steps[0].grounding is None


def test_search_tree_nodes_keep_the_grounding() -> None:
    tree = Tree(task_id=0, alpha=0.5)
    root = tree.add(Node(id=0, parent=None, depth=0, history=History("start", valid_actions=("a",))))
    root.prompt = [{"role": "user", "content": "start"}]
    for command, grounding in [("a", "exact"), ("zz", "refused"), ("", "missing")]:
        child = tree.add(child_node(root, Candidate(text=f"COMMAND: {command}", command=command, grounding=grounding)))
        child.history = History("after")
    loaded = Tree.from_dict(tree.to_dict())
    assert [n["grounding"] for n in tree.to_dict()["nodes"]] == [None, "exact", "refused", "missing"]
    assert [path_steps(loaded, n)[-1].grounding for n in loaded.nodes[1:]] == ["exact", "refused", "missing"]
    old = tree.to_dict()
    for n in old["nodes"]:
        del n["grounding"]
    assert [n.grounding for n in Tree.from_dict(old).nodes] == [None] * 4


def _record(*groundings):
    steps = [{"prompt": [], "action": "", "command": "", "observation": "", "reward": 0.0} for _ in groundings]
    for s, g in zip(steps, groundings, strict=True):
        if g != "old":
            s["grounding"] = g
    trajectory = {"task_id": 0, "steps": steps, "reward": 0.0, "success": False, "score": 0.0}
    return {"trajectory": trajectory, "stats": {}}


def test_aggregate_reports_grounding_shares() -> None:
    records = [
        _record("exact", "exact", "normalized", "refused"),
        _record("filled", "missing", "exact", None),  # None: a replayed recovery prefix step
        _record("refused", "unchecked"),
    ]
    metrics = aggregate(records)
    assert metrics["grounding_steps"] == 9
    assert metrics["grounding_exact"] == pytest.approx(3 / 9)
    assert metrics["grounding_rewritten"] == pytest.approx(2 / 9)
    assert metrics["grounding_refused"] == pytest.approx(2 / 9)
    assert metrics["grounding_missing"] == pytest.approx(1 / 9)
    assert metrics["grounding_unchecked"] == pytest.approx(1 / 9)
    assert sum(v for k, v in metrics.items() if k.startswith("grounding_") and k != "grounding_steps") == pytest.approx(1)
    # Episodes written before grounding was recorded: no shares rather than made-up zeros.
    assert not any(k.startswith("grounding") for k in aggregate([_record("old", "old")]))
    assert grounding_shares([]) == {} and set(GROUNDINGS) >= {"exact", "refused", "missing"}
