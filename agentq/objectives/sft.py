"""SFT: negative log-likelihood of the trained tokens, averaged over tokens.

One loss serves two methods; they differ only in the examples they get:

- **RFT** (rejection-sampling fine-tuning, Agent Q's baseline): every step of
  the successful trajectories carries loss.
- **Agent-R masked SFT** (Yuan et al. 2025, arXiv 2501.11425, phase 2): a
  revision trajectory keeps its bad prefix as context only (those segments
  have ``train=False`` and are never scored); the revision thought and the
  good continuation carry loss, as do the good trajectories.

Per batch of B examples, with ``T_b`` the trained tokens of example b,

    L = - Σ_b Σ_{t ∈ T_b} log π(y_t | y_<t, x) / Σ_b |T_b|,

the mean over all trained tokens of the batch. This is the usual causal-LM
SFT reduction (Hugging Face's cross-entropy with ignored labels, TRL's SFT,
torchtune), which Agent-R's SFT uses: every token counts the same wherever it
sits. The alternative, a mean per example then over examples, would give a
3-token success the weight of a 300-token revision trajectory. The module
returns the per-example token mean ``-Σ_{t∈T_b} log π / |T_b|`` as ``losses``
(for logging) with ``weights = |T_b|``, so :meth:`LossOutput.loss` is the
batch token mean above.
"""

from __future__ import annotations

from typing import ClassVar

from agentq.objectives.base import LossOutput, Objective, SequenceLogps


class SFTLoss(Objective):
    """Token-mean NLL on the trained tokens (RFT and Agent-R's masked SFT)."""

    needs_visits: ClassVar[bool] = False

    def forward(self, logps: SequenceLogps) -> LossOutput:
        num_tokens = logps.num_tokens.to(logps.policy).clamp(min=1)  # (B,)
        return LossOutput(losses=-logps.policy / num_tokens, weights=num_tokens)
