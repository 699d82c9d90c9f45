"""PrefixCache: reusing earlier prompts' KV caches changes nothing but the cost."""

from __future__ import annotations

import pytest
import torch

from agentq.critic.ranking import LLMRankingCritic
from agentq.models import TinyRandomModel, sample_k
from agentq.models.prefix_cache import Preambles, PrefixCache
from agentq.records.history import History


@pytest.fixture(scope="module")
def tiny():
    return TinyRandomModel().load()


def chat(tokenizer, *turns: str) -> list[int]:
    roles = ["user", "assistant"]
    messages = [{"role": "system", "content": "You are a shopping agent. " * 20}]
    messages += [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)


def full_forward(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[:, -1]  # (1, V)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def tree_prompts(tokenizer) -> list[list[int]]:
    """Prompts in the order a search asks for them: root, children, grandchildren,
    back up to a sibling, the root again, a prompt leaving a cached segment half-way,
    and one that is a strict prefix of a cached prompt."""
    task = "Instruction: a mauve lipstick under 20 dollars. Search page."
    search = (
        "COMMAND: search[mauve lipstick]",
        "Results page: B01 velvet mauve, B02 matte rose, B03 gloss.",
    )
    other = ("COMMAND: search[lipstick]", "Results page: B07 red, B08 nude.")
    root = chat(tokenizer, task)
    child_a = chat(tokenizer, task, *search)
    child_b = chat(tokenizer, task, *other)
    grand_a1 = chat(
        tokenizer, task, *search, "COMMAND: click[B01]", "Item page: velvet mauve, $12."
    )
    grand_a2 = chat(tokenizer, task, *search, "COMMAND: click[B02]", "Item page: matte rose, $18.")
    # Same search, a different results page: leaves child_a's segment mid-way.
    mid_a = chat(tokenizer, task, search[0], "Results page: B01 velvet mauve, B09 sheer plum.")
    return [
        root,
        child_a,
        grand_a1,
        child_b,
        grand_a2,
        root,
        child_b,
        mid_a,
        grand_a1,
        grand_a1[:-7],
    ]


def test_tree_of_prompts_matches_a_fresh_prefill_and_reuses_every_shared_prefix(tiny):
    model, tokenizer = tiny
    prompts = tree_prompts(tokenizer)
    tree, last, fresh = PrefixCache(), PrefixCache(max_leaves=1), PrefixCache(enabled=False)
    for prompt in prompts:
        expected = full_forward(model, prompt)
        for cache in (tree, last):
            _, logits = cache.prefill(model, prompt)
            torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
        fresh.prefill(model, prompt)
    # Nothing was evicted, so each prompt reuses its longest common prefix with any
    # earlier prompt (the last token is always recomputed). One leaf keeps the last
    # prompt's path: at least its common prefix with the previous prompt (more when
    # the previous prompt ended inside a longer cached segment).
    best = [
        max((common_prefix(p, q) for q in prompts[:i]), default=0) for i, p in enumerate(prompts)
    ]
    previous = [common_prefix(p, prompts[i - 1]) if i else 0 for i, p in enumerate(prompts)]
    assert tree.reused_tokens == sum(min(n, len(p) - 1) for n, p in zip(best, prompts, strict=True))
    assert last.reused_tokens >= sum(
        min(n, len(p) - 1) for n, p in zip(previous, prompts, strict=True)
    )
    assert tree.reused_tokens > last.reused_tokens
    total = sum(len(p) for p in prompts)
    assert tree.reused_tokens + tree.computed_tokens == total
    assert tree.evicted_tokens == 0
    # Every distinct token position is stored once: the tree's size is that of the prompts' trie.
    distinct = {tuple(p[:i]) for p in prompts for i in range(1, len(p) + 1)}
    assert tree.num_tokens == len(distinct)
    assert fresh.reused_tokens == 0 and fresh.computed_tokens == total and fresh.num_tokens == 0


def test_greedy_samples_equal_the_uncached_path(tiny):
    model, tokenizer = tiny
    cached, plain = PrefixCache(), PrefixCache(enabled=False)
    for prompt in tree_prompts(tokenizer):
        kwargs = dict(tokenizer=tokenizer, max_new_tokens=12, temperature=0.0, eos_token_ids={2})
        with_cache = sample_k(model, prompt, 2, prefix_cache=cached, **kwargs)
        without = sample_k(model, prompt, 2, prefix_cache=plain, **kwargs)
        assert [s.token_ids for s in with_cache] == [s.token_ids for s in without]
        for a, b in zip(with_cache, without, strict=True):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
    assert cached.reused_tokens > 0.5 * plain.computed_tokens


def test_returned_cache_does_not_alias_the_tree(tiny):
    model, tokenizer = tiny
    parent = chat(tokenizer, "Search page.", "COMMAND: search[a]", "Results page.")
    child = chat(
        tokenizer,
        "Search page.",
        "COMMAND: search[a]",
        "Results page.",
        "COMMAND: click[B01]",
        "Item.",
    )
    cache = PrefixCache()
    returned, _ = cache.prefill(model, parent)
    for layer in returned.layers:  # a caller scribbling over its copy in place
        layer.keys.zero_()
        layer.values.fill_(7.0)
    returned.batch_repeat_interleave(3)
    for prompt in (parent, child):
        _, logits = cache.prefill(model, prompt)
        torch.testing.assert_close(logits, full_forward(model, prompt), atol=1e-4, rtol=1e-4)
    assert cache.reused_tokens >= 2 * len(parent) - 1


def test_bound_evicts_least_recently_used_leaves_and_keeps_the_shared_prefix(tiny):
    model, tokenizer = tiny
    a, b, c = (
        chat(tokenizer, f"Results page {i}: {item}.")
        for i, item in enumerate(["boots", "socks", "vest"])
    )
    shared = min(common_prefix(a, b), common_prefix(a, c), common_prefix(b, c))
    assert shared > 100  # the system message
    cache = PrefixCache(
        max_tokens=len(a) + len(b) - common_prefix(a, b)
    )  # a and b fit, not c as well
    for prompt in (a, b):
        cache.prefill(model, prompt)
    assert cache.num_tokens == cache.max_tokens and cache.evicted_tokens == 0
    cache.prefill(model, c)
    assert cache.num_tokens <= cache.max_tokens
    assert cache.evicted_tokens > 0
    # a's leaf (least recently used) went; the shared prefix, b and the prompt just used stay.
    assert shared <= cache.cached_prefix(a) < len(a)
    assert cache.cached_prefix(b) == len(b) and cache.cached_prefix(c) == len(c)
    # Using b again makes c the oldest leaf.
    cache.prefill(model, b)
    cache.prefill(model, a)
    assert cache.cached_prefix(a) == len(a) and cache.cached_prefix(b) == len(b)
    assert shared <= cache.cached_prefix(c) < len(c)
    _, logits = cache.prefill(model, c)
    torch.testing.assert_close(logits, full_forward(model, c), atol=1e-4, rtol=1e-4)


def test_a_prompt_beyond_the_bound_is_served_but_not_stored(tiny):
    model, tokenizer = tiny
    prompt = chat(tokenizer, "Search page.")
    cache = PrefixCache(max_tokens=len(prompt) - 1)
    for _ in range(2):
        _, logits = cache.prefill(model, prompt)
        torch.testing.assert_close(logits, full_forward(model, prompt), atol=1e-4, rtol=1e-4)
    assert cache.num_tokens == 0 and cache.reused_tokens == 0


def test_another_model_clears_the_tree(tiny):
    model, tokenizer = tiny
    other, _ = TinyRandomModel(seed=1).load()
    prompt = chat(tokenizer, "Search page.")
    cache = PrefixCache()
    cache.prefill(model, prompt)
    _, logits = cache.prefill(other, prompt)
    torch.testing.assert_close(logits, full_forward(other, prompt), atol=1e-4, rtol=1e-4)
    assert cache.reused_tokens == 0


def test_ranking_critic_ranks_as_without_the_cache(tiny):
    from agentq.records.action import Candidate

    model, tokenizer = tiny
    history = History(
        "Instruction: i need a mauve lipstick under 20 dollars.\n[Back to Search]\nPage 1 (Total results: 30)\n"
        + "\n".join(f"[B0{i}] lipstick shade {i}, long lasting, $1{i}.99" for i in range(8)),
        previous=("COMMAND: search[mauve lipstick]",),
    )
    commands = [f"click[b0{i}]" for i in range(6)] + ["next >", "back to search"]
    candidates = [Candidate(text=f"COMMAND: {c}", command=c) for c in commands]
    cached = LLMRankingCritic(model, tokenizer)
    plain = LLMRankingCritic(model, tokenizer, reuse_prefix_cache=False)
    for subset in (candidates, candidates[:3], candidates[2:7]):
        assert cached.score(history, subset) == plain.score(history, subset)
    # Later rounds of a ranking, and later rankings at the node, run only the listing.
    assert cached.prefix_cache.reused_tokens > 2 * cached.prefix_cache.computed_tokens
    assert plain.prefix_cache.reused_tokens == 0


class CountingModel(torch.nn.Module):
    """The model, counting the positions it computes."""

    def __init__(self, model):
        super().__init__()
        self.model, self.positions = model, 0

    def forward(self, input_ids, **kwargs):
        self.positions += input_ids.shape[1]
        return self.model(input_ids=input_ids, **kwargs)

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()


def test_preambles_are_computed_once_and_serve_every_tasks_first_prompt(tiny):
    model, tokenizer = tiny
    counting = CountingModel(model)
    system = chat(tokenizer)[:-3]  # the system turn, without the opened assistant turn
    preambles = Preambles([system, system[:10]])
    tasks = [chat(tokenizer, f"Instruction: task {i}. Search page.") for i in range(3)]
    assert all(t[: len(system)] == system for t in tasks)
    caches = [PrefixCache(preambles=preambles) for _ in tasks]  # one per lane
    for cache, ids in zip(caches, tasks, strict=True):
        cache.clear()  # a new task: the tree is empty, the preambles stay
        _, logits = cache.prefill(counting, ids)
        torch.testing.assert_close(logits, full_forward(model, ids), rtol=1e-4, atol=1e-4)
        assert cache.reused_tokens == len(system)
    # The preamble ran once, alone; each task ran only its own tokens.
    assert counting.positions == len(system) + sum(len(t) - len(system) for t in tasks)
    # Whichever cache computed it, a task's logits are the same computation.
    again = PrefixCache(preambles=preambles).prefill(counting, tasks[1])[1]
    assert torch.equal(again, PrefixCache(preambles=preambles).prefill(counting, tasks[1])[1])


def test_a_prompt_without_a_preamble_and_another_model_get_no_stale_keys(tiny):
    model, tokenizer = tiny
    system = chat(tokenizer)[:-3]
    preambles = Preambles([system])
    other_prompt = list(reversed(system)) + [5, 6]
    cache = PrefixCache(preambles=preambles)
    cache.prefill(model, other_prompt)
    assert cache.reused_tokens == 0
    other = TinyRandomModel(seed=1).load()[0]
    ids = chat(tokenizer, "Instruction: a lamp.")
    PrefixCache(preambles=preambles).prefill(model, ids)
    _, logits = PrefixCache(preambles=preambles).prefill(other, ids)
    torch.testing.assert_close(logits, full_forward(other, ids), rtol=1e-4, atol=1e-4)
