"""Step-level DPO loss (Agent Q, Eq. 5), optionally conservative (cDPO).

Agent Q (Putta et al. 2024, arXiv 2408.07199, Eq. 5) trains on step pairs
``(h, a_w, a_l)`` taken from the search tree with the DPO objective
(Rafailov et al. 2023, arXiv 2305.18290, Eq. 7):

    L = -log σ(β Δ),
    Δ = (log π(a_w|h) - log π_ref(a_w|h)) - (log π(a_l|h) - log π_ref(a_l|h)),

where each ``log π(a|h)`` is the joint log-likelihood of the whole composite
action (plan, thought, command, explanation; Agent Q Eq. 1), summed over its
tokens.

With label smoothing ε the target is a soft preference ``P(a_w ≻ a_l) = 1 - ε``
and the loss is the binary cross-entropy against it, the conservative DPO
(cDPO, Mitchell 2023, "A note on DPO with noisy preferences") form that
Conservative MCTS-DPO (Xie et al. 2024, arXiv 2405.00451) also uses:

    L = -(1 - ε) log σ(β Δ) - ε log σ(-β Δ).

ε = 0 recovers Eq. 5 exactly. Here ε is one constant from the config; Xie et
al.'s per-pair ε = 1 / (N(h,a_w) / N(h,a_l) + 1) needs visit counts that these
inputs do not carry, so it is left to its own objective.

The loss is returned per pair, not averaged: the caller (the LightningModule)
chooses the reduction, and per-pair values are what gets logged and tested.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class PreferenceLogps:
    """Summed log-probs of whole composite actions, shape (B,) each.

    ``reference_*`` may come from a reference forward pass or from the replay
    buffer (the log-likelihood the data-generating policy gave each action);
    they are detached either way.
    """

    policy_chosen: Tensor  # (B,) log π(a_w|h)
    policy_rejected: Tensor  # (B,) log π(a_l|h)
    reference_chosen: Tensor  # (B,) log π_ref(a_w|h)
    reference_rejected: Tensor  # (B,) log π_ref(a_l|h)


@dataclass
class LossOutput:
    """Per-pair DPO loss and the implicit rewards, shape (B,) each."""

    losses: Tensor  # (B,) per-pair loss, differentiable w.r.t. the policy log-probs
    chosen_rewards: Tensor  # (B,) β (log π(a_w|h) - log π_ref(a_w|h)), detached
    rejected_rewards: Tensor  # (B,) β (log π(a_l|h) - log π_ref(a_l|h)), detached


class DPOLoss(nn.Module):
    """Step DPO (Agent Q, Eq. 5) with optional cDPO label smoothing.

    Args:
        beta: β, the inverse temperature of the implicit reward (strength of the
            KL pull toward the reference policy). Must be > 0.
        label_smoothing: ε, the assumed probability that a pair's preference
            label is flipped. Must lie in [0, 0.5); 0 gives plain DPO.
    """

    def __init__(self, beta: float = 0.1, label_smoothing: float = 0.0) -> None:
        super().__init__()
        if not beta > 0:
            raise ValueError(f"objective.beta must be > 0, got {beta}")
        if not 0.0 <= label_smoothing < 0.5:
            # ε = 0.5 makes the target uninformative; ε > 0.5 reverses the preference.
            raise ValueError(
                f"objective.label_smoothing must lie in [0, 0.5), got {label_smoothing}"
            )
        self.beta = float(beta)
        self.label_smoothing = float(label_smoothing)

    def forward(self, logps: PreferenceLogps) -> LossOutput:
        # π_ref is fixed for the iteration (Agent Q, Algorithm 1): no gradient reaches it.
        chosen_logratios = logps.policy_chosen - logps.reference_chosen.detach()  # (B,)
        rejected_logratios = logps.policy_rejected - logps.reference_rejected.detach()  # (B,)
        logits = self.beta * (chosen_logratios - rejected_logratios)  # (B,) β Δ

        # logsigmoid, not log(sigmoid(.)): stays finite when |β Δ| is large.
        losses = -F.logsigmoid(logits)  # (B,)
        if self.label_smoothing > 0:
            eps = self.label_smoothing
            losses = (1 - eps) * losses - eps * F.logsigmoid(-logits)  # (B,)

        return LossOutput(
            losses=losses,
            chosen_rewards=self.beta * chosen_logratios.detach(),
            rejected_rewards=self.beta * rejected_logratios.detach(),
        )

    def extra_repr(self) -> str:
        return f"beta={self.beta}, label_smoothing={self.label_smoothing}"
