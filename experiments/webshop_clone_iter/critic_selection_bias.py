"""Does the critic-agreement metric read a negative Kendall tau from a critic that knows nothing?

One node with K children, searched by our UCB rule (agentq.search.mcts.ucb_score, Eq. 7 on
Eq. 10's blend). The critic's rank scores are dealt at random, independent of the children's
values, so a fair metric should average tau 0; an informative critic ranks the children by
their values plus noise. Each visit's return is the child's value plus noise.

Two metrics of agentq.data.diagnostics.critic_agreement are read:
- ``kendall_tau``: the critic against the backed-up Q of the siblings visited at least twice.
  Selection by the blend visits a low-ranked child again only when its first returns were
  high, which links the two by selection alone.
- ``first_return_tau``: the critic against each sibling's first return (the value its first
  visit backed up), over the siblings visited at least once.

    python experiments/webshop_clone_iter/critic_selection_bias.py
"""

from __future__ import annotations

import random

from agentq.critic.ranking import LinearRankScore
from agentq.data.diagnostics import critic_agreement
from agentq.records.tree import Node, Tree
from agentq.search.mcts import backpropagate, ucb_score


def one_node(rng: random.Random, k: int, simulations: int, critic_noise: float | None, noise: float = 0.2) -> Tree:
    """A root searched ``simulations`` times; ``critic_noise`` None deals the critic's ranks at random."""
    values = [rng.random() for _ in range(k)]
    if critic_noise is None:
        ranks = rng.sample(range(k), k)
    else:  # rank 0 (the critic's first choice) to the highest noisy value
        order = sorted(range(k), key=lambda i: -(values[i] + rng.gauss(0.0, critic_noise)))
        ranks = [order.index(i) for i in range(k)]
    score = LinearRankScore()
    tree = Tree(task_id=0, alpha=0.5)
    root = tree.add(Node(id=0, parent=None, depth=0, history=None))
    children = [tree.add(Node(id=0, parent=0, depth=1, history=None, critic_score=score(r, k))) for r in ranks]
    for n in range(simulations):
        child = max(children, key=lambda c: ucb_score(c, n, tree.alpha, 1.0))
        ret = min(1.0, max(0.0, values[child.id - 1] + rng.gauss(0.0, noise)))
        backpropagate((root, child), ret)
    return tree


def mean_taus(trials: int, seed: int = 0, **kw) -> dict:
    rng = random.Random(seed)
    return critic_agreement([one_node(rng, **kw) for _ in range(trials)], min_visits=2, first_return_min_visits=1)


if __name__ == "__main__":
    for critic, critic_noise in (("random", None), ("informative (noise 0.2)", 0.2)):
        for simulations in (5, 6, 10, 20):
            a = mean_taus(20_000, k=3, simulations=simulations, critic_noise=critic_noise)
            backed, first = (f"{a[key]:+.3f}" for key in ("kendall_tau", "first_return_tau"))
            print(
                f"{critic} critic, K=3, {simulations:2d} visits of the node: tau vs backed-up Q {backed} "
                f"({a['tau_nodes']} nodes); vs first returns {first} ({a['first_return_nodes']} nodes)"
            )
