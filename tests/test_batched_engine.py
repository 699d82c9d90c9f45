"""The HF engine with shared decode steps (``engine=hf_batched``): a shared step computes
each request's own forward, a request's draws do not depend on the requests beside it
(bitwise: every weight product has the same number of rows), it decodes what the
sequential HF engine decodes, only its computing thread holds an OpenMP team, and what it
cannot serve is refused."""

import copy
import threading
import time

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from agentq.agent.constrained import CommandConstraint, TokenTable
from agentq.components import IncompatibleConfig, build
from agentq.models import TinyRandomModel
from agentq.models.batched_engine import BatchedHFEngine
from agentq.models.engine import HFEngine, Serialized
from agentq.models.openmp import release_openmp_team
from agentq.models.ragged import check_supported, decode_step
from tests.test_engines import RESULTS_PAGE, at_once, prompts, raw_logprob, serve_other_weights
from tests.test_openmp import in_thread, needs_teams, os_threads, parallel_op, team_of_own


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = TinyRandomModel().load()
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def engine(tiny):
    model, tokenizer = tiny
    engine = BatchedHFEngine(model, tokenizer, rows=4)
    yield engine
    engine.close()


def caches(model, lengths: list[int], rows: list[int], seed: int = 0):
    """Prefilled caches of random prompts (``rows[i]`` copies of the i-th) and next ids."""
    g = torch.Generator().manual_seed(seed)
    out = []
    with torch.no_grad():
        for n, r in zip(lengths, rows, strict=True):
            cache = model(input_ids=torch.randint(0, 1000, (1, n), generator=g), use_cache=True).past_key_values
            cache.batch_repeat_interleave(r)
            out.append((cache, torch.randint(0, 1000, (r,), generator=g)))
    return out


def forward(model, cache, ids):
    with torch.no_grad():
        return model(input_ids=ids[:, None], past_key_values=copy.deepcopy(cache), use_cache=True).logits[:, -1]


def test_a_shared_step_is_each_requests_own_forward(tiny):
    model, _ = tiny
    requests = caches(model, [30, 50, 17, 80, 5], [1, 3, 2, 1, 2])
    expected = [forward(model, cache, ids) for cache, ids in requests]
    for (cache, ids), want in zip(requests, expected, strict=True):
        [alone] = decode_step(model, [(copy.deepcopy(cache), ids)])
        assert torch.equal(alone, want)  # one request, no padding: the model's forward itself
    lengths = [c.get_seq_length() for c, _ in requests]
    shared = decode_step(model, [(copy.deepcopy(c), ids) for c, ids in requests], rows=4)
    for got, want in zip(shared, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # The caller's caches grow by the token run (each keeps its own length).
    copies = [(copy.deepcopy(c), ids) for c, ids in requests]
    decode_step(model, copies, rows=4)
    assert [c.get_seq_length() for c, _ in copies] == [n + 1 for n in lengths]


def test_a_run_of_several_tokens_is_the_models_forward_of_them_beside_one_token_steps(tiny):
    """A jump-forward run (1, T) attends causally to its own tokens, whatever runs beside it."""
    model, _ = tiny
    (run_cache, _), *others = caches(model, [40, 30, 60], [1, 2, 1], seed=1)
    run = torch.randint(0, 1000, (1, 70), generator=torch.Generator().manual_seed(2))  # past GROW: the buffer regrows
    with torch.no_grad():
        want = model(input_ids=run, past_key_values=copy.deepcopy(run_cache), use_cache=True).logits  # (1, 70, V)
    [alone] = decode_step(model, [(copy.deepcopy(run_cache), run)])
    assert alone.shape == want.shape
    torch.testing.assert_close(alone, want, rtol=1e-5, atol=1e-5)
    grown = copy.deepcopy(run_cache)
    mixed = decode_step(model, [others[0], (grown, run), others[1]], rows=4)
    torch.testing.assert_close(mixed[1], want, rtol=1e-5, atol=1e-5)
    assert torch.equal(mixed[1], decode_step(model, [(copy.deepcopy(run_cache), run)], rows=4)[0])  # bitwise
    assert grown.get_seq_length() == 40 + 70
    # The cache it leaves behind serves the next step as the model's own would.
    after = torch.tensor([5])
    torch.testing.assert_close(decode_step(model, [(grown, after)])[0], forward_after(model, run_cache, run, after), rtol=1e-5, atol=1e-5)


def forward_after(model, cache, run, after):
    with torch.no_grad():
        cache = copy.deepcopy(cache)
        model(input_ids=run, past_key_values=cache, use_cache=True)
        return model(input_ids=after[:, None], past_key_values=cache, use_cache=True).logits[:, -1]


def test_a_requests_logits_do_not_depend_on_its_neighbours_or_its_place(tiny):
    model, _ = tiny
    requests = caches(model, [30, 50, 17, 80, 5, 44, 12, 61], [1, 3, 2, 1, 1, 3, 1, 2])
    alone = [decode_step(model, [(copy.deepcopy(c), ids)], rows=4)[0] for c, ids in requests]
    together = decode_step(model, [(copy.deepcopy(c), ids) for c, ids in requests], rows=4)
    backwards = decode_step(model, [(copy.deepcopy(c), ids) for c, ids in reversed(requests)], rows=4)[::-1]
    assert all(torch.equal(a, b) for a, b in zip(alone, together, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(alone, backwards, strict=True))
    # Without fixed rows the products change shape with the batch: not promised bitwise.
    assert decode_step(model, [(copy.deepcopy(c), ids) for c, ids in requests])[0].shape == alone[0].shape


def draw_with(engine, constrained: bool):
    table = TokenTable(engine.tokenizer)

    def draw(i: int, ids: list[int]):
        constraint = CommandConstraint(table, RESULTS_PAGE, eos_token_ids={2}, max_new_tokens=40) if constrained else None
        samples = engine.sample(ids, 1 + i % 3, max_new_tokens=40 if constrained else 12, temperature=1.0, top_p=1.0,
                                eos_token_ids={2}, generator=torch.Generator().manual_seed(i), constraint=constraint)
        return [(s.token_ids, s.logprob, s.text, s.finished) for s in samples]

    return draw


@pytest.mark.parametrize("constrained", [False, True])
def test_requests_in_flight_together_draw_what_they_draw_alone(tiny, engine, constrained):
    _, tokenizer = tiny
    draw = draw_with(engine, constrained)
    requests = prompts(tokenizer, 8)
    alone = [draw(i, ids) for i, ids in enumerate(requests)]
    assert at_once(draw, requests) == alone  # tokens, log-probs and texts, bitwise
    assert len({s[0] for draws in alone for s in draws}) > 8  # the seeds do draw different samples


def test_it_decodes_what_the_sequential_engine_decodes_with_the_trainers_log_probs(tiny, engine):
    model, tokenizer = tiny
    hf = HFEngine(model, tokenizer)
    for ids in prompts(tokenizer, 6):
        [a] = hf.sample(ids, 1, max_new_tokens=16, temperature=0.0, top_p=1.0, eos_token_ids={2})
        [b] = engine.sample(ids, 1, max_new_tokens=16, temperature=0.0, top_p=1.0, eos_token_ids={2})
        assert b.token_ids == a.token_ids and b.text == a.text
        assert b.logprob == pytest.approx(raw_logprob(model, ids, b.token_ids), abs=1e-4)


def test_the_profile_counts_the_tokens_each_kind_of_call_ran(tiny):
    model, tokenizer = tiny
    engine = BatchedHFEngine(model, tokenizer, rows=4)
    try:
        ids = prompts(tokenizer, 1)[0]
        samples = engine.sample(ids, 3, max_new_tokens=8, temperature=1.0, top_p=1.0, eos_token_ids=set(),
                                generator=torch.Generator().manual_seed(0))  # fmt: skip
        tokens = engine.profile.summary()["tokens"]
        # One prefill of the whole prompt (no prompt cache); every token after the first
        # was run by a shared step (the last one drawn is never run).
        assert tokens["prefill"] == len(ids)
        assert tokens["shared_steps"] == sum(len(s.token_ids) - 1 for s in samples) == 3 * 7
        assert engine.profile.steps == 7 and engine.profile.summary()["rows_per_step"] == 3
    finally:
        engine.close()


def test_the_critics_forwards_run_on_the_engines_thread_between_its_steps(tiny, engine):
    model, tokenizer = tiny
    threads = []

    def forward_on_thread(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return model(*args, **kwargs)

    critic = Serialized(forward_on_thread, engine.run)
    ids = torch.tensor([prompts(tokenizer, 1)[0]])

    def draw(i, request):
        if i == 0:
            with torch.no_grad():
                return critic(input_ids=ids).logits.shape
        return engine.sample(request, 2, max_new_tokens=8, temperature=1.0, top_p=1.0, eos_token_ids={2},
                             generator=torch.Generator().manual_seed(i))

    results = at_once(draw, prompts(tokenizer, 4))
    assert results[0] == (1, ids.shape[1], model.config.vocab_size) and threads == ["hf_batched engine"]


def test_a_failing_request_fails_alone(tiny, engine):
    _, tokenizer = tiny
    [ids] = prompts(tokenizer, 1)
    with pytest.raises(ValueError, match="k must be >= 1"):
        engine.sample(ids, 0, max_new_tokens=4, temperature=0.0, top_p=1.0, eos_token_ids={2})
    [sample] = engine.sample(ids, 1, max_new_tokens=4, temperature=0.0, top_p=1.0, eos_token_ids={2})
    assert len(sample.token_ids) >= 1


def test_serving_new_weights_changes_what_is_decoded(tiny):
    model, tokenizer = tiny
    [ids] = prompts(tokenizer, 1)
    engine = BatchedHFEngine(model, tokenizer)
    try:
        before, after, expected = serve_other_weights(engine, tokenizer, ids)
    finally:
        engine.close()
    assert after != before and after[0].token_ids == expected.token_ids


@needs_teams
@pytest.mark.parametrize("handing", ["request", "serve"])
def test_a_thread_handing_compute_to_the_engine_gives_back_its_openmp_team(tiny, handing):
    # Its idle workers would slow every parallel region of the engine's thread
    # (benchmarks/bench_idle_thread.py).
    model, tokenizer = tiny
    [ids] = prompts(tokenizer, 1)
    engine = BatchedHFEngine(model, tokenizer, rows=4)

    def body():
        team = team_of_own()
        if handing == "request":
            engine.sample(ids, 1, max_new_tokens=4, temperature=0.0, top_p=1.0, eos_token_ids={2})
        else:  # the main thread after training
            engine.serve(model)
        return team, os_threads()

    try:
        team, after = in_thread(body)
    finally:
        engine.close()
    assert team and not team & after


@needs_teams
def test_the_engines_thread_gives_back_its_openmp_team_while_it_waits(tiny):
    model, tokenizer = tiny
    engine = BatchedHFEngine(model, tokenizer, rows=4)

    def body():
        release_openmp_team()
        before = os_threads()
        engine.run(parallel_op)  # the engine's thread makes a team
        deadline = time.monotonic() + 10
        while (started := os_threads() - before) != {engine._thread.native_id} and time.monotonic() < deadline:
            time.sleep(0.01)
        return started, engine._thread.native_id

    try:
        started, engine_thread = in_thread(body)
    finally:
        engine.close()
    assert started == {engine_thread}  # the thread, without its team's workers


def test_a_model_it_cannot_step_is_refused():
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32))
    with pytest.raises(ValueError, match="engine hf_batched.*kind.*gpt2.*use engine=hf"):
        check_supported(gpt2)


def test_bad_rows_are_refused_at_build_and_concurrency_builds(make_cfg):
    with pytest.raises(ValueError, match="engine.rows must be an integer >= 1"):
        build(make_cfg("+experiment=smoke", "engine=hf_batched", "engine.rows=0"))
    parts = build(make_cfg("+experiment=smoke", "engine=hf_batched", "collect.concurrency=4", "eval.concurrency=4"))
    assert parts.engine.func is BatchedHFEngine
    with pytest.raises(IncompatibleConfig, match="use engine=hf_batched"):
        build(make_cfg("+experiment=smoke", "eval.concurrency=4"))
