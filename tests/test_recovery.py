"""Recovery evaluation (Agent-R, Table 3): replay a failed prefix, then let the policy act.

ToyEnv: two steps of left/right; only right-then-left succeeds. The scripted
policy goes left at the start and after "left", and left after "right" too.
"""

import pytest
import torch

from agentq import evaluate as ev
from agentq.agent.episode import run_episode
from agentq.records.trajectory import Step, Trajectory
from agentq.records.tree import SearchStats
from tests.toy import TablePolicy, ToyEnv

TABLE = {"": [("left", -0.1)], "left": [("left", -0.1)], "right": [("left", -0.1)]}


def failed(task_id, commands: list[str], success: bool = False) -> Trajectory:
    steps = [
        Step([{"role": "user", "content": "x"}], f"COMMAND: {c}", c, f"obs {i}", 0.0, -0.5, [i])
        for i, c in enumerate(commands)
    ]
    return Trajectory(task_id, steps, reward=float(success), success=success)


def run(prefixes, task_id, *, max_steps=4):
    env, policy = ToyEnv(depth=2), TablePolicy(TABLE)
    episode = ev.recovery(env, policy, prefixes, max_steps=max_steps, dense_reward=False)
    return episode(task_id, torch.Generator().manual_seed(0)), policy


def test_zero_shot_fails_but_a_right_prefix_recovers():
    assert not run_episode(
        ToyEnv(depth=2), TablePolicy(TABLE), 0, max_steps=4
    ).success  # left, left
    prefixes, skipped = ev.failed_prefixes([failed(0, ["right", "right"])], 0.5)
    assert [s.command for s in prefixes[0]] == ["right"] and skipped == []
    (trajectory, stats), policy = run(prefixes, 0)
    # replayed "right", then the policy at "right" says "left": right/left succeeds
    assert trajectory.success and trajectory.reward == 1.0 and trajectory.source == "recovery"
    assert [s.command for s in trajectory.steps] == ["right", "left"]
    assert (
        trajectory.steps[0].action == "COMMAND: right"
        and trajectory.steps[0].observation == "At right"
    )
    assert stats == SearchStats(policy_calls=1, prefix_steps=1) and policy.num_calls == 1


def test_a_left_prefix_cannot_recover():
    (trajectory, stats), _ = run({0: failed(0, ["left", "right"]).steps[:1]}, 0)
    assert not trajectory.success and [s.command for s in trajectory.steps] == ["left", "left"]
    assert stats.prefix_steps == 1


def test_history_after_the_replay_lists_the_prefix_actions():
    seen = []

    class Recording(TablePolicy):
        def propose(self, history, k, *, greedy=False, generator=None, exclude=()):
            seen.append((history.previous, history.observation, greedy))
            return super().propose(history, k, greedy=greedy, generator=generator)

    env = ToyEnv(depth=2)
    episode = ev.recovery(
        env, Recording(TABLE), {0: failed(0, ["right", "right"]).steps[:1]}, max_steps=4
    )
    episode(0, torch.Generator())
    assert seen == [(("COMMAND: right",), "At right", True)]


def test_max_steps_counts_the_prefix():
    (trajectory, stats), policy = run({0: failed(0, ["right", "right"]).steps[:1]}, 0, max_steps=1)
    assert not trajectory.success and len(trajectory.steps) == 1 and policy.num_calls == 0
    assert stats == SearchStats(policy_calls=0, prefix_steps=1)


def test_prefix_length_from_fraction():
    trajectories = [
        failed("t10", list("abcdefghij")),
        failed("t2", ["a", "b"]),
        failed("t1", ["a"]),
        failed("ok", ["a"], success=True),
        failed("t3", ["a", "b", "c"], success=True),
        failed("t3", ["x", "y", "z"]),  # the task's first failed trajectory
        failed("t3", ["p", "q", "r"]),
        failed("empty", []),
    ]

    def lengths(fraction):
        return {k: len(v) for k, v in ev.failed_prefixes(trajectories, fraction)[0].items()}

    assert lengths(0.3) == {"t10": 3, "t2": 1, "t1": 1, "t3": 1}  # ceil(.3 * 10) = 3, not 4
    assert lengths(0.5) == {"t10": 5, "t2": 1, "t1": 1, "t3": 2}
    assert lengths(1.0) == {"t10": 9, "t2": 1, "t1": 1, "t3": 2}  # at most T - 1 when T >= 2
    assert lengths(0.01) == {"t10": 1, "t2": 1, "t1": 1, "t3": 1}  # at least 1
    prefixes, skipped = ev.failed_prefixes(trajectories, 0.5)
    assert [s.command for s in prefixes["t3"]] == ["x", "y"]
    assert skipped == ["ok", "empty"]


@pytest.mark.parametrize("fraction", [0.0, 1.5])
def test_fraction_outside_range(fraction):
    with pytest.raises(ValueError, match="fraction"):
        ev.failed_prefixes([], fraction)


def test_aggregate_reports_prefix_steps():
    records = [
        {"trajectory": failed(0, ["a", "b"], success=True).to_dict(), "stats": {"prefix_steps": 1}},
        {"trajectory": failed(1, ["a"]).to_dict(), "stats": {"prefix_steps": 2}},
    ]
    metrics = ev.aggregate(records)
    assert metrics["avg_prefix_steps"] == 1.5 and metrics["success_rate"] == 0.5
