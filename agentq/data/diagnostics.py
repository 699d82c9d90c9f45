"""What an iteration's search trees say about the critic and about the pairs trained on.

Agent Q blends the critic's score into every value (Eq. 10) and pairs siblings
by that value (Eq. 11), so two questions decide whether its data can help:

- **Does the critic agree with the search?** At every node with at least two
  children visited ``min_visits`` times or more, compare the critic's scores
  Q̂(h, a) of those siblings with their backed-up values Q_mcts(h, a): Kendall's
  tau-b over the siblings, and top-1 (the critic's first choice is among the
  children with the highest Q_mcts). No paper reports this; a tau near 0 means
  Eq. 10's critic term is noise added to the tree's own estimate. That reading is
  biased: UCB selects on the blend, so which siblings reach two visits, and their
  Q_mcts, depend on the critic and on their early returns together. In a one-node
  model with K = 3 (experiments/webshop_clone_iter/critic_selection_bias.py) a
  critic dealt at random reads tau -0.89 at 5 visits of the node and -0.25 at 10,
  and an informative one -0.75 at 5. The same tau against each sibling's *first*
  return (the value its first visit backed up, drawn before any selection on its
  own returns), over the siblings visited at least once, reads -0.03 at 6 visits
  and -0.01 at 10 for the random critic (-0.20 at 5, where whether a second sibling
  is tried at all depends on the first one's return), and +0.39 and +0.47 for the
  informative one. It is reported beside, at nodes with 6 visits or more
  (``first_return_tau``).
- **Where do the pairs come from?** A pair is *outcome-backed* when its two
  actions' backed-up values differ (their rollouts reached different results),
  *critic-only* when those are equal and only the critic's scores separate the
  two (e.g. siblings never rolled out, or both failed alike). An action never
  visited has Q_mcts = 0 without any rollout, so a pair of a tried action and an
  *untried* sibling counts as outcome-backed although only one side has an
  outcome: the pairs with an untried action are counted apart as well. Eq. 10 orders
  a pair by the blend, so an outcome-backed pair can choose the action whose returns
  were lower when the critic scored it higher: those are counted apart too.
- **Did the policy learn its pairs?** On the goals searched, the trained policy's
  episodes: at each pair's state they reach, the chosen action's command or the
  rejected one's (``moves_at_pairs``). It tells an update that did not fit its own
  pairs from one that fitted them and did not carry to other goals.
- **What the SFT data is made of** (RFT, Agent-R): examples by source, and where
  each Agent-R revision was spliced: at a step the actor judged Bad, or at the
  divergence point because it judged none Bad (the fallback).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from statistics import fmean
from typing import Any

from agentq.data.pairs import chose_later
from agentq.records.examples import SFTExample, StepPair
from agentq.records.tree import SearchResult, Tree


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two rankings with ties; None when either is all ties."""
    concordant = discordant = ties_x = ties_y = 0
    for i, j in combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif (dx > 0) == (dy > 0):
            concordant += 1
        else:
            discordant += 1
    denominator = ((concordant + discordant + ties_x) * (concordant + discordant + ties_y)) ** 0.5
    return None if denominator == 0 else (concordant - discordant) / denominator


# Below 6 visits of a node, whether a second sibling is tried at all depends on the first
# one's return, and the first-return tau of a random critic reads negative (-0.20 at 5).
FIRST_RETURN_MIN_VISITS = 6


def critic_agreement(
    trees: Iterable[Tree], min_visits: int = 2, first_return_min_visits: int = FIRST_RETURN_MIN_VISITS
) -> dict[str, Any]:
    """Critic vs backed-up Q over the siblings visited ``min_visits`` times or more.

    Returns ``nodes`` (nodes compared), ``kendall_tau`` (mean over the nodes where
    it is defined, ``tau_nodes`` of them) and ``top1`` (share of nodes), None
    where no node qualifies; and ``first_return_tau`` (``first_return_nodes``):
    the mean tau of the critic against the first returns of the siblings visited
    at least once, at nodes visited ``first_return_min_visits`` times or more (see
    the module docstring). A node whose siblings all have one critic score is not
    compared: the critic made no choice there (UCT has no critic at all)."""
    taus, top1, first_taus = [], [], []
    for tree in trees:
        first_taus += [tau for tau, _ in first_return_taus(tree, first_return_min_visits)]
        for node in tree.nodes:
            siblings = [c for c in tree.children(node) if c.visits >= min_visits]
            critic, backed = [c.critic_score for c in siblings], [c.backed_up for c in siblings]
            if len(set(critic)) < 2:
                continue
            tau = kendall_tau_b(critic, backed)
            if tau is not None:
                taus.append(tau)
            best = max(backed)
            top1.append(backed[critic.index(max(critic))] == best)
    return {
        "nodes": len(top1),
        "kendall_tau": fmean(taus) if taus else None,
        "tau_nodes": len(taus),
        "top1": fmean(top1) if top1 else None,
        "first_return_tau": fmean(first_taus) if first_taus else None,
        "first_return_nodes": len(first_taus),
    }


def first_return_taus(tree: Tree, min_node_visits: int = FIRST_RETURN_MIN_VISITS) -> list[tuple[float, int]]:
    """(tau, siblings compared) at each node visited ``min_node_visits`` times or more whose
    tried children the critic told apart: its scores against their first returns."""
    found = []
    for node in tree.nodes:
        tried = [c for c in tree.children(node) if c.first_return is not None]
        if node.visits >= min_node_visits and len({c.critic_score for c in tried}) >= 2:
            tau = kendall_tau_b([c.critic_score for c in tried], [c.first_return for c in tried])
            if tau is not None:
                found.append((tau, len(tried)))
    return found


PAIR_SOURCES = ("outcome", "critic_only", "unmatched", "untried", "against_outcome", "chose_later", "chose_earlier")


def pair_sources(results: Iterable[SearchResult], pairs: Iterable[Any]) -> dict[str, int]:
    """How many step pairs are outcome-backed and how many critic-only; how many of either
    have an untried (never visited) action ("untried"), and how many outcome-backed ones
    choose the action with the lower backed-up value ("against_outcome": Eq. 10's critic
    term outweighed the returns); how many choose an action listed after / before the
    rejected one among the state's valid actions ("chose_later" / "chose_earlier": a lower /
    higher WebShop result, :func:`agentq.data.pairs.chose_later`); other examples ignored."""
    backed: dict[tuple[str, int, str], tuple[float, int]] = {}
    trees = {str(r.tree.task_id): r.tree for r in results}
    for tree in trees.values():
        for node in tree.nodes:
            for child in tree.children(node):
                backed[(str(tree.task_id), node.id, child.action)] = (child.backed_up, child.visits)
    counts = dict.fromkeys(PAIR_SOURCES, 0)
    for pair in pairs:
        if not isinstance(pair, StepPair):
            continue
        key = str(pair.task_id), pair.node_id
        chosen, rejected = backed.get((*key, pair.chosen)), backed.get((*key, pair.rejected))
        if chosen is None or rejected is None:
            counts["unmatched"] += 1  # a pair from another tree layout (e.g. a replayed adapter's)
        else:
            counts["outcome" if chosen[0] != rejected[0] else "critic_only"] += 1
            counts["untried"] += chosen[1] == 0 or rejected[1] == 0
            counts["against_outcome"] += chosen[0] < rejected[0]
            later = chose_later(trees[key[0]], pair)
            counts["chose_later"] += later is True
            counts["chose_earlier"] += later is False
    return counts


PAIR_MOVES = ("pairs", "state reached", "took the chosen", "took the rejected", "took another")


def moves_at_pairs(
    results: Iterable[SearchResult], pairs: Iterable[Any], episodes: Mapping[Any, Sequence[str]]
) -> dict[str, int]:
    """Whether a policy learnt its pairs, read off its episodes (task id -> the commands it
    executed): for each step pair, did the episode reach the pair's state (the commands of the
    tree's path from the root, in order) and there execute the chosen action's command, the
    rejected one's, or another. A fit check on the goals searched: a pair says nothing about an
    episode of another goal, nor about one that left its path earlier. Pairs whose actions
    executed one command, or whose goal has no episode, are not counted."""
    trees = {str(r.tree.task_id): r.tree for r in results}
    counts = dict.fromkeys(PAIR_MOVES, 0)
    for pair in (p for p in pairs if isinstance(p, StepPair)):
        tree, taken = trees.get(str(pair.task_id)), episodes.get(pair.task_id)
        if tree is None or taken is None:
            continue
        state = tree.nodes[pair.node_id]
        command = {child.action: child.command for child in tree.children(state)}
        moves = {command[pair.chosen]: "took the chosen", command[pair.rejected]: "took the rejected"}
        if len(moves) < 2:
            continue
        counts["pairs"] += 1
        path = [node.command for node in tree.path(state)[1:]]
        if len(taken) <= len(path) or list(taken[: len(path)]) != path:
            continue
        counts["state reached"] += 1
        counts[moves.get(taken[len(path)], "took another")] += 1
    return counts


# What sft_sources counts: SFTExample.source, revisions split by splice point, and the good
# paths that reached the goal (with a dense reward a good path may only score alpha).
SFT_SOURCES = ("revision_judged", "revision_fallback", "good", "good_success", "success")


def sft_sources(examples: Iterable[Any]) -> dict[str, int]:
    """SFT examples by source ("success", "good", ...); revisions split by splice point
    ("revision_judged", "revision_fallback"); "good_success": the "good" ones that
    succeeded. Other examples are ignored."""
    counts: Counter[str] = Counter()
    for example in examples:
        if isinstance(example, SFTExample):
            source = example.source
            if source == "revision":
                source = f"revision_{example.info['revision_point']}"
            counts[source] += 1
            counts["good_success"] += source == "good" and bool(example.info.get("success"))
    return {source: n for source, n in counts.items() if n}


def search_diagnostics(results: Sequence[SearchResult], examples: Sequence[Any]) -> dict[str, Any]:
    """An iteration's critic agreement, pair sources and SFT sources (``summary.json``, W&B)."""
    return {
        "critic": critic_agreement(r.tree for r in results),
        "pairs": pair_sources(results, examples),
        "sft": sft_sources(examples),
    }
