"""Training on every example kind: segment log-probs, SFT masking, one fit each, mismatches.

All with the tiny random model (random weights, the real SmolLM2 tokenizer).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file

from agentq.models import TinyRandomModel, completion_logprobs, pad_pairs
from agentq.models.logprobs import pair_logprobs, segment_logprobs
from agentq.objectives import ConservativeDPOLoss, DPOLoss, IPOLoss, SFTLoss
from agentq.objectives.base import LossOutput, Objective, PreferenceLogps, SequenceLogps, input_of
from agentq.records.examples import (
    KINDS,
    TAGS,
    Segment,
    SFTExample,
    StepPair,
    TrajectoryPair,
    kind_of,
)
from agentq.training import fit as fitting
from agentq.training.data import ExampleDataset, collate_preferences, collate_sft
from agentq.training.fit import PIPELINES, fit, resolve_precision
from agentq.training.module import PreferenceModule, SFTModule

MAX_PROMPT = 512


def _messages(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You craft items."}, {"role": "user", "content": text}]


def _lora() -> LoraConfig:
    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")


@pytest.fixture
def tiny():
    return TinyRandomModel().load()


def _peft_with_nonzero_adapter(model):
    """A LoRA adapter whose B is not zero, so policy and reference differ."""
    torch.manual_seed(0)
    peft_model = get_peft_model(model, _lora())
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    return peft_model


def _trajectory(goal: str, actions: list[str], logprob: float = -3.0, ids=None) -> list[Segment]:
    return [
        Segment(_messages(f"Goal: {goal}. Step {t}."), a, list(ids or []), logprob, True)
        for t, a in enumerate(actions)
    ]


def _score_one(model, prompt_ids, completion_ids) -> torch.Tensor:
    return completion_logprobs(model, *pad_pairs([prompt_ids], [completion_ids], pad_id=2))[0]


# --- log-probs of multi-segment sequences -----------------------------------------------------


def test_segment_logprobs_sum_each_sequences_segments(tiny):
    model, _ = tiny
    g = torch.Generator().manual_seed(0)
    lengths = [(5, 3), (12, 1), (7, 9), (3, 4), (20, 2), (6, 6), (9, 5)]
    prompts = [torch.randint(3, 1000, (p,), generator=g).tolist() for p, _ in lengths]
    completions = [torch.randint(3, 1000, (c,), generator=g).tolist() for _, c in lengths]
    owner = [2, 0, 2, 1, 0, 2, 4]  # sequence 3 has no segment
    with torch.no_grad():
        got = segment_logprobs(model, prompts, completions, owner, 5, rows_per_forward=3)
        each = [_score_one(model, p, c) for p, c in zip(prompts, completions, strict=True)]
    expected = torch.zeros(5)
    for s, value in zip(owner, each, strict=True):
        expected[s] += value
    assert expected[3] == 0 and (expected[[0, 1, 2, 4]] < -1).all()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_trajectory_pair_logps_are_sums_of_their_segments(tiny):
    model, tokenizer = tiny
    peft_model = _peft_with_nonzero_adapter(model)
    pairs = [
        TrajectoryPair(
            0,
            chosen=_trajectory("a stick", ["COMMAND: get 2 planks", "COMMAND: craft 4 sticks"], -2.0),
            rejected=_trajectory("a stick", ["COMMAND: inventory"], -1.5),
            reward_chosen=1.0,
            reward_rejected=0.0,
        ),
        TrajectoryPair(
            1,
            # Generated ids are used as they are (no text re-encoding).
            chosen=_trajectory("a torch", ["ignored text"] * 3, -1.0, ids=[400, 500, 2]),
            rejected=_trajectory("a torch", ["COMMAND: look", "COMMAND: jump"], -4.0),
            reward_chosen=1.0,
            reward_rejected=0.0,
        ),
    ]
    dataset = ExampleDataset(pairs, tokenizer, MAX_PROMPT)
    batch = collate_preferences(dataset.items)
    assert not batch.shares_prompt and batch.chosen_visits is None
    module = PreferenceModule(peft_model, DPOLoss(beta=0.1), torch.optim.SGD, rows_per_forward=3)
    with torch.no_grad():
        logps = module.preference_logps(batch)
        for b, item in enumerate(dataset.items):
            for side, segments in (("chosen", item.chosen), ("rejected", item.rejected)):
                policy = sum(_score_one(peft_model, p, c) for p, c in segments)
                with peft_model.disable_adapter():
                    reference = sum(_score_one(peft_model, p, c) for p, c in segments)
                assert abs(policy - reference) > 1e-3  # the adapter matters
                # fp32 sums near -100 (~10 nats a token): 1e-5 plus one part in a million.
                torch.testing.assert_close(getattr(logps, f"policy_{side}")[b], policy, atol=1e-5, rtol=1e-6)
                torch.testing.assert_close(getattr(logps, f"reference_{side}")[b], reference, atol=1e-5, rtol=1e-6)
                tokens = sum(len(c) for _, c in segments)
                assert getattr(logps, f"{side}_tokens")[b].item() == tokens
    assert dataset.items[1].chosen[0][1] == [400, 500, 2]
    # The logged reference is the sum of the segments' logged log-probs.
    module.use_logged_reference = True
    logged = module.preference_logps(batch)
    torch.testing.assert_close(logged.reference_chosen, torch.tensor([-4.0, -3.0]))
    torch.testing.assert_close(logged.reference_rejected, torch.tensor([-1.5, -8.0]))


def test_step_pairs_score_the_same_with_and_without_a_shared_prefix(tiny):
    model, tokenizer = tiny
    peft_model = _peft_with_nonzero_adapter(model)
    pairs = _step_pairs(3)
    batch = collate_preferences(ExampleDataset(pairs, tokenizer, MAX_PROMPT).items)
    assert batch.shares_prompt
    torch.testing.assert_close(batch.chosen_visits, torch.tensor([3.0, 3.0, 3.0]))
    shared = PreferenceModule(peft_model, DPOLoss(), torch.optim.SGD, shared_prefix=True)
    rows = PreferenceModule(peft_model, DPOLoss(), torch.optim.SGD, shared_prefix=False, rows_per_forward=4)
    with torch.no_grad():
        torch.testing.assert_close(shared.logps(batch), rows.logps(batch), atol=1e-5, rtol=0)


# --- a search node's pairs: its history runs once for all its actions -------------------------


def _node_pairs(goal: str, actions: list[str]) -> list[StepPair]:
    """Every pair of a node's sibling actions (as StepPairBuilder pairs K candidates)."""
    prompt = _messages(f"Goal: {goal}.")
    return [
        StepPair(0, 0, prompt, a, b, [], [], -5.0 - i, -6.0 - j, 1.0, 0.0, 2, 1)
        for (i, a), (j, b) in itertools.combinations(enumerate(actions), 2)
    ]


def _two_nodes() -> list[StepPair]:
    """Nodes of 4 and 3 siblings: 6 + 3 pairs over 2 histories and 7 distinct actions."""
    stick = ["COMMAND: get 2 planks", "COMMAND: jump", "COMMAND: craft 4 sticks", "COMMAND: inventory"]
    torch_ = ["COMMAND: get coal", "COMMAND: look around the room", "COMMAND: craft torch"]
    return _node_pairs("a stick", stick) + _node_pairs("a torch", torch_)


def _dpo(policy: tuple[torch.Tensor, torch.Tensor], reference: tuple[torch.Tensor, torch.Tensor], batch) -> torch.Tensor:
    logps = PreferenceLogps(
        policy_chosen=policy[0], policy_rejected=policy[1], reference_chosen=reference[0],
        reference_rejected=reference[1], chosen_tokens=batch.chosen_tokens, rejected_tokens=batch.rejected_tokens,
    )  # fmt: skip
    return DPOLoss(beta=0.5)(logps).loss()


def test_node_grouped_loss_and_gradients_equal_the_per_pair_computation(tiny):
    model, tokenizer = tiny
    peft_model = _peft_with_nonzero_adapter(model)
    batch = collate_preferences(ExampleDataset(_two_nodes(), tokenizer, MAX_PROMPT).items)
    assert [len(c) for c in batch.by_prompt.completion_ids] == [4, 3]  # each action once
    lora = [p for p in peft_model.parameters() if p.requires_grad]
    module = PreferenceModule(peft_model, DPOLoss(beta=0.5), torch.optim.SGD, shared_prefix=True)
    calls = []  # the decoder's input shapes: a history is (1, its length)
    decoder = peft_model.get_base_model().get_decoder()
    hook = decoder.register_forward_pre_hook(
        lambda _, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    grouped = module.objective(module.preference_logps(batch)).loss()
    hook.remove()
    grouped_grads = torch.autograd.grad(grouped, lora)

    # Before node grouping: each pair's history once for its two actions.
    b, seg = batch.num_pairs, batch.segments
    policy = pair_logprobs(peft_model, seg.prompt_ids[:b], seg.completion_ids[:b], seg.completion_ids[b:])
    with torch.no_grad(), peft_model.disable_adapter():
        reference = pair_logprobs(peft_model, seg.prompt_ids[:b], seg.completion_ids[:b], seg.completion_ids[b:])
    per_pair = _dpo(policy, reference, batch)
    per_pair_grads = torch.autograd.grad(per_pair, lora)

    grouped, per_pair = grouped.item(), per_pair.item()
    assert abs(per_pair - math.log(2)) > 1e-2  # the adapter matters
    assert abs(grouped - per_pair) <= 1e-5
    for ours, theirs in zip(grouped_grads, per_pair_grads, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)
    # Each history ran once for the policy and once for the reference (not once per pair),
    # followed by one batch of its distinct actions.
    histories = [shape for shape in calls if shape[0] == 1]
    assert len(histories) == 4 and len(calls) == 8


def test_bf16_autocast_keeps_the_dpo_loss_within_1e_3_of_fp32_and_reference_and_policy_alike(tiny):
    from lightning.pytorch.plugins.precision import MixedPrecision

    model, tokenizer = tiny
    batch = collate_preferences(ExampleDataset(_two_nodes(), tokenizer, MAX_PROMPT).items)
    # What Trainer(precision="bf16-mixed") runs each training step in.
    bf16 = MixedPrecision("bf16-mixed", "cpu").forward_context

    # A fresh adapter (lora_B = 0): policy and reference are one computation, bit for
    # bit, in bf16 as in fp32, so the loss is exactly log 2 and no rounding enters Delta.
    torch.manual_seed(0)
    fresh = PreferenceModule(get_peft_model(model, _lora()), DPOLoss(beta=0.5), torch.optim.SGD, shared_prefix=True)
    with torch.no_grad(), bf16():
        logps = fresh.preference_logps(batch)
    assert torch.equal(logps.policy_chosen, logps.reference_chosen)
    assert torch.equal(logps.policy_rejected, logps.reference_rejected)
    assert fresh.objective(logps).loss().item() == pytest.approx(math.log(2), abs=1e-7)

    with torch.no_grad():
        for name, param in fresh.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
        full = fresh.objective(fresh.preference_logps(batch)).loss()
        with bf16():
            half = fresh.objective(fresh.preference_logps(batch)).loss()
    assert abs(float(full) - math.log(2)) > 1e-3
    assert abs(float(half) - float(full)) <= 1e-3


def test_fit_in_bf16_mixed_runs_the_forward_in_bf16_and_keeps_the_adapter_fp32(tmp_path, monkeypatch):
    from tests.conftest import fit_tiny_dpo

    # Autocast runs on any CPU; only its speed needs native bf16, which fit requires.
    monkeypatch.setattr(fitting, "native_bf16", lambda accelerator: True)
    model, tokenizer = TinyRandomModel().load()
    outputs = set()  # dtypes of a projection's outputs during training
    model.get_decoder().layers[0].self_attn.q_proj.register_forward_hook(lambda _, __, out: outputs.add(out.dtype))
    peft_model, metrics = fit_tiny_dpo(
        model, tokenizer, _two_nodes(), tmp_path, max_epochs=1, lightning={"precision": "bf16-mixed"},
        shared_prefix=True, max_prompt_tokens=MAX_PROMPT,
    )
    assert outputs == {torch.bfloat16} and math.isfinite(metrics["loss"])
    adapter = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert {v.dtype for v in adapter.values()} == {torch.float32}
    assert all(v.abs().max() > 0 for k, v in adapter.items() if "lora_B" in k)
    merged = peft_model.merge_and_unload()
    assert {p.dtype for p in merged.parameters()} == {torch.float32}


def test_precision_auto_takes_bf16_where_native_and_bf16_is_refused_where_it_would_mislead(monkeypatch, make_cfg):
    from agentq.validation import check_trainer

    def precision(value, *, logged_reference=False):
        return resolve_precision({"accelerator": "cpu", "precision": value}, logged_reference=logged_reference)

    monkeypatch.setattr(fitting, "native_bf16", lambda accelerator: True)
    assert precision("auto")["precision"] == "bf16-mixed"
    assert precision("auto", logged_reference=True)["precision"] == "32-true"
    with pytest.raises(ValueError, match="trainer.use_logged_reference=true takes pi_ref from the log-probs"):
        precision("bf16-mixed", logged_reference=True)
    monkeypatch.setattr(fitting, "native_bf16", lambda accelerator: False)
    assert precision("auto")["precision"] == "32-true"
    assert precision("32-true") == {"accelerator": "cpu", "precision": "32-true"}
    with pytest.raises(ValueError, match="trainer.lightning.precision=bf16-mixed: this CPU has no native bf16"):
        precision("bf16-mixed")
    # Before any model loads, from the run config.
    cfg = make_cfg("+experiment=smoke", "trainer.lightning.precision=bf16-mixed")
    with pytest.raises(ValueError, match="trainer.lightning.precision=bf16-mixed"):
        check_trainer(cfg, kind="preference")
    check_trainer(make_cfg("+experiment=smoke", "trainer.lightning.precision=auto"), kind="preference")


# --- SFT masking ------------------------------------------------------------------------------


def _revision(bad_action: str, good_action: str) -> SFTExample:
    """Agent-R: a bad step (context only), a revision thought, then the good continuation."""
    return SFTExample(
        task_id=0,
        segments=[
            Segment(_messages("Goal: a stick. Step 0."), bad_action, train=False),
            Segment(
                _messages("Goal: a stick. Step 1."),
                "THOUGHT: I realize my previous actions were wrong; I will go back.\nCOMMAND: inventory",
            ),
            Segment(_messages("Goal: a stick. Step 2."), good_action),
        ],
        source="revision",
    )


def _sft_loss(module: SFTModule, tokenizer, examples) -> tuple[float, float]:
    batch = collate_sft(ExampleDataset(examples, tokenizer, MAX_PROMPT).items)
    with torch.no_grad():
        loss = module.objective(module.sequence_logps(batch)).loss().item()
    return loss, batch.num_tokens.sum().item()


def test_masked_segments_carry_no_loss(tiny):
    model, tokenizer = tiny
    module = SFTModule(model, SFTLoss(), torch.optim.SGD, rows_per_forward=2)
    base, tokens = _sft_loss(module, tokenizer, [_revision("COMMAND: jump", "COMMAND: craft 4 sticks")])
    other_bad, other_tokens = _sft_loss(
        module, tokenizer, [_revision("COMMAND: dance wildly around the table", "COMMAND: craft 4 sticks")]
    )
    other_good, _ = _sft_loss(module, tokenizer, [_revision("COMMAND: jump", "COMMAND: get 9 gold ingots")])
    assert other_bad == base and other_tokens == tokens  # the bad step is not scored
    assert abs(other_good - base) > 1e-3  # a trained step is
    # Only the two trained completions are counted (each text + <|im_end|>).
    example = _revision("COMMAND: jump", "COMMAND: craft 4 sticks")
    trained = [s.completion for s in example.segments if s.train]
    assert tokens == sum(len(tokenizer.encode(t, add_special_tokens=False)) + 1 for t in trained)


def test_sft_examples_without_trained_segments_are_dropped(tiny):
    _, tokenizer = tiny
    silent = SFTExample(0, [Segment(_messages("x"), "COMMAND: look", train=False)], source="revision")
    dataset = ExampleDataset([silent, _revision("a", "b")], tokenizer, MAX_PROMPT)
    assert len(dataset) == 1
    with pytest.raises(ValueError, match="no example has a segment to train on"):
        ExampleDataset([silent], tokenizer, MAX_PROMPT)


# --- one fit per example kind ----------------------------------------------------------------


def _step_pairs(n: int) -> list[StepPair]:
    prompt = _messages("Goal: craft a stick.")
    return [
        StepPair(0, 0, prompt, f"COMMAND: get {i} planks", f"COMMAND: jump {i}", [], [], -5.0, -6.0, 1.0, 0.0, 3, 1)
        for i in range(n)
    ]


def _trajectory_pairs(n: int) -> list[TrajectoryPair]:
    return [
        TrajectoryPair(
            i,
            chosen=_trajectory(f"stick {i}", ["COMMAND: get 2 planks", "COMMAND: craft 4 sticks"]),
            rejected=_trajectory(f"stick {i}", ["COMMAND: jump", "COMMAND: look", "COMMAND: jump"]),
            reward_chosen=1.0,
            reward_rejected=0.0,
        )
        for i in range(n)
    ]


def _sft_examples(n: int) -> list[SFTExample]:
    return [_revision(f"COMMAND: jump {i}", "COMMAND: craft 4 sticks") for i in range(n)]


CASES = {
    "step-conservative-shared": (_step_pairs, lambda: ConservativeDPOLoss(beta=0.5), True, {"reward_accuracy"}),
    "step-ipo": (_step_pairs, lambda: IPOLoss(beta=0.5, length_normalize=True), False, {"reward_accuracy"}),
    "trajectory-dpo": (_trajectory_pairs, lambda: DPOLoss(beta=0.5), True, {"reward_accuracy"}),
    "sft": (_sft_examples, SFTLoss, True, {"tokens"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fit_trains_the_adapter_on_each_example_kind(tmp_path, case):
    make, objective, shared_prefix, keys = CASES[case]
    model, tokenizer = TinyRandomModel().load()
    base_before = {k: v.clone() for k, v in model.state_dict().items()}
    peft_model, metrics = fit(
        model,
        tokenizer,
        make(4),
        objective=objective(),
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-2),
        lora=_lora(),
        lightning={"accelerator": "cpu", "max_epochs": 2, "enable_progress_bar": False},
        out_dir=tmp_path,
        batch_size=2,
        max_prompt_tokens=MAX_PROMPT,
        shared_prefix=shared_prefix,
    )
    assert metrics["steps"] == 4 and {"loss"} | keys <= set(metrics)
    assert torch.isfinite(torch.tensor(metrics["loss"]))
    adapter = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert adapter and all("lora_" in k for k in adapter)
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and all(v.abs().max() > 0 for v in lora_b)  # moved from its zero init
    base_after = peft_model.get_base_model().state_dict()
    for key, before in base_before.items():
        after_key = key if key in base_after else key.replace(".weight", ".base_layer.weight")
        assert torch.equal(base_after[after_key], before), key
    if "tokens" in keys:  # 4 examples x 2 trained segments per epoch
        assert metrics["tokens"] > 8


# --- one owner of the kinds: agentq.records.examples ----------------------------------------


def test_every_example_type_has_one_kind_and_one_tag():
    types = [t for kind_types in KINDS.values() for t in kind_types]
    assert sorted(t.__name__ for t in types) == sorted(t.__name__ for t in TAGS.values())
    assert [kind_of(StepPair), kind_of(TrajectoryPair), kind_of(SFTExample)] == ["preference", "preference", "sft"]
    assert kind_of(_sft_examples(1)[0]) == "sft" and kind_of("COMMAND: look") is None
    assert set(PIPELINES) == set(KINDS)


def test_an_objective_takes_its_kind_from_the_input_it_declares():
    class Imitate(Objective):
        def forward(self, logps: SequenceLogps) -> LossOutput:
            return LossOutput(losses=-logps.policy)

    assert Imitate.kind == "sft" and input_of(Imitate()) is SequenceLogps and input_of(DPOLoss) is PreferenceLogps
    with pytest.raises(TypeError, match="forward must take one of"):

        class Untyped(Objective):
            def forward(self, logps) -> LossOutput:
                return LossOutput(losses=logps)


# --- refused before any model work -------------------------------------------------------------


def _fit_without_a_model(examples, objective, **kwargs):
    return fit(
        None, None, examples, objective=objective, optimizer=None, lora=None, lightning={},
        out_dir=None, **kwargs,
    )


@pytest.mark.parametrize(
    ("examples", "objective", "error", "match"),
    [
        (lambda: [], DPOLoss(), ValueError, "no training examples"),
        (lambda: _step_pairs(1) + _trajectory_pairs(1), DPOLoss(), ValueError, "mix"),
        (lambda: _sft_examples(2), DPOLoss(), ValueError, "trains on preference examples but got 2 SFTExample"),
        (lambda: _step_pairs(2), SFTLoss(), ValueError, "trains on sft examples but got 2 StepPair"),
        (lambda: _trajectory_pairs(2), SFTLoss(), ValueError, "trains on sft examples"),
        (lambda: _trajectory_pairs(1), ConservativeDPOLoss(), ValueError, "needs MCTS visit counts"),
        (lambda: ["COMMAND: look"], DPOLoss(), TypeError, "cannot train on"),
        (lambda: _step_pairs(1), torch.nn.MSELoss(), TypeError, "declares kind=None"),
    ],
    ids=["empty", "mixed", "sft-with-dpo", "steps-with-sft", "trajectories-with-sft", "no-visits", "unknown", "no-kind"],
)
def test_mismatches_are_refused(examples, objective, error, match):
    with pytest.raises(error, match=match):
        _fit_without_a_model(examples(), objective)


def test_shared_prefix_with_gradient_checkpointing_is_refused_for_pairs():
    with pytest.raises(ValueError, match="trainer.shared_prefix"):
        _fit_without_a_model(_step_pairs(1), DPOLoss(), shared_prefix=True, gradient_checkpointing=True)
