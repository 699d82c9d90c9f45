"""RFT successes and trajectory-DPO pairs from hand-made searches; the pairs configs."""

from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentq.data.successes import SuccessfulTrajectories
from agentq.data.trajectory_pairs import TrajectoryPairBuilder
from agentq.records.examples import TrajectoryPair
from agentq.records.history import History
from agentq.records.trajectory import Step, Trajectory
from agentq.records.tree import Node, SearchResult, Tree
from agentq.search.revision import DEFAULT_REVISION_THOUGHTS, RevisionBuilder

CONF = Path(__file__).resolve().parents[1] / "conf" / "pairs"


def trajectory(commands: str, reward: float, success: bool | None = None) -> Trajectory:
    """One step per character of ``commands``; action "A:<c>", logprob -1 per step."""
    steps = [
        Step(
            [{"role": "user", "content": f"at {commands[:i]}"}],
            f"A:{c}",
            c,
            f"at {commands[: i + 1]}",
            0.0,
            -1.0,
            [i],
        )
        for i, c in enumerate(commands)
    ]
    return Trajectory(
        5, steps, reward=reward, success=reward >= 1.0 if success is None else success, score=reward
    )


def search(*trajectories: Trajectory) -> SearchResult:
    tree = Tree(task_id=5, alpha=0.5)
    tree.add(Node(id=0, parent=None, depth=0, history=History("start")))
    return SearchResult(tree=tree, trajectories=list(trajectories), best=None, stats={})


def result() -> SearchResult:
    return search(
        trajectory("ab", 1.0),  # 0
        trajectory("ac", 0.0),  # 1
        trajectory("ab", 1.0),  # 2 the same commands as 0
        trajectory("b", 0.9, success=True),  # 3 a dense-reward success
        trajectory("bb", 0.3),  # 4
        trajectory("", 0.0),  # 5 no step (the search stopped at the root)
        trajectory("ca", 0.1),  # 6
    )


def commands(segments) -> str:
    return "".join(s.completion[2:] for s in segments)


def test_successes_are_deduplicated_and_filtered():
    examples = SuccessfulTrajectories().from_search(result(), None)
    assert [(commands(e.segments), e.info["trajectory"]) for e in examples] == [("ab", 0), ("b", 3)]
    first = examples[0]
    assert first.source == "success" and first.task_id == 5 and all(s.train for s in first.segments)
    assert [s.completion_ids for s in first.segments] == [[0], [1]] and first.segments[1].prompt[0][
        "content"
    ] == "at a"
    assert [
        commands(e.segments)
        for e in SuccessfulTrajectories(min_reward=0.95).from_search(result(), None)
    ] == ["ab"]
    assert SuccessfulTrajectories.kind == "sft"


def test_a_capped_task_keeps_its_best_successes_earlier_simulation_first():
    found = search(trajectory("a", 0.9, True), trajectory("b", 1.0), trajectory("c", 0.0), trajectory("d", 1.0))
    kept = [(commands(e.segments), e.info["trajectory"]) for e in SuccessfulTrajectories(max_per_task=2).from_search(found)]
    assert kept == [("b", 1), ("d", 3)]
    assert len(SuccessfulTrajectories(max_per_task=5).from_search(found)) == 3  # the cap, not a quota


def test_trajectory_pairs_order_gap_and_cap():
    pairs = TrajectoryPairBuilder(max_pairs_per_task=None).from_search(result(), None)
    # chosen best first: ab (1.0), b (.9); rejected worst first: ac (0), ca (.1), bb (.3);
    # ranks (i, j) by i + j then i
    got = [(commands(p.chosen), commands(p.rejected)) for p in pairs]
    assert got == [("ab", "ac"), ("ab", "ca"), ("b", "ac"), ("ab", "bb"), ("b", "ca"), ("b", "bb")]
    p = pairs[0]
    assert isinstance(p, TrajectoryPair) and (p.reward_chosen, p.reward_rejected) == (1.0, 0.0)
    assert [s.logprob for s in p.chosen] == [-1.0, -1.0] and p.task_id == 5
    capped = TrajectoryPairBuilder(max_pairs_per_task=2).from_search(result(), None)
    assert [(commands(p.chosen), commands(p.rejected)) for p in capped] == [
        ("ab", "ac"),
        ("ab", "ca"),
    ]
    gapped = TrajectoryPairBuilder(min_gap=0.8, max_pairs_per_task=None).from_search(result(), None)
    # .9 - .1 = .8 passes (up to rounding); .9 - .3 and 1 - .3 do not
    assert [(commands(p.chosen), commands(p.rejected)) for p in gapped] == [
        ("ab", "ac"),
        ("ab", "ca"),
        ("b", "ac"),
        ("b", "ca"),
    ]
    assert TrajectoryPairBuilder.kind == "preference"


def test_no_pair_without_both_outcomes():
    assert (
        TrajectoryPairBuilder().from_search(
            search(trajectory("ab", 1.0), trajectory("b", 1.0)), None
        )
        == []
    )
    # a "success" must also score higher than the failure it is paired with
    assert (
        TrajectoryPairBuilder().from_search(
            search(trajectory("a", 0.2, True), trajectory("b", 0.5, False)), None
        )
        == []
    )


@pytest.mark.parametrize(
    ("cls", "kwargs", "key"),
    [
        (SuccessfulTrajectories, {"min_reward": 1.5}, "pairs.min_reward"),
        (SuccessfulTrajectories, {"max_per_task": 0}, "pairs.max_per_task"),
        (TrajectoryPairBuilder, {"min_gap": -0.1}, "pairs.min_gap"),
        (TrajectoryPairBuilder, {"max_pairs_per_task": 0}, "pairs.max_pairs_per_task"),
    ],
)
def test_bad_values_name_their_key(cls, kwargs, key):
    with pytest.raises(ValueError, match=key):
        cls(**kwargs)


def test_pairs_configs_instantiate():
    assert instantiate(OmegaConf.load(CONF / "successes.yaml")) == SuccessfulTrajectories()
    assert instantiate(OmegaConf.load(CONF / "trajectory.yaml")) == TrajectoryPairBuilder()
    revision = instantiate(OmegaConf.load(CONF / "revision.yaml"))
    assert isinstance(revision, RevisionBuilder) and revision.kind == "sft"
    assert revision.revision_thoughts == DEFAULT_REVISION_THOUGHTS
    assert (
        revision.judge.func.__name__ == "ActorStepJudge"
        and revision.judge.keywords["max_previous"] == 10
    )
    with pytest.raises(Exception, match="pairs.beta"):  # hydra wraps the ValueError
        instantiate(OmegaConf.merge(OmegaConf.load(CONF / "revision.yaml"), {"beta": 1.0}))
