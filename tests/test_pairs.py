"""Step pairs from a hand-made tree (Agent Q, docs/method.md §4)."""

import pytest

from agentq.data.pairs import StepPairBuilder
from agentq.records.history import History
from agentq.records.tree import Node, Tree


def hand_tree() -> Tree:
    # root has children a (Q_mcts .8, critic 1), b (Q_mcts .2, critic .5), c (unvisited, critic 0);
    # with alpha = .5: Q(a) = .9, Q(b) = .35, Q(c) = 0.  a has one child only: no pair there.
    tree = Tree(task_id=7, alpha=0.5)
    h = History("start")
    tree.add(Node(id=0, parent=None, depth=0, history=h, prompt=[{"role": "user", "content": "start"}], visits=3))
    tree.add(Node(id=0, parent=0, depth=1, history=h, action="A", command="a", logprob=-1.0, action_ids=(1,), critic_score=1.0, visits=2, q_mcts=0.8, prompt=[{"role": "user", "content": "after a"}]))
    tree.add(Node(id=0, parent=0, depth=1, history=h, action="B", command="b", logprob=-2.0, action_ids=(2,), critic_score=0.5, visits=1, q_mcts=0.2))
    tree.add(Node(id=0, parent=0, depth=1, history=h, action="C", command="c", logprob=-3.0, action_ids=(3,), critic_score=0.0))
    tree.add(Node(id=0, parent=1, depth=2, history=h, action="D", command="d", critic_score=1.0, visits=1, q_mcts=1.0))
    return tree


def test_pairs_with_threshold():
    pairs = StepPairBuilder(threshold=0.3)(hand_tree())
    got = {(p.chosen, p.rejected) for p in pairs}
    # gaps: a-b .55, a-c .9, b-c .35 -> all three pass theta = .3
    assert got == {("A", "B"), ("A", "C"), ("B", "C")}
    ab = next(p for p in pairs if (p.chosen, p.rejected) == ("A", "B"))
    assert ab.q_chosen == pytest.approx(0.9) and ab.q_rejected == pytest.approx(0.35)
    assert ab.chosen_logprob == -1.0 and ab.rejected_ids == [2] and ab.prompt[0]["content"] == "start"
    assert ab.task_id == 7 and ab.node_id == 0 and ab.visits_chosen == 2


def test_threshold_filters_and_min_visits():
    assert {(p.chosen, p.rejected) for p in StepPairBuilder(threshold=0.5)(hand_tree())} == {("A", "B"), ("A", "C")}
    assert {(p.chosen, p.rejected) for p in StepPairBuilder(threshold=0.1, min_visits=1)(hand_tree())} == {("A", "B")}
    assert StepPairBuilder(threshold=1.0)(hand_tree()) == []


@pytest.mark.parametrize("theta", [-0.1, 1.5])
def test_threshold_outside_unit_interval(theta):
    with pytest.raises(ValueError, match="pairs.threshold"):
        StepPairBuilder(threshold=theta)
