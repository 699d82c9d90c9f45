"""What every objective takes and returns.

The LightningModule computes summed log-probs once and hands them to the
configured objective as one of these typed inputs; the objective returns
per-example losses and leaves the reduction to :meth:`LossOutput.loss`, so a
trainer has no loss-specific branches.

Each objective class also says what it trains on, so a run can refuse a
config whose example builder and objective do not fit before any model loads:

- ``kind``: the kind of example it trains on (``agentq.records.examples.KINDS``),
  which follows from the input its ``forward`` declares: :class:`PreferenceLogps`
  (``"preference"``: step pairs or trajectory pairs) or :class:`SequenceLogps`
  (``"sft"``: trajectories to imitate). :class:`Objective` reads it from there,
  and training picks its batches by it;
- ``needs_visits``: it weighs pairs by MCTS visit counts.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

from agentq.records.examples import PREFERENCE, SFT


@dataclass
class PreferenceLogps:
    """Summed log-probs of the chosen and rejected sequences, shape (B,) each.

    A sequence is one composite action (step pairs) or a whole trajectory
    (trajectory pairs, where ``log π(τ) = Σ_t log π(a_t|h_t)``). ``reference_*``
    may come from a reference forward pass or from the replay buffer (the
    log-likelihood the data-generating policy gave each action); they are
    treated as constants either way.

    The optional fields are filled by the trainer when the batch has them and
    are read only by the objectives that need them.
    """

    kind: ClassVar[str] = PREFERENCE  # what an objective on this input trains on

    policy_chosen: Tensor  # (B,) log π(y_w|x)
    policy_rejected: Tensor  # (B,) log π(y_l|x)
    reference_chosen: Tensor  # (B,) log π_ref(y_w|x)
    reference_rejected: Tensor  # (B,) log π_ref(y_l|x)
    chosen_tokens: Tensor | None = None  # (B,) number of tokens summed in policy_chosen
    rejected_tokens: Tensor | None = None  # (B,)
    chosen_visits: Tensor | None = None  # (B,) MCTS visit count N(h, a_w)
    rejected_visits: Tensor | None = None  # (B,) N(h, a_l)


@dataclass
class SequenceLogps:
    """Summed log-probs of the trained tokens of B examples (SFT)."""

    kind: ClassVar[str] = SFT

    policy: Tensor  # (B,) Σ log π(y_t | y_<t, x) over the tokens that carry loss
    num_tokens: Tensor  # (B,) how many tokens that sum covers (>= 1)


@dataclass
class LossOutput:
    """Per-example losses and what gets logged with them, shape (B,) each.

    ``weights`` say how the batch loss averages the examples: ``None`` is the
    plain mean (one pair, one vote); SFT weighs each example by its token count
    so the batch loss is the mean over tokens (see ``agentq.objectives.sft``).
    """

    losses: Tensor  # (B,) differentiable w.r.t. the policy log-probs
    chosen_rewards: Tensor | None = None  # (B,) β (log π(y_w|x) - log π_ref(y_w|x)), detached
    rejected_rewards: Tensor | None = None  # (B,) β (log π(y_l|x) - log π_ref(y_l|x)), detached
    weights: Tensor | None = None  # (B,) non-negative, constant

    def loss(self) -> Tensor:
        """The batch loss: ``Σ_b w_b ℓ_b / Σ_b w_b``, the mean without weights."""
        if self.weights is None:
            return self.losses.mean()
        weights = self.weights.detach().to(self.losses)  # (B,)
        return (weights * self.losses).sum() / weights.sum()


def log_ratios(logps: PreferenceLogps) -> tuple[Tensor, Tensor]:
    """``log π(y|x) - log π_ref(y|x)`` of the chosen and the rejected sequences, (B,) each.

    π_ref is fixed for the iteration (Agent Q, Algorithm 1): no gradient reaches it.
    """
    chosen = logps.policy_chosen - logps.reference_chosen.detach()  # (B,)
    rejected = logps.policy_rejected - logps.reference_rejected.detach()  # (B,)
    return chosen, rejected


INPUTS = (PreferenceLogps, SequenceLogps)


class Objective(nn.Module):
    """Base of the objectives: a loss on one typed input, which ``forward``
    declares (its first argument's annotation); the class's ``kind`` is that
    input's, so an objective states what it trains on exactly once."""

    kind: ClassVar[str]
    needs_visits: ClassVar[bool] = False

    def __init__(self) -> None:
        # nn.Module's own signature is (*args, **kwargs): without this one, the config's
        # check of an objective that takes no argument (SFTLoss) would accept any key.
        super().__init__()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = input_of(cls).kind


def input_of(objective: type | object) -> type:
    """The input type (one of :data:`INPUTS`) an objective's ``forward`` declares."""
    cls = objective if isinstance(objective, type) else type(objective)
    first = next(iter(list(inspect.signature(cls.forward).parameters)[1:]), None)
    declared = typing.get_type_hints(cls.forward).get(first) if first else None
    if declared not in INPUTS:
        raise TypeError(
            f"{cls.__name__}.forward must take one of {[t.__name__ for t in INPUTS]} "
            f"(its first argument's annotation), got {declared!r}"
        )
    return declared
