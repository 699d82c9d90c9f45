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


RESULTS = ("click[Back to Search]", "click[r1]", "click[r2]", "click[r3]")


def results_page(task_id, *tried: tuple[str, float]) -> Tree:
    """A results page listing r1, r2, r3 (in that order) whose children executed the ``tried``
    commands with those backed-up returns, with no critic (alpha 1): each value gap gives a pair."""
    tree = Tree(task_id=task_id, alpha=1.0)
    page = History("results").extend("search[x]", "r1 r2 r3", RESULTS)
    tree.add(Node(id=0, parent=None, depth=0, history=page, visits=len(tried)))
    for i, (command, q) in enumerate(tried):
        tree.add(Node(id=0, parent=0, depth=1, history=page, action=f"THOUGHT {i} COMMAND: {command}", command=command, visits=1, q_mcts=q))
    return tree


def test_balance_order_keeps_as_many_pairs_choosing_a_later_listed_action_as_an_earlier_one():
    from types import SimpleNamespace

    from agentq.data.diagnostics import pair_sources
    from agentq.data.pairs import chose_later
    from agentq.loop import build_examples
    from agentq.records.tree import SearchResult

    trees = [
        results_page(1, ("click[r1]", 0.0), ("click[r2]", 1.0)),  # later
        results_page(2, ("click[r1]", 0.0), ("click[r3]", 1.0)),  # later
        results_page(3, ("click[r2]", 0.2), ("click[r3]", 0.9)),  # later
        results_page(4, ("click[r1]", 1.0), ("click[r2]", 0.0)),  # earlier
        results_page(5, ("search[a]", 1.0), ("search[b]", 0.0)),  # not listed (free text): kept
        results_page(6, ("click[r3]", 0.0), ("click[r3]", 1.0)),  # one listed action twice: kept
    ]
    results = [SearchResult(t, [], None) for t in trees]
    builder = StepPairBuilder(threshold=0.1, balance_order=True)
    pairs = [p for t in trees for p in builder(t)]
    by_tree = {t.task_id: t for t in trees}
    assert [chose_later(by_tree[p.task_id], p) for p in pairs] == [True, True, True, False, None, None]

    counted = pair_sources(results, pairs)
    assert (counted["chose_later"], counted["chose_earlier"]) == (3, 1)

    kept = builder.select(results, pairs)
    counted = pair_sources(results, kept)  # what the iteration's diagnostics record
    assert (counted["chose_later"], counted["chose_earlier"]) == (1, 1)
    later = [chose_later(by_tree[p.task_id], p) for p in kept]
    assert later.count(True) == later.count(False) == 1 and later.count(None) == 2
    assert [p.task_id for p in kept] == sorted(p.task_id for p in kept)  # in the order built
    # The same pairs whatever order the trees finished in, and the loop trains on them.
    assert {p.task_id for p in builder.select(results[::-1], pairs[::-1])} == {p.task_id for p in kept}
    loop = build_examples(SimpleNamespace(pair_builder=builder), results, None, 1)
    assert [(p.task_id, p.chosen) for p in loop] == [(p.task_id, p.chosen) for p in kept]
    assert StepPairBuilder(threshold=0.1).select(results, pairs) == pairs  # off by default


def test_observation_contains_keeps_only_the_pairs_made_at_matching_states():
    tree = results_page(1, ("click[r1]", 0.0), ("click[r2]", 1.0))
    product = History("item").extend("click[r2]", "Buy Now [SEP] blue [SEP] red", ("click[blue]", "click[red]"))
    tree.add(Node(id=0, parent=2, depth=2, history=product, visits=2))
    tree.add(Node(id=0, parent=3, depth=3, history=product, action="COMMAND: click[blue]", command="click[blue]", visits=1, q_mcts=1.0))
    tree.add(Node(id=0, parent=3, depth=3, history=product, action="COMMAND: click[red]", command="click[red]", visits=1, q_mcts=0.0))
    assert [p.node_id for p in StepPairBuilder(threshold=0.1)(tree)] == [0, 3]
    kept = StepPairBuilder(threshold=0.1, observation_contains="Buy Now")(tree)
    assert [(p.node_id, p.chosen) for p in kept] == [(3, "COMMAND: click[blue]")]
    assert StepPairBuilder(threshold=0.1, observation_contains="Checkout")(tree) == []
    with pytest.raises(ValueError, match="pairs.observation_contains"):
        StepPairBuilder(observation_contains="")
