"""Step-level preference pairs from search trees (Agent Q, docs/method.md §4).

At every node with two or more expanded children, every pair of children
(a_i, a_j) whose blended values (Eq. 10) differ by at least theta gives a pair
(h, a_w, a_l) with a_w the higher-valued one.

Tree-of-Thought trees (alpha = 0, so the value is the evaluator's) also mark
which children the search kept; there a pair is a kept child against a pruned
sibling, as in CPO (Zhang et al. 2024, arXiv 2406.09136), still gated by theta.

``balance_order`` is a selection across all of an iteration's trees, and ``observation_contains``
a filter on the states pairs are made at; neither is a part of Eq. 11.
Pairs between WebShop search results can lean to one side of the page (14 of 18 chose the lower
result in experiments/webshop_clone80_fit), and an update on them learnt to skip the first result
on goals it never searched. Balanced, listing order no longer tells a pair's chosen action from
its rejected one (measured in experiments/webshop_clone80_balanced).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import ClassVar

from agentq.records.examples import PREFERENCE, StepPair
from agentq.records.tree import SearchResult, Tree


@dataclass(frozen=True)
class StepPairBuilder:
    """Args:
    threshold: theta, the minimum value gap |Q(h, a_i) - Q(h, a_j)|.
    min_visits: skip children visited fewer times (0 keeps critic-only children,
        whose Q_mcts is still 0).
    outcome_only: keep only pairs whose backed-up values Q_mcts differ, dropping
        those only the critic's scores separate (the ablation of
        :mod:`agentq.data.diagnostics`' "critic-only" pairs).
    agree_with_outcome: keep only pairs whose chosen action also has the higher Q_mcts
        (implies ``outcome_only``). Eq. 10 orders a pair by the blend, so a critic that
        scores siblings against their returns can make the lower-return action the
        chosen one: :mod:`agentq.data.diagnostics` counts those pairs "against_outcome".
    balance_order: across the iteration's trees (:meth:`select`), keep as many pairs whose
        chosen action is listed after the rejected one among the state's valid actions (lower
        on a WebShop results page) as pairs where it is listed before, dropping a fixed
        pseudo-random subset of the larger side; pairs with an action not listed (a search
        query) are all kept.
    observation_contains: keep only pairs at states whose observation contains this text (None:
        every state). A study's probe of which states' pairs carry over to other goals: WebShop's
        product pages, where the options are chosen, all show "[button] Buy Now [button_]".
    """

    threshold: float = 0.1
    min_visits: int = 0
    outcome_only: bool = False
    agree_with_outcome: bool = False
    balance_order: bool = False
    observation_contains: str | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"pairs.threshold must be in [0, 1], got {self.threshold}")
        if self.min_visits < 0:
            raise ValueError(f"pairs.min_visits must be >= 0, got {self.min_visits}")
        if self.observation_contains is not None and not (isinstance(self.observation_contains, str) and self.observation_contains):
            raise ValueError(f"pairs.observation_contains must be null or a non-empty string, got {self.observation_contains!r}")

    kind: ClassVar[str] = PREFERENCE  # what it builds (the objective must train on the same kind)

    def from_search(self, result: SearchResult, policy=None) -> list[StepPair]:
        return self(result.tree)

    def __call__(self, tree: Tree) -> list[StepPair]:
        pairs = []
        for node in tree.nodes:
            if self.observation_contains is not None and self.observation_contains not in node.history.observation:
                continue
            children = [c for c in tree.children(node) if c.visits >= self.min_visits]
            for a, b in combinations(children, 2):
                qa, qb = a.blended_q(tree.alpha), b.blended_q(tree.alpha)
                if abs(qa - qb) < self.threshold or qa == qb:
                    continue
                if (self.outcome_only or self.agree_with_outcome) and a.backed_up == b.backed_up:
                    continue
                (w, qw), (lo, ql) = ((a, qa), (b, qb)) if qa > qb else ((b, qb), (a, qa))
                if self.agree_with_outcome and w.backed_up < lo.backed_up:
                    continue
                if w.kept is not None and not (w.kept and lo.kept is False):
                    continue  # ToT: only selected vs pruned
                pairs.append(
                    StepPair(
                        task_id=tree.task_id,
                        node_id=node.id,
                        prompt=node.prompt,
                        chosen=w.action,
                        rejected=lo.action,
                        chosen_ids=list(w.action_ids),
                        rejected_ids=list(lo.action_ids),
                        chosen_logprob=w.logprob,
                        rejected_logprob=lo.logprob,
                        q_chosen=qw,
                        q_rejected=ql,
                        visits_chosen=w.visits,
                        visits_rejected=lo.visits,
                    )
                )
        return pairs

    def select(self, results: Iterable[SearchResult], pairs: Sequence[StepPair]) -> list[StepPair]:
        """The pairs trained on, from all of an iteration's (``balance_order``)."""
        if not self.balance_order:
            return list(pairs)
        trees = {str(r.tree.task_id): r.tree for r in results}
        later = [chose_later(trees[str(pair.task_id)], pair) for pair in pairs]
        keep = min(later.count(True), later.count(False))
        kept = set()
        for side in (True, False):
            # The smallest checksums of (goal, state, chosen): the same subset whatever order the
            # trees finished in (concurrent searches), so a resumed run keeps the same pairs.
            ranked = sorted((i for i, x in enumerate(later) if x is side), key=lambda i: _draw(pairs[i]))
            kept.update(ranked[:keep])
        return [pair for i, pair in enumerate(pairs) if later[i] is None or i in kept]


def chose_later(tree: Tree, pair: StepPair) -> bool | None:
    """Whether the pair's chosen command comes after its rejected one among the state's valid
    actions (the page's order in WebShop: a lower result); None if either is not listed."""
    state = tree.nodes[pair.node_id]
    listed = state.history.valid_actions or ()
    command = {child.action: child.command for child in tree.children(state)}
    chosen, rejected = command[pair.chosen], command[pair.rejected]
    if chosen not in listed or rejected not in listed or chosen == rejected:
        return None
    return listed.index(chosen) > listed.index(rejected)


def _draw(pair: StepPair) -> int:
    return zlib.crc32(f"{pair.task_id}/{pair.node_id}/{pair.chosen}".encode())
