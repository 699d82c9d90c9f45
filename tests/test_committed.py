"""The committed mode of inference-time search: the agent searches from every state it
reaches, executes one action per real step, and never sees the env's reward."""

import pytest

from agentq.records.history import History
from agentq.records.tree import Node, SearchResult, SearchStats, Tree
from agentq.search.committed import chosen_edge, committed_episode
from agentq.search.mcts import MCTS
from tests.toy import ScriptedPolicy, SnapshotThreeWayToyEnv, ThreeWayToyEnv, path_key


class FlatCritic:
    def score(self, history, candidates):
        return [0.5] * len(candidates)


class PathJudge:
    """Values a state by its path: anything through ``c`` is 1, the rest 0; the env's
    goal is b/a, so a judge this wrong must lead a blind agent astray."""

    kind = "state"

    def __init__(self) -> None:
        self.calls = 0

    def evaluate(self, task_history, states):
        assert task_history.observation == "At start"  # judged against the task
        self.calls += len(states)
        return [1.0 if path_key(s.observation).startswith("c") else 0.0 for s in states]


def _episode(env, **search):
    mcts = MCTS(**({"num_simulations": 6, "num_actions": 3, "max_depth": 2, "alpha": 1.0} | search))
    return committed_episode(
        env, ScriptedPolicy(), FlatCritic(), PathJudge(), mcts, task_id=2, max_steps=3
    )


@pytest.mark.parametrize("env_cls", [ThreeWayToyEnv, SnapshotThreeWayToyEnv])
def test_committed_acts_on_the_judge_not_the_env_reward(env_cls):
    env = env_cls(depth=3, goal=("b", "a"))
    mcts = MCTS(num_simulations=6, num_actions=3, max_depth=2, alpha=1.0)
    # The verifier mode sees the env's reward: the rollout from b (the policy's first
    # proposal there is a) is b/a, a success, so its best rollout succeeds.
    verifier = mcts(env, ScriptedPolicy(), FlatCritic(), task_id=2)
    assert verifier.best.success and [s.command for s in verifier.best.steps] == ["b", "a"]

    trajectory, stats = _episode(env)
    # Blind to the reward, the agent follows the judge into c, and fails.
    assert [s.command for s in trajectory.steps] == ["c", "a", "a"]
    assert not trajectory.success and trajectory.reward == 0.0 and trajectory.source == "committed"
    assert stats.searches == 3 and stats.judge_calls > 0
    # The trajectory is what the agent did: each step's observation is the env's answer
    # to the committed commands, replayed from a reset.
    env.reset(options={"task_id": 2})
    for step in trajectory.steps:
        observation, reward, *_ = env.step(step.command)
        assert (step.observation, step.reward) == (observation, reward)


def test_committed_succeeds_when_the_judge_is_right():
    class GoalJudge(PathJudge):
        def evaluate(self, task_history, states):
            return [float(path_key(s.observation) in ("b", "b/a")) for s in states]

    env = ThreeWayToyEnv(depth=3, goal=("b", "a"))
    mcts = MCTS(num_simulations=6, num_actions=3, max_depth=2, alpha=1.0)
    trajectory, _ = committed_episode(
        env, ScriptedPolicy(), FlatCritic(), GoalJudge(), mcts, task_id=2, max_steps=3
    )
    assert [s.command for s in trajectory.steps] == ["b", "a"]
    assert trajectory.success and trajectory.reward == 1.0


def test_snapshot_and_replay_envs_commit_the_same_actions():
    replayed, _ = _episode(ThreeWayToyEnv(depth=3))
    restored, _ = _episode(SnapshotThreeWayToyEnv(depth=3))
    assert replayed.to_dict() == restored.to_dict()


def test_the_lookahead_never_passes_the_episode_budget():
    env = ThreeWayToyEnv(depth=10)
    trajectory, stats = _episode(env, max_depth=5)
    assert len(trajectory.steps) == 3  # max_steps
    # Search steps: each step's search looks at most max_steps - t ahead (3, 2, 1) from its
    # root; the real steps and the replays of the committed prefix come on top.
    assert stats.env_steps > 3


def test_chosen_edge_is_the_most_visited_then_the_higher_q_then_the_first():
    tree = Tree(task_id=0, alpha=0.5)
    root = tree.add(Node(id=0, parent=None, depth=0, history=History("At start")))
    for visits, q_mcts, critic in ((2, 0.0, 0.0), (3, 0.0, 0.0), (3, 0.0, 1.0), (3, 0.0, 1.0)):
        child = tree.add(Node(id=-1, parent=root.id, depth=1, history=root.history, critic_score=critic))
        child.visits, child.q_mcts = visits, q_mcts
    assert chosen_edge(SearchResult(tree=tree, trajectories=[], best=None)).id == 3
    empty = Tree(task_id=0, alpha=0.5)
    empty.add(Node(id=0, parent=None, depth=0, history=History("At start")))
    with pytest.raises(RuntimeError, match="no action"):
        chosen_edge(SearchResult(tree=empty, trajectories=[], best=None))


@pytest.mark.parametrize(
    "overrides, modes",
    [
        ((), ["committed", "verifier"]),  # MCTS: both, by default
        (("search=tot_bfs",), ["verifier"]),  # ToT cannot search from every state
        (("search=best_of_n", "eval.search_modes=[verifier]"), ["verifier"]),
        (("eval.search_modes=[committed]",), ["committed"]),
    ],
)
def test_search_modes_default_to_what_the_search_supports(make_cfg, overrides, modes):
    from hydra.utils import instantiate

    from agentq.components import search_modes

    cfg = make_cfg("+experiment=smoke", *overrides)
    search = instantiate(cfg.search)
    assert search_modes(cfg, search) == modes


@pytest.mark.parametrize(
    "overrides, message",
    [
        (("search=tot_bfs", "eval.search_modes=[committed]"), "BFS cannot do"),
        (("eval.search_modes=[verifer]",), "unknown modes"),
        (("eval.committed.num_simulations=0",), "eval.committed.num_simulations"),
        (("eval.committed.max_depth=abc",), "eval.committed.max_depth"),
        (("eval.committed.judge._target_=agentq.nowhere.Judge",), "nowhere"),
    ],
)
def test_bad_search_modes_are_refused_before_any_model_loads(make_cfg, overrides, message):
    from agentq.components import build

    with pytest.raises(Exception, match=message):
        build(make_cfg("+experiment=smoke", *overrides))


def test_search_stats_sum_and_read_files_written_before():
    a = SearchStats(policy_calls=2, critic_calls=1, env_steps=3)
    b = SearchStats(policy_calls=1, judge_calls=4, restores=2)
    total = SearchStats.from_dict(a.to_dict())
    total.add(b)
    assert total == SearchStats(policy_calls=3, critic_calls=1, judge_calls=4, env_steps=3, restores=2)
    assert b == SearchStats(policy_calls=1, judge_calls=4, restores=2)  # add leaves its argument alone
    assert total.model_calls == 8
    # An old file's counters: the missing ones are 0; an unknown one is an error, not a silent 0.
    assert SearchStats.from_dict({"policy_calls": 40, "searches": 3}) == SearchStats(policy_calls=40, searches=3)
    assert SearchStats.from_dict(total.to_dict()) == total
    with pytest.raises(ValueError, match="unknown counters \\['policy_call'\\]"):
        SearchStats.from_dict({"policy_call": 1})
