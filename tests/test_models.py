"""agentq.models: loading, shared-prefill K sampling, completion log-probs.

Fast tests use TinyRandomModel (random weights, the real SmolLM2 tokenizer,
cached once under ~/.cache/agentq/models). The one slow test converts the
embedded GGUF into a temporary cache and reloads it.
"""

from __future__ import annotations

import hydra.utils
import pytest
import torch
from peft import LoraConfig, get_peft_model

from agentq.models import (
    EmbeddedSmolLM2,
    HFModel,
    TinyRandomModel,
    completion_logprobs,
    pad_pairs,
    pair_logprobs,
    sample_k,
)
from agentq.models.loading import SMOLLM2_TOKENIZER_FOLDER, _write_atomically, smollm2_tokenizer
from agentq.models.sampling import nucleus_filter

EOS = 2  # <|im_end|> in the SmolLM2 vocabulary


@pytest.fixture(scope="module")
def tiny():
    return TinyRandomModel().load()


@pytest.fixture(scope="module")
def prompt(tiny) -> list[int]:
    _, tokenizer = tiny
    messages = [{"role": "user", "content": "Craft a wooden pickaxe. What is your first command?"}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)


def reference_logprobs(model, input_ids, attention_mask, completion_mask) -> torch.Tensor:
    """Independent reference: full logits at every position, shift, mask, sum."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T, V)
    logps = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
    token_logps = logps.gather(2, input_ids[:, 1:, None]).squeeze(2)  # (B, T-1)
    return (token_logps * completion_mask[:, 1:]).sum(dim=1)  # (B,)


# ---------------------------------------------------------------- loading


def test_sources_instantiate_from_config_without_loading(tmp_path):
    cache = str(tmp_path / "never-written")
    sources = [
        hydra.utils.instantiate({"_target_": "agentq.models.EmbeddedSmolLM2", "cache_dir": cache}),
        hydra.utils.instantiate(
            {"_target_": "agentq.models.HFModel", "name_or_path": "org/absent"}
        ),
        hydra.utils.instantiate({"_target_": "agentq.models.TinyRandomModel", "cache_dir": cache}),
    ]
    assert [type(s) for s in sources] == [EmbeddedSmolLM2, HFModel, TinyRandomModel]
    assert sources[1].local_files_only
    assert not (tmp_path / "never-written").exists()


@pytest.mark.parametrize("source", [EmbeddedSmolLM2, TinyRandomModel])
def test_bad_dtype_fails_at_construction_naming_the_key(source):
    with pytest.raises(ValueError, match=rf"{source.__name__}\.dtype='float33'"):
        source(dtype="float33")
    with pytest.raises(ValueError, match=r"HFModel\.dtype='Tensor'"):
        HFModel("x", dtype="Tensor")  # an attribute of torch, but not a dtype


def test_hf_model_loads_a_saved_folder(tmp_path, tiny):
    model, tokenizer = tiny
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = HFModel(str(tmp_path), dtype="bfloat16").load()
    assert not loaded.training and loaded.config.use_cache and loaded.dtype == torch.bfloat16
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight.to(torch.bfloat16))
    assert loaded_tokenizer("get 1 stick").input_ids == tokenizer("get 1 stick").input_ids


def test_hf_model_never_downloads_by_default():
    with pytest.raises(OSError):
        HFModel("agentq-tests/not-in-any-local-cache").load()


def test_tiny_model_is_seeded_ready_and_speaks_smollm2(tiny):
    model, tokenizer = tiny
    assert len(tokenizer) == model.config.vocab_size == 49152
    assert tokenizer.eos_token_id == EOS and tokenizer.pad_token_id is not None
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert not model.training and model.config.use_cache and model.dtype == torch.float32
    assert model.config.max_position_embeddings >= 4096

    rng_before = torch.random.get_rng_state()
    same, _ = TinyRandomModel().load()
    other, _ = TinyRandomModel(seed=1).load()
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # caller's RNG untouched
    weights = model.state_dict()
    assert all(torch.equal(v, same.state_dict()[k]) for k, v in weights.items())
    assert not torch.equal(weights["lm_head.weight"], other.state_dict()["lm_head.weight"])


def test_tiny_model_dtype_is_applied():
    model, _ = TinyRandomModel(dtype="bfloat16").load()
    assert model.dtype == torch.bfloat16


def test_tokenizer_extraction_is_cached(tmp_path, tiny):
    _, reference = tiny
    extracted = smollm2_tokenizer(tmp_path)
    assert (tmp_path / SMOLLM2_TOKENIZER_FOLDER / "tokenizer.json").is_file()
    reloaded = smollm2_tokenizer(tmp_path)
    text = "<|im_start|>user\nget 2 oak logs<|im_end|>\n"
    assert extracted(text).input_ids == reloaded(text).input_ids == reference(text).input_ids
    assert [p.name for p in tmp_path.iterdir()] == [SMOLLM2_TOKENIZER_FOLDER]


def test_interrupted_cache_write_leaves_nothing(tmp_path):
    def write(folder):
        (folder / "half.bin").write_bytes(b"x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _write_atomically(tmp_path / "cache", write)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- sampling


def test_greedy_k_samples_equal_generate(tiny, prompt):
    model, tokenizer = tiny
    samples = sample_k(
        model,
        prompt,
        3,
        tokenizer=tokenizer,
        max_new_tokens=12,
        temperature=0.0,
        eos_token_ids={EOS},
    )
    ids = torch.tensor([prompt])
    expected = model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12
    )[0, len(prompt) :].tolist()
    assert len(set(samples)) == 1
    assert list(samples[0].token_ids) == expected
    assert samples[0].text == tokenizer.decode(expected, skip_special_tokens=True)


def test_seeded_sampling_is_reproducible(tiny, prompt):
    model, tokenizer = tiny

    def draw(seed):
        return sample_k(
            model,
            prompt,
            4,
            tokenizer=tokenizer,
            max_new_tokens=8,
            temperature=1.0,
            top_p=0.95,
            eos_token_ids={EOS},
            generator=torch.Generator().manual_seed(seed),
        )

    first = draw(0)
    assert draw(0) == first
    assert draw(1) != first
    assert len({s.token_ids for s in first}) == 4  # near-uniform random model: distinct draws


def test_k1_and_max_new_tokens(tiny, prompt):
    model, tokenizer = tiny
    (sample,) = sample_k(
        model,
        prompt,
        1,
        tokenizer=tokenizer,
        max_new_tokens=5,
        temperature=0.7,
        eos_token_ids={EOS},
        generator=torch.Generator().manual_seed(0),
    )
    assert len(sample.token_ids) == 5 and not sample.finished
    (one,) = sample_k(
        model,
        prompt,
        1,
        tokenizer=tokenizer,
        max_new_tokens=1,
        temperature=0.0,
        eos_token_ids={EOS},
    )
    assert len(one.token_ids) == 1


def test_stops_on_eos_and_keeps_it_in_ids_not_text(tiny, prompt):
    model, tokenizer = tiny
    kwargs = dict(tokenizer=tokenizer, max_new_tokens=10, temperature=0.0)
    greedy = sample_k(model, prompt, 2, eos_token_ids={EOS}, **kwargs)[0].token_ids
    stop = greedy[3]  # pretend the 4th greedy token is an end token
    for sample in sample_k(model, prompt, 2, eos_token_ids={EOS, stop}, **kwargs):
        assert sample.finished
        assert sample.token_ids == greedy[: greedy.index(stop) + 1]
        assert sample.text == tokenizer.decode(sample.token_ids[:-1], skip_special_tokens=True)


def test_finished_rows_leave_the_batch_without_disturbing_the_rest(tiny, prompt):
    """When one sequence stops, the others keep the right KV rows: their log-probs still
    match an independent full forward pass."""
    model, tokenizer = tiny

    def draw(eos_ids):
        return sample_k(
            model,
            prompt,
            4,
            tokenizer=tokenizer,
            max_new_tokens=8,
            temperature=1.0,
            eos_token_ids=eos_ids,
            generator=torch.Generator().manual_seed(3),
        )

    free = draw({EOS})
    stop = free[1].token_ids[2]
    samples = draw({EOS, stop})
    assert samples[1].finished and samples[1].token_ids == free[1].token_ids[:3]
    assert any(not s.finished for s in samples)
    for s, f in zip(samples, free, strict=True):
        assert s.token_ids[:3] == f.token_ids[:3]  # identical draws while all four were alive
        assert s.finished == (stop in s.token_ids)
        assert len(s.token_ids) == 8 or s.finished
    batch = pad_pairs([prompt] * 4, [s.token_ids for s in samples], pad_id=EOS)
    expected = completion_logprobs(model, *batch)
    assert torch.allclose(torch.tensor([s.logprob for s in samples]), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize(("temperature", "top_p"), [(0.0, 1.0), (1.0, 1.0), (0.7, 0.9), (1.5, 1.0)])
def test_sample_logprob_is_raw_joint_loglik(tiny, prompt, temperature, top_p):
    """The stored behaviour log-prob is log pi under temperature 1, whatever drew the sample."""
    model, tokenizer = tiny
    samples = sample_k(
        model,
        prompt,
        3,
        tokenizer=tokenizer,
        max_new_tokens=10,
        temperature=temperature,
        top_p=top_p,
        eos_token_ids={EOS},
        generator=torch.Generator().manual_seed(0),
    )
    batch = pad_pairs([prompt] * 3, [s.token_ids for s in samples], pad_id=EOS)
    expected = completion_logprobs(model, *batch)
    assert torch.allclose(torch.tensor([s.logprob for s in samples]), expected, atol=1e-4, rtol=0)


def test_tiny_nucleus_is_greedy(tiny, prompt):
    model, tokenizer = tiny
    kwargs = dict(tokenizer=tokenizer, max_new_tokens=6, eos_token_ids={EOS})
    greedy = sample_k(model, prompt, 1, temperature=0.0, **kwargs)
    nucleus = sample_k(
        model,
        prompt,
        3,
        temperature=1.0,
        top_p=1e-6,
        generator=torch.Generator().manual_seed(0),
        **kwargs,
    )
    assert {s.token_ids for s in nucleus} == {greedy[0].token_ids}


def test_nucleus_filter_by_hand():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    assert torch.equal(nucleus_filter(probs, 0.5), torch.tensor([[0.0, 0.5, 0.0, 0.0]]))
    assert torch.equal(nucleus_filter(probs, 0.6), torch.tensor([[0.0, 0.5, 0.0, 0.3]]))
    assert torch.equal(nucleus_filter(probs, 0.9), torch.tensor([[0.15, 0.5, 0.0, 0.3]]))
    assert torch.equal(nucleus_filter(probs, 1.0), probs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(k=0), "k must be >= 1"),
        (dict(max_new_tokens=0), "max_new_tokens must be >= 1"),
        (dict(temperature=-0.1), "temperature must be >= 0"),
        (dict(temperature=float("nan")), "temperature must be >= 0"),
        (dict(top_p=0.0), r"top_p must be in \(0, 1\]"),
        (dict(prompt_ids=[]), "prompt_ids is empty"),
    ],
)
def test_sample_k_validates_arguments(tiny, prompt, kwargs, message):
    model, tokenizer = tiny
    args = dict(prompt_ids=prompt, k=2, max_new_tokens=4, temperature=1.0, top_p=1.0) | kwargs
    with pytest.raises(ValueError, match=message):
        sample_k(model, tokenizer=tokenizer, eos_token_ids={EOS}, **args)


# ---------------------------------------------------------------- log-probs


PROMPTS = [[1, 520, 9531, 198], [1, 4093, 198, 1780, 314, 260], [1, 33, 34]]
COMPLETIONS = [[3736, 33163, 1005, 2], [42, 2], [7, 8, 9, 10, 11, 12, 13]]


def test_pad_pairs_by_hand():
    input_ids, attention_mask, completion_mask = pad_pairs(
        [[5, 6], [7]], [[8], [9, 10, 11]], pad_id=0
    )
    assert input_ids.tolist() == [[5, 6, 8, 0], [7, 9, 10, 11]]
    assert attention_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert completion_mask.tolist() == [[0, 0, 1, 0], [0, 1, 1, 1]]
    with pytest.raises(ValueError, match="2 prompts but 1 completions"):
        pad_pairs([[5], [6]], [[7]], pad_id=0)
    with pytest.raises(ValueError, match="at least one token"):
        pad_pairs([[]], [[7]], pad_id=0)


def test_completion_logprobs_match_full_logits_with_padding(tiny):
    model, _ = tiny
    batch = pad_pairs(PROMPTS, COMPLETIONS, pad_id=EOS)
    with torch.no_grad():
        ours = completion_logprobs(model, *batch)
        expected = reference_logprobs(model, *batch)
        # Each row alone (no padding anywhere) must give the same value.
        alone = torch.cat(
            [
                completion_logprobs(model, *pad_pairs([p], [c], EOS))
                for p, c in zip(PROMPTS, COMPLETIONS, strict=True)
            ]
        )
    assert ours.shape == (3,)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=0)
    assert torch.allclose(ours, alone, atol=1e-4, rtol=0)


def test_completion_logprobs_gradients_match_reference(tiny):
    model, _ = tiny
    batch = pad_pairs(PROMPTS, COMPLETIONS, pad_id=EOS)
    params = [model.lm_head.weight, model.model.layers[0].self_attn.q_proj.weight]

    def grads(fn):
        model.zero_grad()
        fn(model, *batch).sum().backward()
        return [p.grad.clone() for p in params]

    ours, expected = grads(completion_logprobs), grads(reference_logprobs)
    model.zero_grad(set_to_none=True)
    for g, r in zip(ours, expected, strict=True):
        assert g.abs().sum() > 0
        assert torch.allclose(g, r, atol=1e-5, rtol=1e-4)


def test_completion_mask_on_first_token_is_rejected(tiny):
    model, _ = tiny
    input_ids, attention_mask, completion_mask = pad_pairs([[1, 2]], [[3]], EOS)
    completion_mask[0, 0] = 1
    with pytest.raises(ValueError, match=r"completion_mask\[:, 0\]"):
        completion_logprobs(model, input_ids, attention_mask, completion_mask)


# peft 0.21 reads `is_gradient_checkpointing`, which transformers 5.23 deprecates; not ours to fix.
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_completion_logprobs_with_lora_and_disabled_adapter():
    model, _ = TinyRandomModel().load()  # own copy: peft edits modules in place
    batch = pad_pairs(PROMPTS, COMPLETIONS, pad_id=EOS)
    with torch.no_grad():
        base = reference_logprobs(model, *batch)

    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])
    )
    with torch.no_grad():
        # B starts at zero and A at the global RNG's draw: set both from fixed seeds, so the
        # adapter moves every completion by the same amount in every run (with A left to the
        # global RNG the smallest move depended on the tests run before, down to 0.024).
        for i, (name, param) in enumerate(peft_model.named_parameters()):
            if "lora_" in name:
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(i))

    lora = completion_logprobs(peft_model, *batch)
    assert lora.requires_grad  # LoRA parameters are trainable through it
    assert torch.allclose(lora, reference_logprobs(peft_model, *batch), atol=1e-5, rtol=0)
    assert (lora - base).abs().min() > 1e-2
    with peft_model.disable_adapter(), torch.no_grad():
        assert torch.allclose(completion_logprobs(peft_model, *batch), base, atol=1e-5, rtol=0)


# peft 0.21 reads `is_gradient_checkpointing`, which transformers 5.23 deprecates; not ours to fix.
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_pair_logprobs_with_a_shared_prefix_equal_the_padded_rows_and_their_gradients():
    model, _ = TinyRandomModel().load()
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    prompts = PROMPTS[:2]
    chosen, rejected = COMPLETIONS[:2], [COMPLETIONS[2], COMPLETIONS[0]]  # unequal lengths
    lora = [p for n, p in peft_model.named_parameters() if p.requires_grad]

    shared_c, shared_r = pair_logprobs(peft_model, prompts, chosen, rejected)
    shared_grads = torch.autograd.grad((shared_c - 2 * shared_r).sum(), lora)

    rows = completion_logprobs(peft_model, *pad_pairs(prompts * 2, chosen + rejected, pad_id=EOS))
    row_grads = torch.autograd.grad((rows[:2] - 2 * rows[2:]).sum(), lora)

    torch.testing.assert_close(torch.cat([shared_c, shared_r]), rows, atol=1e-4, rtol=0)
    for a, b in zip(shared_grads, row_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


# ---------------------------------------------------------------- the embedded model


@pytest.mark.slow
def test_embedded_smollm2_converts_once_then_reloads(tmp_path, monkeypatch):
    source = EmbeddedSmolLM2(cache_dir=str(tmp_path))
    model, tokenizer = source.load()  # converts the GGUF into tmp_path
    assert [p.name for p in tmp_path.iterdir()] == [source.folder.name]
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert not model.training and model.dtype == torch.float32

    def no_conversion():
        raise AssertionError("the cached folder should have been used")

    monkeypatch.setattr(source, "convert", no_conversion)
    reloaded, tokenizer = source.load()
    assert all(torch.equal(v, reloaded.state_dict()[k]) for k, v in model.state_dict().items())

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    (answer,) = sample_k(
        reloaded,
        prompt,
        1,
        tokenizer=tokenizer,
        max_new_tokens=24,
        temperature=0.0,
        eos_token_ids={tokenizer.eos_token_id},
    )
    assert answer.text.strip()
    assert "Paris" in answer.text

    samples = sample_k(
        reloaded,
        prompt,
        3,
        tokenizer=tokenizer,
        max_new_tokens=24,
        temperature=1.0,
        eos_token_ids={tokenizer.eos_token_id},
        generator=torch.Generator().manual_seed(0),
    )
    batch = pad_pairs([prompt] * 3, [s.token_ids for s in samples], tokenizer.pad_token_id)
    with torch.no_grad():
        expected = completion_logprobs(reloaded, *batch)
    assert torch.allclose(torch.tensor([s.logprob for s in samples]), expected, atol=1e-4, rtol=0)
