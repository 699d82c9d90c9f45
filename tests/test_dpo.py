"""Step DPO (Agent Q, Eq. 5): hand-computed values, then TRL's DPOTrainer as an
independent reference on a tiny random model."""

from __future__ import annotations

import math

import pytest
import torch
from hydra.utils import instantiate

from agentq.objectives import DPOLoss, LossOutput, PreferenceLogps


def _logps(chosen, rejected, ref_chosen, ref_rejected, *, requires_grad=False) -> PreferenceLogps:
    def t(values):
        return torch.tensor(values, dtype=torch.float64, requires_grad=requires_grad)

    return PreferenceLogps(t(chosen), t(rejected), t(ref_chosen), t(ref_rejected))


# --- hand-computed values -------------------------------------------------------------

# Pair A: chosen log-ratio -3 - (-4) = +1, rejected log-ratio -5 - (-4) = -1,
#   Δ = 1 - (-1) = 2; with β = 0.5, βΔ = 1.
#   loss = -log σ(1) = log(1 + e^-1) = 0.313261687518...
#   rewards: chosen 0.5 * 1 = 0.5, rejected 0.5 * (-1) = -0.5.
# Pair B: the same actions with the preference flipped: βΔ = -1,
#   loss = -log σ(-1) = log(1 + e) = 1.313261687518... (= pair A + 1, since
#   -log σ(-x) = -log σ(x) + x).
PAIRS_AB = dict(
    chosen=[-3.0, -5.0], rejected=[-5.0, -3.0], ref_chosen=[-4.0, -4.0], ref_rejected=[-4.0, -4.0]
)
LOSS_A = 0.313261687518223  # log1p(exp(-1))
LOSS_B = 1.313261687518223  # log1p(exp(1))


def test_zero_margin_loss_is_log2():
    # Policy equal to the reference: Δ = 0 for any β, σ(0) = 1/2, loss = log 2 = 0.693147...
    out = DPOLoss(beta=0.7)(_logps([-2.0, -9.0], [-4.0, -1.0], [-2.0, -9.0], [-4.0, -1.0]))
    assert isinstance(out, LossOutput)
    torch.testing.assert_close(out.losses, torch.full((2,), math.log(2), dtype=torch.float64))
    torch.testing.assert_close(out.chosen_rewards, torch.zeros(2, dtype=torch.float64))
    torch.testing.assert_close(out.rejected_rewards, torch.zeros(2, dtype=torch.float64))


def test_loss_and_rewards_match_hand_computed_values():
    assert math.isclose(LOSS_A, math.log1p(math.exp(-1)))  # the constants above
    out = DPOLoss(beta=0.5)(_logps(**PAIRS_AB))
    assert out.losses.shape == (2,)
    torch.testing.assert_close(out.losses, torch.tensor([LOSS_A, LOSS_B], dtype=torch.float64))
    torch.testing.assert_close(out.chosen_rewards, torch.tensor([0.5, -0.5], dtype=torch.float64))
    torch.testing.assert_close(out.rejected_rewards, torch.tensor([-0.5, 0.5], dtype=torch.float64))


def test_label_smoothing_matches_hand_computed_values():
    # cDPO with ε = 0.1: -(1-ε) log σ(βΔ) - ε log σ(-βΔ).
    #   pair A (βΔ = 1):  0.9 * 0.3132617 + 0.1 * 1.3132617 = 0.4132617 (= LOSS_A + ε·βΔ)
    #   pair B (βΔ = -1): 0.9 * 1.3132617 + 0.1 * 0.3132617 = 1.2132617 (= LOSS_B - ε)
    out = DPOLoss(beta=0.5, label_smoothing=0.1)(_logps(**PAIRS_AB))
    torch.testing.assert_close(
        out.losses, torch.tensor([LOSS_A + 0.1, LOSS_B - 0.1], dtype=torch.float64)
    )
    # The rewards do not depend on ε.
    torch.testing.assert_close(out.chosen_rewards, torch.tensor([0.5, -0.5], dtype=torch.float64))


def test_extreme_margins_stay_finite():
    # βΔ = ±1000: log σ(.) through exp would give log(0) = -inf; logsigmoid gives
    # loss ≈ 0 for a confidently right pair and ≈ 1000 for a confidently wrong one.
    logps = _logps([0.0, -2000.0], [-2000.0, 0.0], [0.0, 0.0], [0.0, 0.0], requires_grad=True)
    out = DPOLoss(beta=0.5, label_smoothing=0.2)(logps)
    assert torch.isfinite(out.losses).all()
    # ε = 0.2 on βΔ = 1000: 0.8·0 + 0.2·1000 = 200; on βΔ = -1000: 0.8·1000 + 0.2·0 = 800.
    torch.testing.assert_close(out.losses, torch.tensor([200.0, 800.0], dtype=torch.float64))
    out.losses.sum().backward()
    assert torch.isfinite(logps.policy_chosen.grad).all()


def test_gradient_raises_chosen_and_lowers_rejected():
    beta = 0.1
    loss_fn = DPOLoss(beta=beta)
    logps = _logps([-4.0], [-4.0], [-4.0], [-4.0], requires_grad=True)
    out = loss_fn(logps)
    out.losses.sum().backward()
    # dL/d log π(a_w|h) = -β σ(-βΔ); at Δ = 0 that is -β/2 = -0.05, and +0.05 for a_l.
    torch.testing.assert_close(
        logps.policy_chosen.grad, torch.tensor([-beta / 2], dtype=torch.float64)
    )
    torch.testing.assert_close(
        logps.policy_rejected.grad, torch.tensor([beta / 2], dtype=torch.float64)
    )
    # The reference is a constant, and the rewards are for logging only.
    assert logps.reference_chosen.grad is None and logps.reference_rejected.grad is None
    assert not out.chosen_rewards.requires_grad and not out.rejected_rewards.requires_grad

    # Raising the chosen action's log-prob lowers the loss; raising the rejected one's raises it.
    with torch.no_grad():
        base = out.losses.item()
        higher_chosen = loss_fn(_logps([-3.9], [-4.0], [-4.0], [-4.0])).losses.item()
        higher_rejected = loss_fn(_logps([-4.0], [-3.9], [-4.0], [-4.0])).losses.item()
    assert higher_chosen < base < higher_rejected


@pytest.mark.parametrize("beta", [0.0, -0.1])
def test_invalid_beta_raises(beta):
    with pytest.raises(ValueError, match=r"objective\.beta"):
        DPOLoss(beta=beta)


@pytest.mark.parametrize("label_smoothing", [-0.01, 0.5, 0.9])
def test_invalid_label_smoothing_raises(label_smoothing):
    with pytest.raises(ValueError, match=r"objective\.label_smoothing"):
        DPOLoss(beta=0.1, label_smoothing=label_smoothing)


def test_hydra_instantiates_the_loss():
    loss = instantiate(
        {"_target_": "agentq.objectives.dpo.DPOLoss", "beta": 0.3, "label_smoothing": 0.1}
    )
    assert isinstance(loss, DPOLoss)
    assert (loss.beta, loss.label_smoothing) == (0.3, 0.1)


# --- TRL's DPOTrainer as an independent reference ---------------------------------------
#
# TRL 1.16 has no standalone DPO loss function, so the reference is
# `DPOTrainer(...).evaluate()["eval_loss"]` on a tiny random model. What both sides
# must agree on (read from trl/trainer/dpo_trainer.py, 1.16):
#
# - Tokenization (`DPOTrainer._prepare_dataset`):
#   * standard (plain text): EOS is appended to `chosen`/`rejected` if missing; then
#     `prompt_ids = tok(prompt)`, `prompt+chosen ids = tok(prompt + chosen)` with the
#     tokenizer's default special tokens (SmolLM2 adds none); the completion is what
#     follows the longest common prefix of the two.
#   * conversational (message lists): no EOS is added; `prompt_ids =
#     apply_chat_template(prompt, add_generation_prompt=True)`, full ids =
#     `apply_chat_template(prompt + [assistant message])`, so the completion is the
#     assistant content plus the template's "<|im_end|>\n".
# - Collation (`DataCollatorForPreference`): prompt + completion, right-padded with
#   the pad id, attention mask 1 on real tokens, completion mask 1 on completion
#   tokens; `max_length=None` so nothing is truncated.
# - Log-probs: the sum over completion tokens of log π(token_t | tokens_<t), no length
#   normalisation (`ld_alpha=None`).
# - Reference: with an explicit `ref_model` and `precompute_ref_log_probs=False` it
#   runs that model on the same batch. (With `ref_model=None` and full fine-tuning it
#   would reload the policy from `config.name_or_path`, impossible for a model built
#   from a config; with `precompute_ref_log_probs=True` it would use the policy itself
#   as the reference, making every loss log 2.)
# - Loss: `loss_type=["sigmoid"]` is our loss with ε = 0; TRL's sigmoid loss ignores
#   `label_smoothing`. TRL's `"aot"` loss is -(1-ε) log σ(βΔ) - ε log σ(-βΔ) on Δs
#   sorted across the batch; with one pair per batch the sort is the identity, so
#   `loss_type=["aot"]`, `per_device_eval_batch_size=1` is our cDPO loss with ε > 0.
#   (`"robust"` is a different, unbiased-estimator form and does not match.)
# - Precision: TRL configs default to `bf16=True` (autocast) even on CPU; it moves the
#   reference log-probs by ~1e-3. `bf16=False` makes both sides fp32.
# - `eval_loss` is the mean of per-batch means; with equal batch sizes that is the
#   mean over pairs, which is what we compare.

PROMPTS = [
    "Task: craft a stick.\nObservation: you have 2 planks.\n",
    "Task: buy red running shoes under $50.\nObservation: search page.\n",
    "Task: open the treasure chest.\nObservation: a wooden door to the north.\n",
    "Task: book a table for two at 7pm.\nObservation: restaurant page.\n",
]
CHOSEN = [
    "THOUGHT: sticks come from planks.\nCOMMAND: craft 4 sticks using 2 planks",
    "COMMAND: search[red running shoes]",
    "THOUGHT: go north first.\nCOMMAND: go north",
    "COMMAND: click[7:00 PM]\nEXPLANATION: pick the requested time.",
]
REJECTED = [
    "COMMAND: inventory",
    "THOUGHT: maybe go back.\nCOMMAND: click[Back to Search]",
    "COMMAND: look",
    "COMMAND: click[Sign in]",
]


def _preference_dataset(conversational: bool):
    from datasets import Dataset

    if conversational:
        return Dataset.from_dict(
            {
                "prompt": [[{"role": "user", "content": p}] for p in PROMPTS],
                "chosen": [[{"role": "assistant", "content": c}] for c in CHOSEN],
                "rejected": [[{"role": "assistant", "content": r}] for r in REJECTED],
            }
        )
    return Dataset.from_dict({"prompt": PROMPTS, "chosen": CHOSEN, "rejected": REJECTED})


def _split_completion(tokenizer, prompt, completion, conversational: bool):
    """Our own tokenization of one (prompt, completion), mirroring TRL's (see above)."""
    if conversational:
        prompt_ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"]
        full_ids = tokenizer.apply_chat_template(prompt + completion)["input_ids"]
    else:
        prompt_ids = tokenizer(prompt)["input_ids"]
        full_ids = tokenizer(prompt + completion + tokenizer.eos_token)["input_ids"]
    assert full_ids[: len(prompt_ids)] == prompt_ids  # prompts end on a token boundary
    return prompt_ids, full_ids[len(prompt_ids) :]


def _tiny_model(seed: int):
    """A fresh tiny random LlamaForCausalLM and the SmolLM2 tokenizer.

    Every consumer gets its own model object: DPOTrainer patches the models it is
    given (fused LM head, pad id). The reference uses another seed than the policy,
    so the reference term of Eq. 5 is exercised, not cancelled.
    """
    from agentq.models.loading import TinyRandomModel

    return TinyRandomModel(seed=seed).load()


POLICY_SEED, REFERENCE_SEED = 0, 1  # the reference differs, so Eq. 5's reference term counts


def _trl_eval(tmp_path, dataset, tokenizer, *, loss_type, batch_size, beta, label_smoothing=0.0):
    """TRL's DPOTrainer(...).evaluate() with policy seed 0 and reference seed 1, fp32."""
    from trl import DPOConfig, DPOTrainer

    args = DPOConfig(
        output_dir=str(tmp_path),
        report_to="none",
        use_cpu=True,
        bf16=False,  # TRL configs default to bf16 autocast, even on CPU; we score in fp32
        seed=0,
        beta=beta,
        label_smoothing=label_smoothing,
        loss_type=loss_type,
        max_length=None,
        precompute_ref_log_probs=False,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size,
        activation_checkpointing=False,  # eval only; also avoids TRL's deprecated alias
    )
    trainer = DPOTrainer(
        model=_tiny_model(POLICY_SEED)[0],
        ref_model=_tiny_model(REFERENCE_SEED)[0],
        args=args,
        train_dataset=dataset,
        eval_dataset=dataset,
        processing_class=tokenizer,
    )
    return trainer, trainer.evaluate()


def _our_logps(trainer, dataset, tokenizer, conversational: bool) -> PreferenceLogps:
    """Our tokenization, our padding, our log-prob function, with token counts."""
    from agentq.models.logprobs import completion_logprobs, pad_pairs

    chosen = [
        _split_completion(tokenizer, ex["prompt"], ex["chosen"], conversational) for ex in dataset
    ]
    rejected = [
        _split_completion(tokenizer, ex["prompt"], ex["rejected"], conversational) for ex in dataset
    ]
    prepared = trainer.eval_dataset  # TRL's own tokenization: both sides score the same tokens
    assert [p for p, _ in chosen] == prepared["prompt_ids"]
    assert [c for _, c in chosen] == prepared["chosen_ids"]
    assert [c for _, c in rejected] == prepared["rejected_ids"]

    policy, reference = _tiny_model(POLICY_SEED)[0], _tiny_model(REFERENCE_SEED)[0]

    def score(model, pairs):
        input_ids, attention_mask, completion_mask = pad_pairs(
            [p for p, _ in pairs], [c for _, c in pairs], tokenizer.pad_token_id
        )
        with torch.no_grad():
            return completion_logprobs(model, input_ids, attention_mask, completion_mask)  # (B,)

    return PreferenceLogps(
        policy_chosen=score(policy, chosen),
        policy_rejected=score(policy, rejected),
        reference_chosen=score(reference, chosen),
        reference_rejected=score(reference, rejected),
        chosen_tokens=torch.tensor([float(len(c)) for _, c in chosen]),
        rejected_tokens=torch.tensor([float(len(c)) for _, c in rejected]),
    )



# TRL 1.16 reads transformers 5's deprecated `is_gradient_checkpointing` alias.
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.parametrize(
    ("conversational", "label_smoothing"),
    [(True, 0.0), (False, 0.0), (True, 0.2)],
    ids=["chat-sigmoid", "text-sigmoid", "chat-cdpo"],
)
def test_matches_trl_dpo_trainer_eval_loss(tmp_path, conversational, label_smoothing):
    _, tokenizer = _tiny_model(POLICY_SEED)
    beta = 1.0
    dataset = _preference_dataset(conversational)
    # With ε > 0 see the note above: "aot" with one pair per batch is cDPO.
    loss_type, batch_size = (["aot"], 1) if label_smoothing else (["sigmoid"], len(dataset))
    trainer, metrics = _trl_eval(
        tmp_path, dataset, tokenizer, loss_type=loss_type, batch_size=batch_size, beta=beta,
        label_smoothing=label_smoothing,
    )
    logps = _our_logps(trainer, dataset, tokenizer, conversational)
    out = DPOLoss(beta=beta, label_smoothing=label_smoothing)(logps)

    # Not a vacuous match: the reference differs from the policy, the pairs have
    # margins of both signs, and the per-pair losses spread well around log 2.
    margins = out.chosen_rewards - out.rejected_rewards  # (B,) βΔ
    assert (margins > 0.1).any() and (margins < -0.1).any()
    assert out.losses.max() - out.losses.min() > 0.2
    assert out.losses.mean().item() == pytest.approx(metrics["eval_loss"], abs=1e-4)
    assert out.chosen_rewards.mean().item() == pytest.approx(
        metrics["eval_rewards/chosen"], abs=1e-4
    )
    assert out.rejected_rewards.mean().item() == pytest.approx(
        metrics["eval_rewards/rejected"], abs=1e-4
    )
    # Summed log-probs over 5-25 tokens of a near-uniform 49k vocabulary: about -50 to -250.
    assert logps.policy_chosen.mean().item() == pytest.approx(
        metrics["eval_logps/chosen"], rel=1e-5
    )
    assert logps.policy_rejected.mean().item() == pytest.approx(
        metrics["eval_logps/rejected"], rel=1e-5
    )


# TRL's IPO (dpo_trainer.py, 1.16, `loss_type == "ipo"`) divides each log-ratio by its
# completion's token count (`completion_mask.sum(dim=1)`) before the difference, then
# (Δ - 1/(2β))²: our IPOLoss with length_normalize=True. β = 2 puts the target margin
# at 0.25, the order of the random pairs' margins, so a wrong normalisation shows.
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.parametrize("conversational", [True, False], ids=["chat", "text"])
def test_ipo_matches_trl_dpo_trainer_eval_loss(tmp_path, conversational):
    from agentq.objectives import IPOLoss

    _, tokenizer = _tiny_model(POLICY_SEED)
    beta = 2.0
    dataset = _preference_dataset(conversational)
    trainer, metrics = _trl_eval(
        tmp_path, dataset, tokenizer, loss_type=["ipo"], batch_size=len(dataset), beta=beta
    )
    logps = _our_logps(trainer, dataset, tokenizer, conversational)
    out = IPOLoss(beta=beta, length_normalize=True)(logps)
    assert out.losses.mean().item() == pytest.approx(metrics["eval_loss"], abs=1e-4)
    assert out.chosen_rewards.mean().item() == pytest.approx(
        metrics["eval_rewards/chosen"], abs=1e-4
    )
    # The paper's form (no normalisation) is a different number on these pairs:
    # completions of different lengths make the two Δs differ.
    unnormalised = IPOLoss(beta=beta)(logps).losses.mean().item()
    assert abs(unnormalised - metrics["eval_loss"]) > 0.05  # 0.27 vs 0.10 (chat)
    assert out.losses.max() - out.losses.min() > 0.02  # not one constant square
