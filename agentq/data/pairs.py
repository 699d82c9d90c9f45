"""Step-level preference pairs from search trees (Agent Q, docs/method.md §4).

At every node with two or more expanded children, every pair of children
(a_i, a_j) whose blended values (Eq. 10) differ by at least theta gives a pair
(h, a_w, a_l) with a_w the higher-valued one.

Tree-of-Thought trees (alpha = 0, so the value is the evaluator's) also mark
which children the search kept; there a pair is a kept child against a pruned
sibling, as in CPO (Zhang et al. 2024, arXiv 2406.09136), still gated by theta.
"""

from __future__ import annotations

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
    """

    threshold: float = 0.1
    min_visits: int = 0
    outcome_only: bool = False
    agree_with_outcome: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"pairs.threshold must be in [0, 1], got {self.threshold}")
        if self.min_visits < 0:
            raise ValueError(f"pairs.min_visits must be >= 0, got {self.min_visits}")

    kind: ClassVar[str] = PREFERENCE  # what it builds (the objective must train on the same kind)

    def from_search(self, result: SearchResult, policy=None) -> list[StepPair]:
        return self(result.tree)

    def __call__(self, tree: Tree) -> list[StepPair]:
        pairs = []
        for node in tree.nodes:
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
