"""Conservative MCTS-DPO, IPO and SFT on hand-computed values; the objective configs.

DPO itself is in test_dpo.py (hand-computed values and TRL's DPOTrainer); TRL's
IPO is compared there too.
"""

from __future__ import annotations

import math

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentq.objectives import (
    ConservativeDPOLoss,
    DPOLoss,
    IPOLoss,
    LossOutput,
    PreferenceLogps,
    SequenceLogps,
    SFTLoss,
)
from agentq.objectives.conservative import visit_label_smoothing
from tests.conftest import CONF

F64 = torch.float64


def _t(values, requires_grad=False):
    return torch.tensor(values, dtype=F64, requires_grad=requires_grad)


def _pairs(n: int, *, flipped: bool = False, **extra) -> PreferenceLogps:
    """n copies of test_dpo's pair A: chosen log-ratio +1, rejected -1, Δ = 2 (βΔ = 1 at β = 0.5).
    ``flipped``: pair B, Δ = -2."""
    chosen, rejected = (-5.0, -3.0) if flipped else (-3.0, -5.0)
    return PreferenceLogps(
        _t([chosen] * n), _t([rejected] * n), _t([-4.0] * n), _t([-4.0] * n), **extra
    )


# -log σ(1) = log(1 + e^-1); -log σ(-x) = -log σ(x) + x, so with βΔ = 1 the cDPO loss is
# (1-ε)·LOSS_A + ε·(LOSS_A + 1) = LOSS_A + ε.
LOSS_A = 0.313261687518223


# --- conservative MCTS-DPO ---------------------------------------------------------------

# (N_w, N_l) -> ε before the cap, by hand from ε = 1 / (N_w/N_l + 1) = N_l / (N_w + N_l).
VISITS = [
    ((3, 1), 0.25),  # 1 / (3 + 1)
    ((9, 1), 0.1),  # 1 / (9 + 1)
    ((1, 0), 0.0),  # N_w/N_l = ∞: the loser was never visited
    ((2, 2), 0.5),  # equal visits: no preference
    ((0, 0), 0.5),  # no visits at all: the limit of equal visits
    ((1, 4), 0.8),  # the visits favour the loser
    ((0, 2), 1.0),  # the winner was never visited
]


def test_visit_label_smoothing_by_hand_with_the_cap():
    chosen = torch.tensor([v[0][0] for v in VISITS])
    rejected = torch.tensor([v[0][1] for v in VISITS])
    # Cap 0.4: 0.25, 0.1, 0 pass; 0.5, 0.5, 0.8, 1.0 become 0.4.
    expected = torch.tensor([0.25, 0.1, 0.0, 0.4, 0.4, 0.4, 0.4], dtype=F64)
    torch.testing.assert_close(visit_label_smoothing(chosen, rejected, 0.4), expected)
    # Cap 0.3 lowers 0.4s to 0.3 and leaves the rest.
    expected = torch.tensor([0.25, 0.1, 0.0, 0.3, 0.3, 0.3, 0.3], dtype=F64)
    torch.testing.assert_close(visit_label_smoothing(chosen, rejected, 0.3), expected)
    # Without a binding cap, the paper's formula exactly.
    raw = torch.tensor([e for _, e in VISITS], dtype=F64)
    torch.testing.assert_close(visit_label_smoothing(chosen, rejected, 1.0), raw)


def test_conservative_loss_matches_hand_computed_values():
    n = len(VISITS)
    logps = _pairs(
        n,
        chosen_visits=torch.tensor([float(v[0][0]) for v in VISITS]),
        rejected_visits=torch.tensor([float(v[0][1]) for v in VISITS]),
    )
    out = ConservativeDPOLoss(beta=0.5, max_label_smoothing=0.4)(logps)
    # βΔ = 1 everywhere: loss = LOSS_A + ε, ε = [0.25, 0.1, 0, 0.4, 0.4, 0.4, 0.4].
    expected = [0.563261687518223, 0.413261687518223, 0.313261687518223] + [0.713261687518223] * 4
    torch.testing.assert_close(out.losses, _t(expected))
    torch.testing.assert_close(out.chosen_rewards, _t([0.5] * n))
    torch.testing.assert_close(out.rejected_rewards, _t([-0.5] * n))
    # Per pair it is cDPO with that pair's ε (DPOLoss with ε is checked against TRL).
    for i, eps in enumerate([0.25, 0.1, 0.0, 0.4]):
        cdpo = DPOLoss(beta=0.5, label_smoothing=eps)(_pairs(1)).losses
        torch.testing.assert_close(out.losses[i : i + 1], cdpo)


def test_conservative_loss_on_a_wrong_way_pair():
    # Pair B (βΔ = -1): -log σ(-1) = LOSS_A + 1; with ε: LOSS_A + 1 - ε. N = (3, 1): ε = 0.25.
    logps = _pairs(1, flipped=True, chosen_visits=_t([3.0]), rejected_visits=_t([1.0]))
    out = ConservativeDPOLoss(beta=0.5)(logps)
    torch.testing.assert_close(out.losses, _t([LOSS_A + 1 - 0.25]))


def test_conservative_gradient_shrinks_with_epsilon():
    # dL/d log π(a_w) = -β [(1-ε) σ(-βΔ) - ε σ(βΔ)]; at Δ = 0: -β (1 - 2ε) / 2.
    beta = 0.5
    logps = PreferenceLogps(
        _t([-4.0, -4.0], requires_grad=True), _t([-4.0, -4.0]), _t([-4.0, -4.0]), _t([-4.0, -4.0]),
        chosen_visits=_t([1.0, 3.0]), rejected_visits=_t([0.0, 1.0]),
    )
    ConservativeDPOLoss(beta=beta)(logps).losses.sum().backward()
    torch.testing.assert_close(logps.policy_chosen.grad, _t([-beta / 2, -beta * (1 - 0.5) / 2]))


def test_conservative_needs_visits():
    with pytest.raises(ValueError, match="conservative_dpo needs MCTS visit counts: use pairs=step with search=mcts"):
        ConservativeDPOLoss(beta=0.1)(_pairs(2))


def test_conservative_refuses_negative_visits():
    with pytest.raises(ValueError, match="visit counts must be >= 0"):
        ConservativeDPOLoss(beta=0.1)(_pairs(1, chosen_visits=_t([-1.0]), rejected_visits=_t([1.0])))


@pytest.mark.parametrize("cap", [-0.1, 0.5, 0.7])
def test_conservative_cap_must_stay_below_one_half(cap):
    with pytest.raises(ValueError, match=r"objective\.max_label_smoothing"):
        ConservativeDPOLoss(beta=0.1, max_label_smoothing=cap)


# --- IPO ------------------------------------------------------------------------------------


def test_ipo_matches_hand_computed_values():
    # β = 0.5: target 1/(2β) = 1. Pair A: Δ = 2, (2 - 1)² = 1. Pair B: Δ = -2, (-2 - 1)² = 9.
    logps = PreferenceLogps(_t([-3.0, -5.0]), _t([-5.0, -3.0]), _t([-4.0, -4.0]), _t([-4.0, -4.0]))
    out = IPOLoss(beta=0.5)(logps)
    torch.testing.assert_close(out.losses, _t([1.0, 9.0]))
    torch.testing.assert_close(out.chosen_rewards, _t([0.5, -0.5]))


def test_ipo_length_normalized_matches_hand_computed_values():
    # Tokens: chosen [4, 2], rejected [2, 4].
    # Pair A: +1/4 - (-1/2) = 0.75, (0.75 - 1)² = 0.0625.
    # Pair B: -1/2 - (+1/4) = -0.75, (-0.75 - 1)² = 3.0625.
    logps = PreferenceLogps(
        _t([-3.0, -5.0]), _t([-5.0, -3.0]), _t([-4.0, -4.0]), _t([-4.0, -4.0]),
        chosen_tokens=_t([4.0, 2.0]), rejected_tokens=_t([2.0, 4.0]),
    )
    out = IPOLoss(beta=0.5, length_normalize=True)(logps)
    torch.testing.assert_close(out.losses, _t([0.0625, 3.0625]))
    # The rewards stay β times the summed log-ratio, as DPO's (and TRL's).
    torch.testing.assert_close(out.chosen_rewards, _t([0.5, -0.5]))


def test_ipo_gradient_pulls_the_margin_to_its_target():
    # dL/d log π(y_w) = 2 (Δ - 1/(2β)); at Δ = 0, β = 0.5: -2 (the chosen log-prob goes up).
    logps = PreferenceLogps(
        _t([-4.0], requires_grad=True), _t([-4.0], requires_grad=True), _t([-4.0]), _t([-4.0])
    )
    IPOLoss(beta=0.5)(logps).losses.sum().backward()
    torch.testing.assert_close(logps.policy_chosen.grad, _t([-2.0]))
    torch.testing.assert_close(logps.policy_rejected.grad, _t([2.0]))


def test_ipo_length_normalize_needs_token_counts():
    with pytest.raises(ValueError, match="chosen_tokens"):
        IPOLoss(beta=0.5, length_normalize=True)(_pairs(1))


# --- SFT ------------------------------------------------------------------------------------


def test_sft_is_the_token_mean_over_the_batch():
    # Example 0: 3 tokens summing to -6 (mean NLL 2); example 1: 1 token, -1 (mean NLL 1).
    # Batch token mean: (6 + 1) / (3 + 1) = 1.75, not the mean of means 1.5.
    logps = SequenceLogps(policy=_t([-6.0, -1.0], requires_grad=True), num_tokens=_t([3.0, 1.0]))
    out = SFTLoss()(logps)
    torch.testing.assert_close(out.losses, _t([2.0, 1.0]))
    assert out.chosen_rewards is None and out.rejected_rewards is None
    loss = out.loss()
    torch.testing.assert_close(loss, torch.tensor(1.75, dtype=F64))
    # Every token weighs 1 / (total tokens): d loss / d Σ log π_b = -1/4 for both examples.
    loss.backward()
    torch.testing.assert_close(logps.policy.grad, _t([-0.25, -0.25]))


def test_loss_output_reduction():
    assert LossOutput(losses=_t([1.0, 3.0])).loss().item() == 2.0
    assert LossOutput(losses=_t([1.0, 3.0]), weights=_t([3.0, 1.0])).loss().item() == 1.5


# --- kinds and configs ------------------------------------------------------------------------


def test_kinds_and_visit_needs():
    assert (DPOLoss.kind, DPOLoss.needs_visits) == ("preference", False)
    assert (ConservativeDPOLoss.kind, ConservativeDPOLoss.needs_visits) == ("preference", True)
    assert (IPOLoss.kind, IPOLoss.needs_visits) == ("preference", False)
    assert (SFTLoss.kind, SFTLoss.needs_visits) == ("sft", False)


# Each objective file, the class it builds and the example builder it selects (None: the
# default, pairs=step). Listed, not globbed, so a missing file fails here.
OBJECTIVE_CONFIGS = {
    "dpo": (DPOLoss, None),
    "traj_dpo": (DPOLoss, "trajectory"),
    "conservative_dpo": (ConservativeDPOLoss, None),
    "ipo": (IPOLoss, None),
    "sft": (SFTLoss, "successes"),
    "masked_sft": (SFTLoss, "revision"),
}


def test_objective_configs_are_the_listed_ones():
    assert {p.stem for p in (CONF / "objective").glob("*.yaml")} == set(OBJECTIVE_CONFIGS)


@pytest.mark.parametrize("name", sorted(OBJECTIVE_CONFIGS))
def test_objective_config_builds_its_loss_and_selects_its_examples(name):
    cls, pairs = OBJECTIVE_CONFIGS[name]
    path = CONF / "objective" / f"{name}.yaml"
    assert path.read_text().startswith("# @package _global_\n")
    cfg = OmegaConf.load(path)
    loss = instantiate(cfg.objective)
    assert type(loss) is cls
    overrides = [d for d in cfg.get("defaults", []) if "override /pairs" in d]
    assert overrides == ([{"override /pairs": pairs}] if pairs else [])


def test_default_objective_composes_with_step_pairs(make_cfg):
    cfg = make_cfg("objective=conservative_dpo", "objective.beta=0.3", "objective.max_label_smoothing=0.2")
    assert cfg.pairs._target_.endswith("StepPairBuilder")
    loss = instantiate(cfg.objective)
    assert (loss.beta, loss.max_label_smoothing) == (0.3, 0.2)
    assert math.isclose(instantiate(make_cfg().objective).beta, 0.1)
