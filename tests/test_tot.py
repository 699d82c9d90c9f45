"""ToT BFS / DFS and the sampling baselines on toy envs, against trees worked out by hand."""

from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentq.data.pairs import StepPairBuilder
from agentq.records.tree import Tree
from agentq.search.mcts import MCTS
from agentq.search.sampling_baselines import BestOfN, SelfConsistency, majority_vote
from agentq.search.tot import BFS, DFS
from tests.toy import (
    EpisodePolicy,
    ScriptedCritic,
    ScriptedPolicy,
    SnapshotThreeWayToyEnv,
    SnapshotToyEnv,
    TableEvaluator,
    TablePolicy,
    ThreeWayToyEnv,
    ToyEnv,
    toy_candidate,
)

CONF = Path(__file__).resolve().parents[1] / "conf"

# V(s) by path. The env has actions a, b, c; "b/a" succeeds (BFS env).
BFS_VALUES = {
    "a": 0.6, "b": 0.5, "c": 0.1,
    "a/a": 0.9, "a/b": 0.3, "a/c": 0.2, "b/a": 0.95, "b/b": 0.1, "b/c": 0.4,
    "a/a/a": 0.7, "a/a/b": 0.2, "a/a/c": 0.3,
}  # fmt: skip


def key(tree: Tree, node) -> str:
    return "/".join(n.command for n in tree.path(node)[1:])


def kept_and_pruned(tree: Tree) -> tuple[set[str], set[str]]:
    kept = {key(tree, n) for n in tree.nodes[1:] if n.kept}
    pruned = {key(tree, n) for n in tree.nodes[1:] if n.kept is False}
    return kept, pruned


def bfs(env, max_depth=3, **kwargs):
    policy, evaluator = ScriptedPolicy(), TableEvaluator(BFS_VALUES)
    search = BFS(breadth=2, num_actions=3, max_depth=max_depth, **kwargs)
    return search(env, policy, evaluator, task_id=0), policy, evaluator


# -- BFS ----------------------------------------------------------------------------


def test_bfs_hand_worked_tree():
    # Level 1: a .6, b .5, c .1 -> keep a, b.
    # Level 2 (6 children, best 2 across the frontier): b/a .95 (a success: terminal), a/a .9.
    # Level 3: b/a is terminal, so only a/a is expanded: keep a/a/a .7, a/a/c .3.
    result, policy, evaluator = bfs(SnapshotThreeWayToyEnv(depth=3, goal=("b", "a")))
    tree = result.tree
    assert evaluator.calls == [
        ["a", "b", "c"],
        ["a/a", "a/b", "a/c", "b/a", "b/b", "b/c"],
        ["a/a/a", "a/a/b", "a/a/c"],
    ]
    assert policy.seen == ["", "a", "b", "a/a"]  # the expanded states, level by level
    kept, pruned = kept_and_pruned(tree)
    assert kept == {"a", "b", "a/a", "b/a", "a/a/a", "a/a/c"}
    assert pruned == {"c", "a/b", "a/c", "b/b", "b/c", "a/a/b"}
    assert all(n.critic_score == BFS_VALUES[key(tree, n)] for n in tree.nodes[1:])
    assert all(n.blended_q(tree.alpha) == n.critic_score for n in tree.nodes)  # alpha = 0
    # Every child is a real env state.
    assert all(
        n.expanded_env and n.history.observation == f"At {key(tree, n)}" for n in tree.nodes[1:]
    )
    # Trajectories: every terminal state (b/a and the three depth-3 states).
    assert [[s.command for s in t.steps] for t in result.trajectories] == [
        ["b", "a"], ["a", "a", "a"], ["a", "a", "b"], ["a", "a", "c"]
    ]  # fmt: skip
    assert [t.reward for t in result.trajectories] == [1.0, 0.0, 0.0, 0.0]
    assert {t.source for t in result.trajectories} == {"tot_bfs"}
    assert [s.command for s in result.best.steps] == ["b", "a"]
    # A step's prompt is the parent's rendered history.
    assert [s.prompt[0]["content"] for s in result.best.steps] == ["At start", "At b"]
    assert result.stats.policy_calls == 4 and result.stats.critic_calls == 3
    assert result.stats.states_evaluated == 12


def test_bfs_depth_limit_keeps_the_final_frontier_as_trajectories():
    result, _, _ = bfs(SnapshotThreeWayToyEnv(depth=3, goal=("b", "a")), max_depth=2)
    assert [[s.command for s in t.steps] for t in result.trajectories] == [["a", "a"], ["b", "a"]]
    assert [t.reward for t in result.trajectories] == [0.0, 1.0]
    assert [s.command for s in result.best.steps] == ["b", "a"]


def test_bfs_best_ties_go_to_the_higher_value():
    # No success anywhere (goal unreachable): every return is 0, so the evaluator decides.
    result, _, _ = bfs(SnapshotThreeWayToyEnv(depth=3, goal=("c", "c", "c")), max_depth=2)
    assert {t.reward for t in result.trajectories} == {0.0}
    assert [s.command for s in result.best.steps] == ["b", "a"]  # V = .95


def test_bfs_step_pairs_are_kept_against_pruned_siblings():
    tree = bfs(SnapshotThreeWayToyEnv(depth=3, goal=("b", "a")))[0].tree

    command = {n.action: n.command for n in tree.nodes}  # the toy's text names its command

    def pairs(threshold):
        built = StepPairBuilder(threshold=threshold)(tree)
        return {
            (key(tree, tree.nodes[p.node_id]), command[p.chosen], command[p.rejected])
            for p in built
        }

    # Kept vs pruned at each node; kept-kept and pruned-pruned siblings never pair.
    assert pairs(0.0) == {
        ("", "a", "c"), ("", "b", "c"),
        ("a", "a", "b"), ("a", "a", "c"),
        ("b", "a", "b"), ("b", "a", "c"),
        ("a/a", "a", "b"), ("a/a", "c", "b"),
    }  # fmt: skip
    # theta = 0.45 drops the gaps .4 (b vs c at the root) and .1 (a/a/c vs a/a/b).
    assert pairs(0.45) == pairs(0.0) - {("", "b", "c"), ("a/a", "c", "b")}
    pair = next(p for p in StepPairBuilder(threshold=0.0)(tree) if p.node_id == 0)
    assert pair.prompt == tree.root.prompt and pair.chosen_ids and pair.q_chosen == 0.6


def test_bfs_restores_by_snapshot_and_by_replay():
    # Restores: root x2 (b, c), a x3 (expand, a/b, a/c), b x3, a/a x3 = 11. Replay of
    # those costs 0*2 + 1*3 + 1*3 + 2*3 = 12 extra env steps, each after a reset.
    snap, _, _ = bfs(SnapshotThreeWayToyEnv(depth=3, goal=("b", "a")))
    env = ThreeWayToyEnv(depth=3, goal=("b", "a"))
    replay, _, _ = bfs(env)

    def strip(result):
        return [
            (n.command, n.critic_score, n.kept, n.history, n.success) for n in result.tree.nodes
        ]

    assert strip(snap) == strip(replay)
    assert snap.stats.restores == replay.stats.restores == 11
    assert snap.stats.env_steps == 12 and replay.stats.env_steps == 24
    assert env.resets == 1 + 11


def test_bfs_tree_json_round_trip_keeps_kept():
    tree = bfs(SnapshotThreeWayToyEnv(depth=3, goal=("b", "a")))[0].tree
    again = Tree.from_dict(tree.to_dict())
    assert again.to_dict() == tree.to_dict()
    assert kept_and_pruned(again) == kept_and_pruned(tree)


def test_bfs_merges_candidates_with_the_same_command():
    policy = TablePolicy(
        {"": [("a", -2.0), ("a", -1.0), ("b", -3.0)], "a": [("c", -1.0)], "b": [("c", -1.0)]}
    )
    search = BFS(breadth=1, num_actions=3, max_depth=1)
    result = search(SnapshotThreeWayToyEnv(), policy, TableEvaluator(BFS_VALUES), task_id=0)
    children = result.tree.children(result.tree.root)
    assert [c.command for c in children] == ["a", "b"]
    assert children[0].logprob == -1.0  # the likelier text of the two "a"s


def test_bfs_budget_stops_mid_level():
    # Calls: root (1), a (2); b is never expanded. a's children are still judged:
    # keep a/a .9, a/b .3. Branch ends: b (unexpanded frontier), a/a, a/b.
    result, policy, _ = bfs(SnapshotThreeWayToyEnv(depth=3, goal=("b", "a")), max_policy_calls=2)
    assert result.stats.policy_calls == 2 and policy.num_calls == 2
    kept, pruned = kept_and_pruned(result.tree)
    assert kept == {"a", "b", "a/a", "a/b"} and pruned == {"c", "a/c"}
    assert [[s.command for s in t.steps] for t in result.trajectories] == [
        ["b"],
        ["a", "a"],
        ["a", "b"],
    ]


# -- DFS ----------------------------------------------------------------------------

# Env of depth 4 whose goal is b/a/c, so depth-3 states are not terminal unless they succeed.
DFS_VALUES = {
    "a": 0.6, "b": 0.5, "c": 0.1,
    "a/a": 0.7, "a/b": 0.3, "a/c": 0.2,
    "a/a/a": 0.2, "a/a/b": 0.1, "a/a/c": 0.3,
    "b/a": 0.9, "b/b": 0.7, "b/c": 0.2,
    "b/a/a": 0.3, "b/a/b": 0.6, "b/a/c": 0.8,
}  # fmt: skip


def dfs(values=DFS_VALUES, env=None, **kwargs):
    env = env or SnapshotThreeWayToyEnv(depth=4, goal=("b", "a", "c"))
    policy, evaluator = ScriptedPolicy(), TableEvaluator(values)
    kwargs = {"num_actions": 3, "max_depth": 3, "value_threshold": 0.5} | kwargs
    return DFS(**kwargs)(env, policy, evaluator, task_id=0), policy, evaluator


def test_dfs_hand_worked_search():
    # root -> a (.6 before b .5; c .1 pruned) -> a/a (a/b, a/c pruned) -> every child
    # of a/a below .5: dead end, backtrack to the root -> b -> b/a (.9 before b/b .7)
    # -> b/a/c succeeds: stop (b/b never visited).
    result, policy, evaluator = dfs()
    tree = result.tree
    assert policy.seen == ["", "a", "a/a", "b", "b/a"]
    assert [c[0].rsplit("/", 1)[0] if "/" in c[0] else "" for c in evaluator.calls] == policy.seen
    kept, pruned = kept_and_pruned(tree)
    assert kept == {"a", "b", "a/a", "b/a", "b/b", "b/a/b", "b/a/c"}
    assert pruned == {"c", "a/b", "a/c", "a/a/a", "a/a/b", "a/a/c", "b/c", "b/a/a"}
    # Branch ends: the dead end a/a and the success.
    assert [[s.command for s in t.steps] for t in result.trajectories] == [
        ["a", "a"],
        ["b", "a", "c"],
    ]
    assert [t.reward for t in result.trajectories] == [0.0, 1.0]
    assert [s.command for s in result.best.steps] == ["b", "a", "c"] and result.best.success
    assert result.stats.expansions == result.stats.policy_calls == 5


def test_dfs_visits_children_in_value_order():
    result, policy, _ = dfs(DFS_VALUES | {"b": 0.65})
    assert policy.seen == ["", "b", "b/a"]  # b now outranks a; b/a/c succeeds at once
    assert result.best.success


def test_dfs_stops_at_a_success_even_when_pruned():
    result, policy, _ = dfs(DFS_VALUES | {"b/a/c": 0.1})
    assert policy.seen == ["", "a", "a/a", "b", "b/a"]  # b/a/b (.6) is never expanded
    assert result.tree.nodes[-1].kept is False and result.best.success


def test_dfs_backtracks_at_the_depth_limit_and_spends_the_node_budget():
    # v_th = 0 prunes nothing; T = 2. Expansions: root, a (its children end at the depth
    # limit: visited, backtrack), b; the budget (3) is spent on arriving at c.
    result, policy, _ = dfs(value_threshold=0.0, max_depth=2, max_nodes=3)
    assert policy.seen == ["", "a", "b"]
    ends = [[s.command for s in t.steps] for t in result.trajectories]
    assert ends == [["c"], ["a", "a"], ["a", "b"], ["a", "c"], ["b", "a"], ["b", "b"], ["b", "c"]]
    assert result.stats.expansions == 3


def test_dfs_backtracks_after_a_terminal_failure():
    # Depth-2 env: every depth-2 state is terminal; goal b/b. a/a (.7) fails, then the
    # search backtracks to b and stops at the success b/b.
    env = SnapshotThreeWayToyEnv(depth=2, goal=("b", "b"))
    result, policy, _ = dfs(env=env, value_threshold=0.25)
    assert policy.seen == ["", "a", "b"]
    assert [s.command for s in result.best.steps] == ["b", "b"]
    # a/a and a/b (.3) are terminal failures; a/c (pruned) too: all recorded.
    assert [t.reward for t in result.trajectories] == [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]


def test_dfs_policy_call_budget():
    result, policy, _ = dfs(max_policy_calls=2)
    assert policy.seen == ["", "a"] and result.stats.policy_calls == 2


# -- Baselines --------------------------------------------------------------------


def test_best_of_n_picks_the_best_episode():
    env = SnapshotToyEnv()  # goal right, left
    policy = EpisodePolicy([["left", "left"], ["right", "left"], ["right", "right"]])
    result = BestOfN(n=3, max_depth=2)(env, policy, None, task_id=0)
    assert [[s.command for s in t.steps] for t in result.trajectories] == [
        ["left", "left"], ["right", "left"], ["right", "right"]
    ]  # fmt: skip
    assert [t.reward for t in result.trajectories] == [0.0, 1.0, 0.0]
    assert [s.command for s in result.best.steps] == ["right", "left"]
    assert result.stats.policy_calls == 6 and result.stats.env_steps == 6
    assert result.stats.episodes == 3 and result.stats.restores == 2  # back to the root twice
    assert len(result.tree.children(result.tree.root)) == 3  # one chain per episode


def test_best_of_n_budget_cuts_the_last_episode():
    policy = EpisodePolicy([["left", "left"], ["right", "left"], ["right", "right"]])
    result = BestOfN(n=3, max_depth=2, max_policy_calls=3)(ToyEnv(), policy, None, task_id=0)
    assert policy.num_calls == 3
    assert [len(t.steps) for t in result.trajectories] == [2, 1]


def test_majority_vote_and_tie_break():
    obs = "At start"
    votes = [
        toy_candidate(c, i, obs, lp)
        for i, (c, lp) in enumerate([("a", -1), ("b", -2), ("b", -5), ("a", -3), ("c", 0)])
    ]
    winner, shares = majority_vote(votes)
    # a and b have 2 votes each; a's summed log-prob (-4) beats b's (-7).
    assert winner.command == "a" and winner.logprob == -1
    assert shares == {"a": 0.4, "b": 0.4, "c": 0.2}


def test_self_consistency_follows_the_majority():
    policy = TablePolicy({
        "": [("left", -1.0), ("right", -2.0), ("right", -2.5)],
        "right": [("right", -1.0), ("left", -2.0), ("left", -2.0)],
    })  # fmt: skip
    result = SelfConsistency(n=3, max_depth=2)(SnapshotToyEnv(), policy, None, task_id=0)
    assert [s.command for s in result.best.steps] == ["right", "left"] and result.best.success
    assert result.trajectories == [result.best] and result.best.source == "self_consistency"
    root = result.tree.root
    children = {c.command: c for c in result.tree.children(root)}
    assert children["right"].kept and children["right"].critic_score == pytest.approx(2 / 3)
    assert children["left"].kept is False and not children["left"].expanded_env
    assert result.stats.policy_calls == 2 and result.stats.env_steps == 2


def test_self_consistency_budget():
    policy = TablePolicy({"": [("a", -1.0)], "a": [("a", -1.0)], "a/a": [("a", -1.0)]})
    result = SelfConsistency(n=2, max_depth=3, max_policy_calls=2)(
        ThreeWayToyEnv(), policy, None, task_id=0
    )
    assert policy.num_calls == 2 and len(result.best.steps) == 2 and result.best.reward == 0.0


def test_mcts_budget_stops_starting_simulations():
    # Each toy simulation costs 1 expansion + at most 1 rollout step; with a budget of 3
    # the second simulation starts at 2 calls and ends at 3; no third one starts.
    search = MCTS(num_simulations=8, num_actions=2, max_depth=2, c_exp=2.0, max_policy_calls=3)
    result = search(SnapshotToyEnv(), ScriptedPolicy(), ScriptedCritic(), task_id=0)
    assert result.stats.simulations == 2 and result.stats.policy_calls == 3


# -- Contract, validation, configs --------------------------------------------------


def test_class_attributes_for_the_loop():
    assert (MCTS.critic_kind, BFS.critic_kind, DFS.critic_kind) == ("rank", "state", "state")
    assert BestOfN.critic_kind is None and SelfConsistency.critic_kind is None
    assert MCTS.has_visits and not any(c.has_visits for c in (BFS, DFS, BestOfN, SelfConsistency))


@pytest.mark.parametrize(
    "cls, kwargs, message",
    [
        (BFS, {"breadth": 0}, "search.breadth must be >= 1, got 0"),
        (BFS, {"num_actions": 0}, "search.num_actions must be >= 1, got 0"),
        (BFS, {"max_policy_calls": 0}, "search.max_policy_calls"),
        (DFS, {"value_threshold": 1.5}, "search.value_threshold must be in [0, 1], got 1.5"),
        (DFS, {"max_nodes": 0}, "search.max_nodes must be >= 1, got 0"),
        (DFS, {"max_depth": 0}, "search.max_depth"),
        (BestOfN, {"n": 0}, "search.n must be >= 1, got 0"),
        (SelfConsistency, {"max_depth": 0}, "search.max_depth"),
        (MCTS, {"max_policy_calls": 0}, "search.max_policy_calls"),
    ],
)
def test_invalid_values_name_the_key(cls, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        cls(**kwargs)


@pytest.mark.parametrize(
    "name, cls, global_package",
    [
        ("tot_bfs", BFS, True),
        ("tot_dfs", DFS, True),
        ("best_of_n", BestOfN, False),
        ("self_consistency", SelfConsistency, False),
    ],
)
def test_search_yaml_instantiates(name, cls, global_package):
    raw = OmegaConf.load(CONF / "search" / f"{name}.yaml")
    node = raw.search if global_package else raw
    if global_package:
        assert list(raw.defaults) == [{"override /critic": "llm_value"}]
    cfg = OmegaConf.merge({"eval": {"max_steps": 7}, "dense_reward": True}, {"search": node})
    search = instantiate(cfg.search)
    assert isinstance(search, cls) and search.max_depth == 7 and search.dense_reward is True


@pytest.mark.parametrize(
    "overrides, critic",
    [
        (["search=tot_bfs"], "LLMValueEvaluator"),
        (["search=tot_dfs"], "LLMValueEvaluator"),
        (["search=tot_bfs", "critic=llm_vote"], "LLMVoteEvaluator"),
        (["search=mcts"], "LLMRankingCritic"),
    ],
)
def test_tot_configs_select_their_evaluator(make_cfg, overrides, critic):
    cfg = make_cfg(*overrides)
    assert cfg.critic._target_.endswith(critic)
    kind = instantiate(cfg.critic).func.kind
    assert kind == type(instantiate(cfg.search)).critic_kind
