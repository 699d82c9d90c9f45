"""Does the critic-agreement metric read a negative Kendall tau from a critic that knows nothing?

One node with K children, searched by our UCB rule (agentq.search.mcts.ucb_score, Eq. 7 on
Eq. 10's blend). The critic's rank scores are dealt at random, independent of the children's
values, so a fair metric should average tau 0. Each visit's return is the child's value plus
noise. The metric of agentq.data.diagnostics.critic_agreement keeps the siblings visited at
least twice; selection by the blend visits a low-ranked child again only when its first
returns were high, which links the two by selection alone.

    python experiments/webshop_clone_iter/critic_selection_bias.py
"""

from __future__ import annotations

import random
from statistics import fmean

from agentq.critic.ranking import LinearRankScore
from agentq.data.diagnostics import kendall_tau_b
from agentq.records.tree import Node
from agentq.search.mcts import ucb_score


def one_node(rng: random.Random, k: int, simulations: int, alpha: float, c_exp: float, noise: float):
    score = LinearRankScore()
    ranks = rng.sample(range(k), k)
    children = [Node(id=i + 1, parent=0, depth=1, history=None, critic_score=score(r, k)) for i, r in enumerate(ranks)]
    values = [rng.random() for _ in range(k)]
    for n in range(simulations):
        child = max(children, key=lambda c: ucb_score(c, n, alpha, c_exp))
        ret = min(1.0, max(0.0, values[child.id - 1] + rng.gauss(0.0, noise)))
        child.q_mcts += (ret - child.q_mcts) / (child.visits + 1)  # running mean, as the backup keeps it
        child.visits += 1
    return children, values


def mean_tau(trials: int, min_visits: int, seed: int = 0, **kw) -> tuple[float, float, int]:
    rng = random.Random(seed)
    observed, true = [], []
    for _ in range(trials):
        children, values = one_node(rng, **kw)
        kept = [c for c in children if c.visits >= min_visits]
        tau = kendall_tau_b([c.critic_score for c in kept], [c.q_mcts for c in kept]) if len(kept) >= 2 else None
        if tau is not None:
            observed.append(tau)
            true.append(kendall_tau_b([c.critic_score for c in kept], [values[c.id - 1] for c in kept]))
    if not observed:
        return float("nan"), float("nan"), 0
    return fmean(observed), fmean(true), len(observed)


if __name__ == "__main__":
    for simulations in (3, 5, 10):
        for min_visits in (1, 2):  # 2: the metric's own threshold
            tau, true, nodes = mean_tau(
                20_000, min_visits, k=3, simulations=simulations, alpha=0.5, c_exp=1.0, noise=0.2
            )
            print(
                f"K=3, {simulations:2d} visits of the node, siblings with >= {min_visits} visits: "
                f"tau vs backed-up Q {tau:+.3f}, vs the true values {true:+.3f} ({nodes} of 20000 nodes defined)"
            )
