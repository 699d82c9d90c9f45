"""Step DPO (Agent Q, Eq. 5) and trajectory DPO, optionally with constant label smoothing.

Agent Q (Putta et al. 2024, arXiv 2408.07199, Eq. 5) trains on step pairs
``(h, a_w, a_l)`` taken from the search tree with the DPO objective
(Rafailov et al. 2023, arXiv 2305.18290, Eq. 7):

    L = -log σ(β Δ),
    Δ = (log π(a_w|h) - log π_ref(a_w|h)) - (log π(a_l|h) - log π_ref(a_l|h)),

where each ``log π(a|h)`` is the joint log-likelihood of the whole composite
action (plan, thought, command, explanation; Agent Q Eq. 1), summed over its
tokens.

The same module is the **trajectory DPO** baseline of Agent Q (a successful
against a failed trajectory of one task, outcome supervision only): there
``log π(τ) = Σ_t log π(a_t|h_t)``, summed over the trajectory's steps, because
each step is sampled from its own history. Only the inputs differ.

With label smoothing ε the target is a soft preference ``P(y_w ≻ y_l) = 1 - ε``
and the loss is the binary cross-entropy against it, the conservative DPO
(cDPO, Mitchell 2023, "A note on DPO with noisy preferences") form:

    L = -(1 - ε) log σ(β Δ) - ε log σ(-β Δ).

ε = 0 recovers Eq. 5 exactly. Here ε is one constant from the config; Xie et
al.'s per-pair ε from MCTS visit counts is
:class:`agentq.objectives.conservative.ConservativeDPOLoss`.

The loss is returned per pair, not averaged: the caller chooses the reduction
(:meth:`LossOutput.loss`), and per-pair values are what gets logged and tested.
"""

from __future__ import annotations

from typing import ClassVar

import torch.nn.functional as F
from torch import Tensor

from agentq.objectives.base import LossOutput, Objective, PreferenceLogps, log_ratios


def smoothed_sigmoid_loss(logits: Tensor, label_smoothing: Tensor | float) -> Tensor:
    """``-(1-ε) log σ(z) - ε log σ(-z)`` elementwise; ε a scalar or a (B,) tensor.

    logsigmoid, not log(sigmoid(.)): stays finite when |z| is large.
    """
    losses = -F.logsigmoid(logits)  # (B,)
    if isinstance(label_smoothing, Tensor) or label_smoothing > 0:
        eps = label_smoothing
        losses = (1 - eps) * losses - eps * F.logsigmoid(-logits)  # (B,)
    return losses


class DPOLoss(Objective):
    """Step DPO (Agent Q, Eq. 5) and trajectory DPO, with optional cDPO label smoothing.

    Args:
        beta: β, the inverse temperature of the implicit reward (strength of the
            KL pull toward the reference policy). Must be > 0.
        label_smoothing: ε, the assumed probability that a pair's preference
            label is flipped. Must lie in [0, 0.5); 0 gives plain DPO.
    """

    needs_visits: ClassVar[bool] = False

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
        chosen_logratios, rejected_logratios = log_ratios(logps)  # (B,) each
        logits = self.beta * (chosen_logratios - rejected_logratios)  # (B,) β Δ
        return LossOutput(
            losses=smoothed_sigmoid_loss(logits, self.label_smoothing),
            chosen_rewards=self.beta * chosen_logratios.detach(),
            rejected_rewards=self.beta * rejected_logratios.detach(),
        )

    def extra_repr(self) -> str:
        return f"beta={self.beta}, label_smoothing={self.label_smoothing}"
