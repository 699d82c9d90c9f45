"""PrefixCache: reusing the previous prompt's KV cache changes nothing but the cost."""

from __future__ import annotations

import pytest
import torch

from agentq.models import TinyRandomModel, sample_k
from agentq.models.prefix_cache import PrefixCache


@pytest.fixture(scope="module")
def tiny():
    return TinyRandomModel().load()


def chat(tokenizer, *turns: str) -> list[int]:
    roles = ["user", "assistant"]
    messages = [{"role": "system", "content": "You are a shopping agent. " * 20}]
    messages += [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)


def test_extending_prompts_match_a_fresh_prefill(tiny):
    model, tokenizer = tiny
    prompts = [
        chat(tokenizer, "Search page. Instruction: a mauve lipstick."),
        chat(tokenizer, "Search page.", "COMMAND: search[mauve lipstick]", "Results page: B01, B02."),
        chat(tokenizer, "Search page.", "COMMAND: search[mauve lipstick]", "Results page: B03."),
        chat(tokenizer, "Another task entirely."),
        chat(tokenizer, "Another task entirely."),  # identical prompt: all but the last token reused
    ]
    cached, fresh = PrefixCache(), PrefixCache(enabled=False)
    for prompt in prompts:
        kwargs = dict(tokenizer=tokenizer, max_new_tokens=12, temperature=0.0, eos_token_ids={2})
        with_cache = sample_k(model, prompt, 2, prefix_cache=cached, **kwargs)
        without = sample_k(model, prompt, 2, prefix_cache=fresh, **kwargs)
        assert [s.token_ids for s in with_cache] == [s.token_ids for s in without]
        for a, b in zip(with_cache, without, strict=True):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
    assert cached.reused_tokens > 0.5 * sum(len(p) for p in prompts)
    assert fresh.reused_tokens == 0


def test_last_logits_equal_a_full_forward(tiny):
    model, tokenizer = tiny
    cache = PrefixCache()
    first = chat(tokenizer, "Search page.", "COMMAND: search[a]", "Results page.")
    second = chat(tokenizer, "Search page.", "COMMAND: search[a]", "Item page.")
    cache.prefill(model, first)
    _, logits = cache.prefill(model, second)
    with torch.no_grad():
        full = model(input_ids=torch.tensor([second])).logits[:, -1]
    torch.testing.assert_close(logits, full, atol=1e-4, rtol=1e-4)
    assert cache.reused_tokens > 0 and cache.ids == second
