"""Conservative MCTS-DPO: per-pair label smoothing from MCTS visit counts.

Xie et al. 2024 ("Monte Carlo Tree Search Boosts Reasoning via Iterative
Preference Learning", arXiv 2405.00451, §2.3) label a step pair by the Q
values of the search but trust it only as far as the search explored it: the
cDPO loss (see :mod:`agentq.objectives.dpo`) with a per-pair ε

    ε = 1 / (N(h,a_w) / N(h,a_l) + 1) = N_l / (N_w + N_l),
    L = -(1 - ε) log σ(β Δ) - ε log σ(-β Δ),

so a winner visited far more often than the loser gives ε → 0 (plain DPO) and
equal visits give ε = 1/2 (no preference at all).

Edge cases and the one departure (the paper does not discuss them):

- ``N_l = 0, N_w > 0``: the ratio is infinite and ε = 0, as the formula says.
- ``N_w = N_l = 0`` (two critic-only children, Agent Q Eq. 10 with Q_mcts = 0):
  0/0; taken as the limit of equal visits, ε = 1/2, then capped (below).
- ``ε >= 1/2`` whenever ``N_w <= N_l`` (including ``N_w = 0 < N_l``): the
  visits do not back the Q-value order the pair builder chose, and the formula
  would train a null (ε = 1/2) or *reversed* (ε > 1/2, up to 1) preference.
  ε is capped at ``max_label_smoothing`` < 1/2: such a pair keeps its
  direction with the least confidence allowed (a gradient ``1 - 2ε`` times
  that of plain DPO at Δ = 0), rather than undoing the value gap that made it
  a pair. The cap applies to every pair, so it is also the ceiling of ε.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from agentq.objectives.base import LossOutput, Objective, PreferenceLogps, log_ratios
from agentq.objectives.dpo import smoothed_sigmoid_loss


def visit_label_smoothing(chosen_visits: Tensor, rejected_visits: Tensor, max_label_smoothing: float) -> Tensor:
    """Per-pair ε = N_l / (N_w + N_l), 1/2 when both are 0, capped at ``max_label_smoothing``. (B,)"""
    if (chosen_visits < 0).any() or (rejected_visits < 0).any():
        raise ValueError("conservative_dpo: visit counts must be >= 0")
    n_w = chosen_visits.double()  # (B,)
    n_l = rejected_visits.double()  # (B,)
    total = n_w + n_l  # (B,)
    eps = torch.where(total > 0, n_l / total.clamp(min=1), torch.full_like(total, 0.5))  # (B,)
    return eps.clamp(max=max_label_smoothing)


class ConservativeDPOLoss(Objective):
    """Conservative MCTS-DPO (Xie et al. 2024): cDPO with ε from visit counts.

    Args:
        beta: β of the implicit reward, > 0.
        max_label_smoothing: the cap on ε, in [0, 0.5). Pairs whose visit counts
            do not favour the winner (N_w <= N_l) get exactly this ε.
    """

    needs_visits: ClassVar[bool] = True

    def __init__(self, beta: float = 0.1, max_label_smoothing: float = 0.4) -> None:
        super().__init__()
        if not beta > 0:
            raise ValueError(f"objective.beta must be > 0, got {beta}")
        if not 0.0 <= max_label_smoothing < 0.5:
            raise ValueError(
                f"objective.max_label_smoothing must lie in [0, 0.5), got {max_label_smoothing}"
            )
        self.beta = float(beta)
        self.max_label_smoothing = float(max_label_smoothing)

    def label_smoothing(self, logps: PreferenceLogps) -> Tensor:
        if logps.chosen_visits is None or logps.rejected_visits is None:
            raise ValueError(
                "conservative_dpo needs MCTS visit counts: use pairs=step with search=mcts"
            )
        return visit_label_smoothing(logps.chosen_visits, logps.rejected_visits, self.max_label_smoothing)

    def forward(self, logps: PreferenceLogps) -> LossOutput:
        chosen_logratios, rejected_logratios = log_ratios(logps)  # (B,) each
        logits = self.beta * (chosen_logratios - rejected_logratios)  # (B,) β Δ
        eps = self.label_smoothing(logps).to(logits)  # (B,) constant
        return LossOutput(
            losses=smoothed_sigmoid_loss(logits, eps),
            chosen_rewards=self.beta * chosen_logratios.detach(),
            rejected_rewards=self.beta * rejected_logratios.detach(),
        )

    def extra_repr(self) -> str:
        return f"beta={self.beta}, max_label_smoothing={self.max_label_smoothing}"
