"""MCTS on the toy env, checked against values worked out by hand (see comments)."""

import json
import math
import os
from pathlib import Path

import pytest

from agentq.records.tree import Tree
from agentq.search.mcts import MCTS, ucb_score
from tests.toy import ScriptedCritic, ScriptedPolicy, SnapshotToyEnv, ToyEnv


def by_path(tree: Tree) -> dict[str, object]:
    out = {}
    for node in tree.nodes:
        key = "".join(n.command[0].upper() for n in tree.path(node)[1:]) or "root"
        out[key] = node
    return out


def run(env, sims=4, c_exp=2.0):
    search = MCTS(num_simulations=sims, num_actions=2, max_depth=2, c_exp=c_exp, alpha=0.5)
    return search(env, ScriptedPolicy(), ScriptedCritic(), task_id=0)


def test_hand_worked_tree():
    # Sim 1: expand root (L: critic 0, R: critic 1); N(root)=0 so UCB = Q -> R (0.5 > 0);
    #        roll out "left" from R -> success, R=1.
    # Sim 2: R (Q 1.0) beats L (Q 0); expand R (RL critic 1, RR critic 0) -> RL, success.
    # Sim 3: log 2 = .693; L: 2*sqrt(.693) = 1.665, R: 1 + 2*sqrt(.693/3) = 1.961 -> R;
    #        RL: 1 + 2*sqrt(.693/2) = 2.177 > RR 1.665 -> RL (terminal, 1).
    # Sim 4: log 3 = 1.099; L: 2*sqrt(1.099) = 2.096 > R: 1 + 2*sqrt(1.099/4) = 2.048 -> L;
    #        expand L (LL critic 1, LR 0) -> LL, the episode ends at depth 2 unsolved: R=0.
    result = run(SnapshotToyEnv())
    n = by_path(result.tree)
    assert set(n) == {"root", "L", "R", "LL", "LR", "RL", "RR"}
    expected = {  # (N, Q_mcts, critic)
        "root": (4, 0.75, 0.0),
        "L": (1, 0.0, 0.0),
        "R": (3, 1.0, 1.0),
        "RL": (2, 1.0, 1.0),
        "RR": (0, 0.0, 0.0),
        "LL": (1, 0.0, 1.0),
        "LR": (0, 0.0, 0.0),
    }
    for key, (visits, q, critic) in expected.items():
        assert n[key].visits == visits, key
        assert n[key].q_mcts == pytest.approx(q), key
        assert n[key].critic_score == pytest.approx(critic), key
    assert n["LL"].blended_q(0.5) == pytest.approx(0.5)
    # The value each node's first visit backed up (root: sim 1's success, not its Q 0.75).
    firsts = {"root": 1.0, "L": 0.0, "R": 1.0, "RL": 1.0, "RR": None, "LL": 0.0, "LR": None}
    assert {key: node.first_return for key, node in n.items()} == firsts
    assert n["RL"].success and n["RL"].terminal and not n["LL"].success
    # One trajectory per simulation; the best succeeds via right, left.
    assert len(result.trajectories) == 4
    assert [t.reward for t in result.trajectories] == [1.0, 1.0, 1.0, 0.0]
    assert [s.command for s in result.best.steps] == ["right", "left"]
    assert result.stats.simulations == 4


def test_low_exploration_never_tries_left():
    # With c_exp = 1 the value of R (1.0) keeps winning: at sim 4, L scores sqrt(log 3) = 1.048
    # and R scores 1 + sqrt(log 3 / 4) = 1.524.
    n = by_path(run(SnapshotToyEnv(), c_exp=1.0).tree)
    assert n["L"].visits == 0 and n["R"].visits == 4


def test_replay_matches_snapshot():
    snap = run(SnapshotToyEnv()).tree.to_dict()
    env = ToyEnv()
    replay = run(env).tree.to_dict()
    strip = lambda d: [(x["command"], x["visits"], x["q_mcts"], x["critic_score"]) for x in d["nodes"]]  # noqa: E731
    assert strip(snap) == strip(replay)
    assert env.resets > 1  # it really restored by reset + replay


def test_tree_json_round_trip():
    tree = run(SnapshotToyEnv()).tree
    again = Tree.from_dict(tree.to_dict())
    assert again.to_dict() == tree.to_dict()


def test_ucb_formula():
    tree = run(SnapshotToyEnv()).tree
    r = by_path(tree)["R"]
    assert ucb_score(r, 3, alpha=0.5, c_exp=2.0) == pytest.approx(1.0 + 2 * math.sqrt(math.log(3) / 4))


@pytest.mark.parametrize(
    "kwargs, key",
    [({"num_actions": 0}, "search.num_actions"), ({"alpha": 1.5}, "search.alpha"), ({"num_simulations": 0}, "search.num_simulations")],
)
def test_invalid_values_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        MCTS(**kwargs)


GOLDEN = Path(__file__).parent / "golden" / "toy_mcts_tree.json"


def test_seeded_tree_matches_golden_file():
    """The whole serialised tree of the hand-worked search, frozen: any change to
    selection, expansion, backpropagation or the JSON format shows up here.
    Regenerate with AGENTQ_REGEN_GOLDEN=1 after an intended change."""
    tree = run(SnapshotToyEnv()).tree.to_dict()
    if os.environ.get("AGENTQ_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(tree, indent=1, sort_keys=True))
    assert json.loads(GOLDEN.read_text()) == json.loads(json.dumps(tree))


def test_llm_search_is_deterministic_for_a_seed(monkeypatch):
    """A search's tree depends on the weights, seed, task and config, never on what
    the policy and critic ran before (their prompt caches): warm both with another
    search, then the same seeded search twice gives one tree, from the same cache
    states as on fresh objects."""
    import gymnasium as gym
    import torch

    from agentq.agent.grounding import Grounder
    from agentq.agent.policy import LLMPolicy, Sampling
    from agentq.agent.prompt import PromptBuilder
    from agentq.critic.ranking import LLMRankingCritic
    from agentq.models.loading import TinyRandomModel
    from tests.conftest import PrefillLog

    model, tokenizer = TinyRandomModel().load()

    def parts():
        sampling = Sampling(max_new_tokens=8)
        policy = LLMPolicy(model, tokenizer, prompt=PromptBuilder(), grounder=Grounder(), sampling=sampling)
        return policy, LLMRankingCritic(model, tokenizer)

    env = gym.make("envs.textcraft:agentq/TextCraft-v0", disable_env_checker=True)
    search = MCTS(num_simulations=3, num_actions=3, max_depth=3)

    def tree(policy, critic, task_id=150, seed=3):
        return search(env, policy, critic, task_id=task_id, generator=torch.Generator().manual_seed(seed)).tree

    fresh_policy, fresh_critic = parts()
    fresh_log = PrefillLog(monkeypatch, fresh_policy, fresh_critic)
    fresh = tree(fresh_policy, fresh_critic).to_dict()
    fresh_prefills = fresh_log.take()

    policy, critic = parts()
    log = PrefillLog(monkeypatch, policy, critic)
    tree(policy, critic, task_id=151, seed=9)  # warms both caches with the same system prompt
    log.take()
    trees, prefills = [], []
    for _ in range(2):
        trees.append(tree(policy, critic).to_dict())
        prefills.append(log.take())
    assert prefills[0] == prefills[1] == fresh_prefills
    assert any(reused for _, _, reused in fresh_prefills)  # the cache does work within a search
    assert trees[0] == trees[1] == fresh
    assert len(trees[0]["nodes"]) > 3
    other = tree(policy, critic, seed=4).to_dict()
    assert [n["action"] for n in other["nodes"]] != [n["action"] for n in trees[0]["nodes"]]

class _CountingCritic(ScriptedCritic):
    def __init__(self) -> None:
        self.calls = 0

    def score(self, history, candidates):
        self.calls += 1
        return super().score(history, candidates)


def test_uct_never_asks_the_critic_and_values_by_the_env_reward():
    """Agent-R's search: Q̂ = 0 on every edge, Q = Q_mcts from the env's reward alone."""
    critic = _CountingCritic()
    uct = MCTS(num_simulations=6, num_actions=2, max_depth=2, alpha=1.0, use_critic=False)
    result = uct(SnapshotToyEnv(), ScriptedPolicy(), critic, task_id=0)
    assert critic.calls == 0 and result.stats.critic_calls == 0
    nodes = result.tree.nodes[1:]
    assert nodes and all(n.critic_score == 0.0 for n in nodes)
    # New children go in the policy's order (left first), then UCB1 on Q_mcts finds right/left.
    assert result.tree.children(result.tree.root)[0].command == "left"
    assert result.best.success
    # Agent Q's search asks the critic at every expansion with two or more candidates.
    MCTS(num_simulations=6, num_actions=2, max_depth=2)(SnapshotToyEnv(), ScriptedPolicy(), critic, task_id=0)
    assert critic.calls > 0


def test_uct_refuses_a_critic_weight():
    with pytest.raises(ValueError, match="search.alpha must be 1.0"):
        MCTS(alpha=0.5, use_critic=False)


@pytest.mark.parametrize("env", ["textcraft", "webshop", "sciworld", "opentable"])
def test_agent_r_experiments_search_with_plain_uct(env):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    with initialize_config_dir(config_dir=str(Path(__file__).parent.parent / "conf"), version_base="1.3"):
        agent_r = compose("config", overrides=[f"+experiment={env}_agent_r"])
        agent_q = compose("config", overrides=[f"+experiment={env}_mcts_dpo"])
    uct, mcts = instantiate(agent_r.search), instantiate(agent_q.search)
    assert (uct.use_critic, uct.alpha) == (False, 1.0)
    assert mcts.use_critic and mcts.alpha < 1.0
    assert (uct.num_simulations, uct.num_actions, uct.max_depth) == (mcts.num_simulations, mcts.num_actions, mcts.max_depth)


class _ConfidentPolicy:
    """A policy sure of one command: all k samples are the first valid action not excluded."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, frozenset]] = []

    def propose(self, history, k, *, greedy=False, generator=None, exclude=()):
        from tests.toy import toy_candidate

        self.calls.append((k, frozenset(exclude)))
        left = [a for a in history.valid_actions if a not in exclude]
        return [toy_candidate(left[0], 0, history.observation)] * k if left else []


@pytest.mark.parametrize("k", [2, 3])
def test_distinct_actions_refills_an_expansion_whose_samples_repeat(k):
    from tests.toy import ThreeWayToyEnv

    def search(distinct):
        policy = _ConfidentPolicy()
        mcts = MCTS(num_simulations=1, num_actions=k, max_depth=1, alpha=1.0, use_critic=False, distinct_actions=distinct)
        return mcts(ThreeWayToyEnv(), policy, None, task_id=0), policy

    plain, plain_policy = search(False)
    assert [n.command for n in plain.tree.children(plain.tree.root)] == ["a"]  # K samples, one child
    assert plain_policy.calls == [(k, frozenset())]
    result, policy = search(True)
    assert [n.command for n in result.tree.children(result.tree.root)] == ["a", "b", "c"][:k]
    # each refill asks for the missing samples and excludes what was drawn
    assert policy.calls == [(k, frozenset()), (k - 1, {"a"}), (k - 2, {"a", "b"})][: k]
    assert result.stats.policy_calls == len(policy.calls)


def test_distinct_actions_stops_when_every_valid_action_has_its_child():
    policy = _ConfidentPolicy()
    mcts = MCTS(num_simulations=1, num_actions=3, max_depth=1, alpha=1.0, use_critic=False, distinct_actions=True)
    result = mcts(ToyEnv(), policy, None, task_id=0)  # two valid actions
    assert [n.command for n in result.tree.children(result.tree.root)] == ["left", "right"]
    assert len(policy.calls) == 2  # no third call once left and right are drawn


def test_distinct_actions_needs_constrained_decoding(make_cfg):
    from agentq.components import build

    cfg = make_cfg("+experiment=smoke", "search.distinct_actions=true", "agent.sampling.constrain_command=false")
    with pytest.raises(ValueError, match="search.distinct_actions"):
        build(cfg)
