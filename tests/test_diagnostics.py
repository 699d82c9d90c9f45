"""The per-iteration diagnostics of issue 17 on hand-built trees: the critic's agreement
with the tree's backed-up values, where the pairs came from, whether a policy took them, and cost per success."""

import pytest

from agentq.data.diagnostics import (
    critic_agreement,
    kendall_tau_b,
    moves_at_pairs,
    pair_sources,
    sft_sources,
)
from agentq.data.pairs import StepPairBuilder
from agentq.evaluate import aggregate
from agentq.records.examples import SFTExample, StepPair
from agentq.records.history import History
from agentq.records.tree import Node, SearchResult, SearchStats, Tree


def test_kendall_tau_b_against_hand_counts():
    assert kendall_tau_b([1, 2, 3], [10, 20, 30]) == 1.0
    assert kendall_tau_b([1, 2, 3], [3, 2, 1]) == -1.0
    assert kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)  # 5 concordant, 1 discordant
    # One tie in x: C=2, D=0, ties_x=1 -> 2 / sqrt(3 * 2).
    assert kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / 6**0.5)
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None


def node(parent, action="", critic=0.0, visits=0, q=0.0):
    return Node(id=0, parent=parent, depth=0 if parent is None else 1, history=History("s"), action=action,
                command=action.lower(), critic_score=critic, visits=visits, q_mcts=q, prompt=[{"role": "user", "content": "s"}])


def tree() -> Tree:
    """Root: A (critic 1.0, Q 0.2), B (critic 0.5, Q 0.9), C (critic 0.0, Q 0.2), D never visited.
    Under A: E (critic 1.0, Q 1.0), F (critic 0.0, Q 0.0), both visited twice."""
    t = Tree(task_id=7, alpha=0.5)
    t.add(node(None, visits=9))
    t.add(node(0, "A", 1.0, 3, 0.2))
    t.add(node(0, "B", 0.5, 3, 0.9))
    t.add(node(0, "C", 0.0, 2, 0.2))
    t.add(node(0, "D", 0.25, 0, 0.0))
    t.add(node(1, "E", 1.0, 2, 1.0))
    t.add(node(1, "F", 0.0, 2, 0.0))
    return t


def test_critic_agreement_over_siblings_visited_twice():
    agreement = critic_agreement([tree()], min_visits=2)
    # Root (A, B, C): critic (1, .5, 0) vs Q (.2, .9, .2): C=1 (B>C), D=1 (A>B), tie in Q (A, C) -> 0.
    # Under A (E, F): perfect, tau 1. Top-1: root picks A (Q .2, best .9): no; E: yes.
    unrecorded = {"first_return_tau": None, "first_return_nodes": 0}  # no first returns in this tree
    assert agreement == {"nodes": 2, "kendall_tau": pytest.approx(0.5), "tau_nodes": 2, "top1": 0.5} | unrecorded
    assert critic_agreement([tree()], min_visits=3) == {"nodes": 1, "kendall_tau": pytest.approx(-1.0), "tau_nodes": 1, "top1": 0.0} | unrecorded
    assert critic_agreement([], min_visits=2)["kendall_tau"] is None
    no_critic = tree()
    for n in no_critic.nodes:
        n.critic_score = 0.0  # UCT: no critic scores, so no ranking to compare
    assert critic_agreement([no_critic], min_visits=2) == {"nodes": 0, "kendall_tau": None, "tau_nodes": 0, "top1": None} | unrecorded


def test_critic_agreement_with_first_returns_at_well_visited_nodes():
    t = tree()
    for key, first in {1: 0.0, 2: 1.0, 3: 0.5, 5: 1.0, 6: 0.0}.items():  # A, B, C; E, F (D never visited)
        t.nodes[key].first_return = first
    # Root (9 visits): critic (1, .5, 0) vs first returns (0, 1, .5): A>B and A>C discordant,
    # B>C concordant: tau -1/3. Node A has 3 visits, under the 6 required: not compared.
    agreement = critic_agreement([t])
    assert agreement["first_return_tau"] == pytest.approx(-1 / 3) and agreement["first_return_nodes"] == 1
    assert agreement["kendall_tau"] == pytest.approx(0.5)  # the backed-up metric is unchanged
    # With every node admitted, A's children (critic 1, 0 vs first 1, 0) add tau 1: mean 1/3.
    loose = critic_agreement([t], first_return_min_visits=1)
    assert loose["first_return_tau"] == pytest.approx(1 / 3) and loose["first_return_nodes"] == 2


def test_pairs_split_into_outcome_backed_and_critic_only():
    t = tree()
    pairs = StepPairBuilder(threshold=0.1)(t)
    sources = pair_sources([SearchResult(t, [], None)], pairs)
    # Every pair a counted test can check by hand: equal Q_mcts -> the critic alone separated them.
    expected_critic_only = sum(
        1 for p in pairs
        if next(c for c in t.children(t.nodes[p.node_id]) if c.action == p.chosen).q_mcts
        == next(c for c in t.children(t.nodes[p.node_id]) if c.action == p.rejected).q_mcts
    )  # fmt: skip
    untried = sum(
        1 for p in pairs
        if min(c.visits for c in t.children(t.nodes[p.node_id]) if c.action in (p.chosen, p.rejected)) == 0
    )  # fmt: skip
    expected = {"outcome": len(pairs) - expected_critic_only, "critic_only": expected_critic_only, "unmatched": 0}
    unlisted = {"chose_later": 0, "chose_earlier": 0}  # the hand tree lists no valid actions
    assert sources == expected | {"untried": untried, "against_outcome": 0} | unlisted  # every outcome-backed pair follows Q_mcts
    assert untried >= 1  # A vs D and B vs D: D was never visited, yet its Q_mcts 0 makes them outcome-backed
    assert sources["critic_only"] >= 1 and sources["outcome"] >= 1  # A vs C (both Q .2), A vs B
    assert pair_sources([], pairs)["unmatched"] == len(pairs)


def test_moves_at_pairs_reads_what_an_episode_did_at_each_pair_state():
    t = tree()
    pairs = StepPairBuilder(threshold=0.1)(t)
    under_a = next(p for p in pairs if p.node_id == 1)  # its state is reached by the command "a"
    assert (under_a.chosen, under_a.rejected) == ("E", "F")
    searched = [SearchResult(t, [], None)]

    def moves(*taken, goal=7, pair=under_a):
        return moves_at_pairs(searched, [pair], {goal: list(taken)})

    assert moves("a", "e") == {"pairs": 1, "state reached": 1, "took the chosen": 1, "took the rejected": 0, "took another": 0}
    assert moves("a", "f")["took the rejected"] == moves("a", "x")["took another"] == 1
    assert moves("b", "e")["state reached"] == moves("a")["state reached"] == 0  # left its path; ended at the state
    assert moves("a", "e", goal=8)["pairs"] == 0  # no episode of the pair's goal
    at_root = next(p for p in pairs if p.node_id == 0)  # the empty path: every episode reaches it
    assert moves(at_root.chosen.lower(), pair=at_root)["took the chosen"] == 1
    t.nodes[6].command = "e"  # F executed E's command: the pair cannot be read off commands
    assert moves("a", "e")["pairs"] == 0


def test_cost_per_success_divides_all_tasks_spending_by_the_solved_ones():
    def record(success, tokens, steps):
        trajectory = {"success": success, "score": float(success), "steps": [{"grounding": None}] * steps}
        return {"trajectory": trajectory, "stats": SearchStats(policy_calls=steps, policy_tokens=tokens, critic_calls=1).to_dict()}

    metrics = aggregate([record(True, 100, 3), record(False, 500, 15), record(True, 60, 2)])
    assert metrics["policy_tokens_per_success"] == 330.0
    assert metrics["steps_per_success"] == 10.0
    assert metrics["model_calls_per_success"] == (20 + 3) / 2
    assert "policy_tokens_per_success" not in aggregate([record(False, 10, 1)])  # no success: no cost to report


def test_milestones_are_reported_only_for_an_env_that_records_them():
    def record(milestone):
        return {"trajectory": {"success": False, "score": 0.0, "steps": [], "milestone": milestone}, "stats": {}}

    metrics = aggregate([record(0), record(2), record(3), record(2)])
    assert metrics["avg_milestone"] == 7 / 4
    assert (metrics["reached_milestone_1"], metrics["reached_milestone_2"], metrics["reached_milestone_3"]) == (0.75, 0.75, 0.25)
    assert "reached_milestone_4" not in metrics
    assert not any("milestone" in k for k in aggregate([record(None)]))


def test_outcome_only_pairs_are_the_outcome_backed_ones():
    t = tree()
    every = StepPairBuilder(threshold=0.1)(t)
    backed = StepPairBuilder(threshold=0.1, outcome_only=True)(t)
    sources = pair_sources([SearchResult(t, [], None)], every)
    assert len(backed) == sources["outcome"] < len(every)
    assert pair_sources([SearchResult(t, [], None)], backed)["critic_only"] == 0


def test_a_pair_eq10_orders_against_its_returns_is_counted_and_can_be_dropped():
    t = Tree(task_id=3, alpha=0.5)
    t.add(node(None, visits=9))
    t.add(node(0, "X", 1.0, 3, 0.6))  # Eq. 10: 0.8
    t.add(node(0, "Y", 0.0, 3, 0.9))  # 0.45
    t.add(node(0, "W", 0.0, 3, 0.5999999999999999))  # 0.3; the same returns as X, summed in another order
    pairs = StepPairBuilder(threshold=0.1)(t)
    assert [(p.chosen, p.rejected) for p in pairs] == [("X", "Y"), ("X", "W"), ("Y", "W")]
    # X over Y: the critic outweighed a higher return. X over W: equal returns, the critic's call.
    sources = pair_sources([SearchResult(t, [], None)], pairs)
    assert sources == {"outcome": 2, "critic_only": 1, "unmatched": 0, "untried": 0, "against_outcome": 1,
                       "chose_later": 0, "chose_earlier": 0}  # fmt: skip
    backed = StepPairBuilder(threshold=0.1, outcome_only=True)(t)
    assert [(p.chosen, p.rejected) for p in backed] == [("X", "Y"), ("Y", "W")]
    agreeing = StepPairBuilder(threshold=0.1, agree_with_outcome=True)(t)
    assert [(p.chosen, p.rejected) for p in agreeing] == [("Y", "W")]


def test_sft_sources_split_revisions_by_where_they_were_spliced():
    def revision(point):
        return SFTExample(0, [], "revision", {"revision_point": point})

    good = [SFTExample(1, [], "good", {"success": False}), SFTExample(2, [], "good", {"success": True})]
    examples = [revision("judged"), revision("fallback"), revision("judged"), *good]
    examples.append(StepPair(0, 0, [], "a", "b", [1], [2], -1.0, -2.0, 1.0, 0.0, 2, 1))  # not SFT: ignored
    assert sft_sources(examples) == {"revision_judged": 2, "revision_fallback": 1, "good": 2, "good_success": 1}
    assert sft_sources([]) == {}
