"""bf16 on CPU (``model.dtype=bfloat16``) with the tiny random model: what holds and what does not.

Log-probs are computed in float32 from bf16 logits (``sample_k``, ``completion_logprobs``
and ``pair_logprobs`` cast before the softmax), so they stay finite and within
bf16's rounding of the fp32 model's. Greedy tokens are *not* always fp32's: the
tiny model's logits are nearly flat (a median top-1/top-2 gap of ~0.02 nats),
and bf16 moves each log-prob by up to ~0.008, so greedy decoding can take the
other branch of a near-tie; the test pins down that it diverges only there.
Timings are in ``benchmarks/bench_precision.py``, never here.
"""

from __future__ import annotations

import pytest
import torch

from agentq.agent.policy import eos_token_ids
from agentq.models import TinyRandomModel, completion_logprobs, pad_pairs, pair_logprobs, sample_k
from agentq.records.examples import StepPair
from tests.conftest import fit_tiny_dpo

MESSAGES = [
    {"role": "system", "content": "You are a web shopping agent."},
    {"role": "user", "content": "Instruction: i need red running shoes under 50 dollars [SEP] Search"},
]
NEW_TOKENS = 16
# bf16 keeps 8 significant bits: a log-prob of a token moves by ~0.01 at most here
# (measured: <= 0.008 on every position of these prompts, ~3e-4 on average).
PER_TOKEN = 0.01


@pytest.fixture(scope="module")
def models():
    """The same seeded weights in fp32 and cast to bf16, and the tokenizer."""
    fp32, tokenizer = TinyRandomModel(seed=0).load()
    bf16, _ = TinyRandomModel(seed=0, dtype="bfloat16").load()
    assert next(bf16.parameters()).dtype == torch.bfloat16
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=False)
    return fp32, bf16, tokenizer, list(prompt)


def _greedy(model, tokenizer, prompt):
    (sample,) = sample_k(
        model, prompt, 1, tokenizer=tokenizer, max_new_tokens=NEW_TOKENS, temperature=0.0,
        eos_token_ids=eos_token_ids(tokenizer),
    )  # fmt: skip
    return sample


def _logp(model, prompt, completion) -> torch.Tensor:
    with torch.no_grad():
        return completion_logprobs(model, *pad_pairs([prompt], [list(completion)], pad_id=0))[0]


def test_bf16_logprobs_are_float32_finite_and_close_to_fp32(models):
    fp32, bf16, tokenizer, prompt = models
    sample = _greedy(fp32, tokenizer, prompt)
    full, half = _logp(fp32, prompt, sample.token_ids), _logp(bf16, prompt, sample.token_ids)
    assert half.dtype == torch.float32 and torch.isfinite(half)
    # Summed over the completion: a softmax taken in bf16 would be off by ~0.06 per token.
    assert abs(float(half - full)) <= PER_TOKEN * len(sample.token_ids)


def test_bf16_sampled_logprob_is_the_one_training_scores(models):
    # The logged reference (sample_k, KV-cached decode) and the training path
    # (pair_logprobs, prompt cache + completions) agree on the same bf16 model.
    _, bf16, tokenizer, prompt = models
    sample = _greedy(bf16, tokenizer, prompt)
    assert torch.isfinite(torch.tensor(sample.logprob))
    chosen, rejected = pair_logprobs(bf16, [prompt], [list(sample.token_ids)], [list(sample.token_ids[:4])])
    assert chosen.dtype == torch.float32
    # The paths compute in other shapes (one token at a time against the KV cache; the whole
    # completion in one forward), so their bf16 roundings differ as bf16 and fp32 do: 0.0039
    # over 16 tokens on an AMD EPYC without native bf16, within 1e-3 on an Intel Xeon. A token
    # scored at the wrong position or id would move the sum by nats (about -10 a token here).
    tolerance = PER_TOKEN * len(sample.token_ids)
    assert float(chosen[0]) == pytest.approx(sample.logprob, abs=tolerance)
    assert float(chosen[0]) == pytest.approx(float(_logp(bf16, prompt, sample.token_ids)), abs=tolerance)
    assert torch.isfinite(rejected).all()


def test_bf16_greedy_follows_fp32_up_to_a_near_tie(models):
    fp32, bf16, tokenizer, prompt = models
    full = _greedy(fp32, tokenizer, prompt).token_ids
    half = _greedy(bf16, tokenizer, prompt).token_ids
    shared = min(len(full), len(half))
    first = next((i for i in range(shared) if full[i] != half[i]), shared)
    if first == shared:  # no divergence: then the completions are the same
        assert full == half
        return
    assert first >= 1, "bf16 changed the very first greedy token"
    # Where bf16 chose differently, fp32 itself rated the two tokens within bf16's error.
    with torch.no_grad():
        logits = fp32(input_ids=torch.tensor([prompt + list(full[:first])])).logits[0, -1]  # (V,)
    logps = torch.log_softmax(logits.float(), dim=-1)
    assert float(logps[full[first]] - logps[half[first]]) <= 2 * PER_TOKEN


def test_lora_dpo_training_on_a_bf16_model(tmp_path):
    """agentq.training.fit (Lightning, precision 32-true) on a bf16 base: the adapter is
    kept in fp32 by peft, trains with finite losses, and the base stays bf16 and untouched."""
    model, tokenizer = TinyRandomModel(seed=0, dtype="bfloat16").load()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    pairs = [
        StepPair(0, i, MESSAGES, f"COMMAND: search[red shoes {i}]", f"COMMAND: click[Buy Now] {i}", [], [],
                 0.0, 0.0, 1.0, 0.0, 1, 1)
        for i in range(4)
    ]  # fmt: skip
    peft_model, metrics = fit_tiny_dpo(model, tokenizer, pairs, tmp_path, max_epochs=2, shared_prefix=True)
    assert metrics["steps"] == 4 and torch.isfinite(torch.tensor(metrics["loss"]))
    lora_b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
    assert lora_b and all(p.dtype == torch.float32 for p in lora_b)
    assert all(float(p.detach().abs().max()) > 0 for p in lora_b)  # moved from their zero init
    after = peft_model.get_base_model().state_dict()
    for key, before in base.items():
        weight = after[key if key in after else key.replace(".weight", ".base_layer.weight")]
        assert weight.dtype == torch.bfloat16 and torch.equal(weight, before), key
