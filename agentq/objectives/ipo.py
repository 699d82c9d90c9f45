"""IPO: identity preference optimisation (Azar et al. 2023, arXiv 2310.12036).

DPO's log σ lets the implicit reward margin grow without bound on
deterministic preferences; IPO instead regresses the log-ratio margin onto a
fixed target (Azar et al., Eq. 17, with their regulariser τ as our β):

    L = (Δ - 1 / (2β))²,
    Δ = (log π(y_w|x) - log π_ref(y_w|x)) - (log π(y_l|x) - log π_ref(y_l|x)).

Length normalisation (``length_normalize=True``): each log-ratio is divided by
its sequence's token count before the difference,
``Δ = r_w / |y_w| - r_l / |y_l|``. The paper writes Eq. 17 on sequence
log-probs (the default here, and what Xie et al.'s MCTS-DPO code does);
TRL 1.16's ``loss_type="ipo"`` always normalises (its comment says the IPO
authors confirmed their reported results use this form), which keeps β
comparable across action lengths. ``length_normalize=True`` matches TRL.
"""

from __future__ import annotations

from typing import ClassVar

from agentq.objectives.base import LossOutput, Objective, PreferenceLogps, log_ratios


class IPOLoss(Objective):
    """IPO (Azar et al. 2023, Eq. 17) on step or trajectory pairs.

    Args:
        beta: τ of the paper, > 0; the target margin is 1 / (2β).
        length_normalize: divide each log-ratio by its token count (TRL's IPO).
    """

    needs_visits: ClassVar[bool] = False

    def __init__(self, beta: float = 0.1, length_normalize: bool = False) -> None:
        super().__init__()
        if not beta > 0:
            raise ValueError(f"objective.beta must be > 0, got {beta}")
        self.beta = float(beta)
        self.length_normalize = bool(length_normalize)

    def forward(self, logps: PreferenceLogps) -> LossOutput:
        chosen_logratios, rejected_logratios = log_ratios(logps)  # (B,) each
        chosen_scores, rejected_scores = chosen_logratios, rejected_logratios
        if self.length_normalize:
            if logps.chosen_tokens is None or logps.rejected_tokens is None:
                raise ValueError("ipo with length_normalize needs chosen_tokens and rejected_tokens")
            chosen_scores = chosen_logratios / logps.chosen_tokens.to(chosen_logratios).clamp(min=1)  # (B,)
            rejected_scores = rejected_logratios / logps.rejected_tokens.to(rejected_logratios).clamp(min=1)  # (B,)
        margin = chosen_scores - rejected_scores  # (B,) Δ
        return LossOutput(
            losses=(margin - 1 / (2 * self.beta)) ** 2,
            # The same implicit rewards as DPO (β times the unnormalised log-ratio), for logging.
            chosen_rewards=self.beta * chosen_logratios.detach(),
            rejected_rewards=self.beta * rejected_logratios.detach(),
        )

    def extra_repr(self) -> str:
        return f"beta={self.beta}, length_normalize={self.length_normalize}"
