"""The engines behind the policy: the GGUF the OpenVINO engine reads holds the torch
weights, the engine decodes what the HF reference decodes, a request's result does not
depend on the requests beside it, and what an engine cannot do is refused at build."""

import threading

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentq import components
from agentq.agent.action import parse_composite
from agentq.agent.constrained import CommandConstraint, TokenTable
from agentq.bookkeeping import decoding
from agentq.collection import frozen_base
from agentq.components import IncompatibleConfig, Weights, build
from agentq.models import TinyRandomModel
from agentq.models.engine import HFEngine
from agentq.models.gguf_export import gguf_name, rotary_interleave, write_gguf
from agentq.models.loading import smollm2_gguf_path
from agentq.models.logprobs import completion_logprobs
from agentq.models.openvino_engine import OpenVINOEngine


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = TinyRandomModel().load()
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def engine(tiny, tmp_path_factory):
    model, tokenizer = tiny
    engine = OpenVINOEngine(model, tokenizer, template=None, cache_dir=tmp_path_factory.mktemp("engine"))
    yield engine
    engine.close()


def prompts(tokenizer, n: int) -> list[list[int]]:
    colours = ("red", "blue", "black")
    texts = [f"Goal {i}: buy a {colours[i % 3]} chair under {10 * i} dollars." for i in range(n)]
    return [list(tokenizer(t, add_special_tokens=False).input_ids) for t in texts]


def test_gguf_names_and_the_rotary_row_order():
    assert gguf_name("model.layers.12.self_attn.k_proj.weight") == "blk.12.attn_k.weight"
    assert gguf_name("model.embed_tokens.weight") == "token_embd.weight"
    with pytest.raises(KeyError):
        gguf_name("model.layers.0.self_attn.rotary_emb.inv_freq")
    # One head of dim 4: rows (x0, x1 | y0, y1) -> (x0, y0, x1, y1).
    rows = torch.arange(4.0)[:, None].numpy()
    assert rotary_interleave(rows, 1)[:, 0].tolist() == [0.0, 2.0, 1.0, 3.0]


def test_the_written_gguf_loads_back_as_the_same_weights(tiny, tmp_path):
    model, _ = tiny
    path = write_gguf(model, smollm2_gguf_path(), tmp_path / "tiny.gguf", quantization="F16")
    again = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32, local_files_only=True)
    theirs = again.state_dict()
    for name, weight in model.state_dict().items():
        assert torch.allclose(theirs[name], weight, rtol=1e-3, atol=1e-4), name  # F16 rounding only


def test_greedy_decoding_matches_the_hf_reference(tiny, engine):
    model, tokenizer = tiny
    hf = HFEngine(model, tokenizer)
    for ids in prompts(tokenizer, 6):
        [a] = hf.sample(ids, 1, max_new_tokens=16, temperature=0.0, top_p=1.0, eos_token_ids={2})
        b = engine.sample(ids, 2, max_new_tokens=16, temperature=0.0, top_p=1.0, eos_token_ids={2})
        assert b[0] == b[1]  # greedy: one completion stands for all k
        assert b[0].token_ids == a.token_ids and b[0].text == a.text
        assert b[0].logprob == pytest.approx(a.logprob, abs=1e-3)


def raw_logprob(model, prompt_ids: list[int], token_ids) -> float:
    """The trainer's log-likelihood of ``token_ids`` after ``prompt_ids``."""
    full = torch.tensor([prompt_ids + list(token_ids)])
    completion = torch.zeros_like(full, dtype=torch.bool)
    completion[0, len(prompt_ids):] = True
    with torch.no_grad():
        return float(completion_logprobs(model, full, torch.ones_like(full), completion)[0])


def at_once(draw, requests: list) -> list:
    """``draw(i, request)`` for every request, each in its own thread, all in flight together."""
    together: list = [None] * len(requests)
    threads = [threading.Thread(target=lambda i=i, r=r: together.__setitem__(i, draw(i, r))) for i, r in enumerate(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return together


def beside_others_changes_by_rounding_only(draw, requests: list) -> list:
    """Drawn twice one after another, every request's samples are the same bitwise; drawn
    all at once, most are the same and the rest moved by rounding only. The pipeline's
    kernels depend on the batch (experiments/benchmarks/table.md, "OpenVINO: a request
    alone vs beside others"): a sample's log-prob moves in the last digits and, now and
    then, a token at temperature 1 crosses to its neighbour's share of the draw. A
    request handed another's result would differ in nearly every sample. Returns the draws
    made alone."""
    alone = [draw(i, r) for i, r in enumerate(requests)]
    assert [draw(i, r) for i, r in enumerate(requests)] == alone
    together = at_once(draw, requests)
    pairs = [(a, b) for i in range(len(requests)) for a, b in zip(alone[i], together[i], strict=True)]
    same_tokens = [(a, b) for a, b in pairs if a.token_ids == b.token_ids]
    assert len(pairs) - len(same_tokens) <= max(1, len(pairs) // 10)
    for a, b in same_tokens:
        assert b.logprob == pytest.approx(a.logprob, abs=1e-3)
    return alone


def test_requests_beside_a_request_change_it_by_rounding_only(tiny, engine):
    _, tokenizer = tiny

    def draw(i: int, ids: list[int]) -> list:
        generator = torch.Generator().manual_seed(i)
        return engine.sample(ids, 3, max_new_tokens=10, temperature=1.0, top_p=1.0, eos_token_ids={2}, generator=generator)

    requests = prompts(tokenizer, 8)
    alone = beside_others_changes_by_rounding_only(draw, requests)
    assert len({s.token_ids for samples in alone for s in samples}) > 8  # the seeds draw different samples


def test_what_the_engine_cannot_report_is_refused(tiny, engine):
    _, tokenizer = tiny
    [ids] = prompts(tokenizer, 1)
    with pytest.raises(ValueError, match="temperature=0.7"):
        engine.sample(ids, 2, max_new_tokens=4, temperature=0.7, top_p=1.0, eos_token_ids={2})


def test_a_closed_engine_says_so(tiny, tmp_path):
    model, tokenizer = tiny
    engine = OpenVINOEngine(model, tokenizer, template=None, cache_dir=tmp_path)
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.sample([1, 2, 3], 1, max_new_tokens=2, temperature=0.0, top_p=1.0, eos_token_ids={2})


def serve_other_weights(engine, tokenizer, ids):
    """Greedy samples of ``ids`` before and after ``engine`` serves other weights, and
    what the HF engine decodes with those weights."""

    def greedy(e):
        return e.sample(ids, 1, max_new_tokens=8, temperature=0.0, top_p=1.0, eos_token_ids={2})

    before = greedy(engine)
    other = TinyRandomModel(seed=1).load()[0].eval()
    engine.serve(other)
    [expected] = greedy(HFEngine(other, tokenizer))
    return before, greedy(engine), expected


def test_serving_new_weights_changes_what_is_decoded(tiny, tmp_path):
    model, tokenizer = tiny
    [ids] = prompts(tokenizer, 1)
    engine = OpenVINOEngine(model, tokenizer, template=None, cache_dir=tmp_path)
    try:
        before, after, expected = serve_other_weights(engine, tokenizer, ids)
    finally:
        engine.close()
    assert after != before and after[0].token_ids == expected.token_ids
    assert len(list((tmp_path / "gguf").glob("*.gguf"))) == 2  # one file per distinct weights


@pytest.mark.parametrize(
    "overrides, named",
    [
        (["agent.sampling.temperature=0.7"], "agent.sampling.temperature=0.7"),
        (["workers=2"], "use collect.concurrency"),
        (["trainer.use_logged_reference=true"], "trainer.use_logged_reference=false"),
        (["engine.cache_gb=0"], "engine.cache_gb must be a number >= 1"),
    ],
)
def test_openvino_refuses_at_build_what_it_cannot_do(make_cfg, overrides, named):
    with pytest.raises((IncompatibleConfig, ValueError)) as info:
        build(make_cfg("+experiment=smoke", "engine=openvino", "agent.sampling.temperature=1.0", *overrides))
    assert named in str(info.value)


def test_concurrency_needs_a_batching_engine(make_cfg):
    with pytest.raises(IncompatibleConfig, match="eval.concurrency > 1.*engine HFEngine serves one request at a time"):
        build(make_cfg("+experiment=smoke", "eval.concurrency=4"))


RESULTS_PAGE = ["click[Back to Search]", "click[Next >]", "click[B08H6TFG8S]", "click[B0L2UU1J61]"]


@pytest.mark.parametrize("actions", [RESULTS_PAGE, ["search[...]"]])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_command_constraint_holds_through_the_engines_regex(tiny, engine, actions, temperature):
    """The random model never writes COMMAND: itself, so every sample takes the forced path:
    cut at force_at, then the trigger and a listed action written under the regex."""
    model, tokenizer = tiny
    table = TokenTable(tokenizer)
    for i, ids in enumerate(prompts(tokenizer, 3)):
        constraint = CommandConstraint(table, actions, eos_token_ids={2}, max_new_tokens=48, max_tail_tokens=2)
        samples = engine.sample(ids, 3, max_new_tokens=48, temperature=temperature, top_p=1.0, eos_token_ids={2},
                                generator=torch.Generator().manual_seed(i), constraint=constraint)
        for sample in samples:
            command = parse_composite(sample.text).command
            assert command in actions or (actions == ["search[...]"] and command.startswith("search[")), sample.text
            assert len(sample.token_ids) <= constraint.force_at + constraint.forced_chars
            assert constraint.settle(sample.token_ids, forced=True) == (len(sample.token_ids), False)  # tail already cut
            # The log-prob is the raw model's likelihood of the emitted tokens, forced ones included.
            assert sample.logprob == pytest.approx(raw_logprob(model, ids, sample.token_ids), abs=1e-2)


def test_constrained_requests_beside_a_request_change_it_by_rounding_only(tiny, engine):
    _, tokenizer = tiny
    table = TokenTable(tokenizer)

    def draw(i: int, ids: list[int]) -> list:
        constraint = CommandConstraint(table, RESULTS_PAGE, eos_token_ids={2}, max_new_tokens=40)
        return engine.sample(ids, 2, max_new_tokens=40, temperature=1.0, top_p=1.0, eos_token_ids={2},
                             generator=torch.Generator().manual_seed(i), constraint=constraint)  # fmt: skip

    beside_others_changes_by_rounding_only(draw, prompts(tokenizer, 4))


def test_the_hf_engine_in_bf16_decodes_a_cast_copy_and_leaves_the_trainers_weights(tiny):
    model, tokenizer = tiny
    before = {name: p.clone() for name, p in model.state_dict().items()}
    engine = HFEngine(model, tokenizer, dtype="bfloat16")
    assert HFEngine(model, tokenizer).exact and not engine.exact
    assert engine.model is not model and next(engine.model.parameters()).dtype == torch.bfloat16
    assert all(torch.equal(p, before[name]) for name, p in model.state_dict().items())  # fp32, untouched
    ids = prompts(tokenizer, 1)[0]
    [sample] = engine.sample(ids, 1, max_new_tokens=8, temperature=0.0, top_p=1.0, eos_token_ids={2})
    # The same weights at lower precision: the fp32 model scores the bf16 engine's tokens near its own log-prob.
    full = torch.tensor([ids + list(sample.token_ids)])
    completion = torch.zeros_like(full, dtype=torch.bool)
    completion[0, len(ids):] = True
    with torch.no_grad():
        exact = float(completion_logprobs(model, full, torch.ones_like(full), completion)[0])
    assert sample.logprob != exact and sample.logprob == pytest.approx(exact, abs=0.05 * len(sample.token_ids))

    other = TinyRandomModel(seed=1).load()[0].eval()
    engine.serve(other)
    served = dict(engine.model.named_parameters())
    assert all(torch.equal(served[name], p.to(torch.bfloat16)) for name, p in other.named_parameters())


def test_the_critic_reads_the_weights_the_hf_engine_decodes(tiny):
    model, tokenizer = tiny
    bf16 = HFEngine(model, tokenizer, dtype="bfloat16")
    assert Weights(model, tokenizer, engine=bf16).critic is bf16.model
    assert Weights(model, tokenizer, engine=HFEngine(model, tokenizer)).critic is model
    frozen = object()
    assert Weights(model, tokenizer, frozen_base=frozen, engine=bf16).critic is frozen


@pytest.mark.parametrize(
    "overrides, native, named",
    [
        (["engine.dtype=bfloat16", "trainer.use_logged_reference=true"], True, "trainer.use_logged_reference=false"),
        (["engine.dtype=bfloat16"], False, "engine.dtype=bfloat16: this machine computes it no faster"),
        (["engine.dtype=float16"], True, "engine.dtype=float16"),
        (["engine.dtype=bfloat17"], True, "engine.dtype='bfloat17' is not a torch dtype"),
    ],
)
def test_the_hf_engines_dtype_is_refused_at_build_where_it_cannot_serve(make_cfg, monkeypatch, overrides, native, named):
    monkeypatch.setattr(components, "native_bf16", lambda accelerator: native)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises((IncompatibleConfig, ValueError)) as info:
        build(make_cfg("+experiment=smoke", *overrides))
    assert named in str(info.value)


def test_a_bf16_hf_engine_builds_and_is_recorded_in_the_summary(make_cfg, monkeypatch):
    monkeypatch.setattr(components, "native_bf16", lambda accelerator: True)
    cfg = make_cfg("+experiment=smoke", "engine.dtype=bfloat16", "trainer.use_logged_reference=false")
    build(cfg).close()
    assert decoding(cfg) == {"engine": "HFEngine (bfloat16)", "dpo_reference": "the trainer's forward pass"}


def test_the_frozen_base_critic_is_kept_in_the_engines_dtype(tiny, make_cfg):
    model, tokenizer = tiny
    parts = build(make_cfg("+experiment=smoke", "iterations=2", "critic_model=base"))
    try:
        for dtype in ("float32", "bfloat16"):
            frozen = frozen_base(parts, Weights(model, tokenizer, engine=HFEngine(model, tokenizer, dtype=dtype)).critic)
            assert frozen is not model and next(frozen.parameters()).dtype == getattr(torch, dtype)
            assert not any(p.requires_grad for p in frozen.parameters())
    finally:
        parts.close()
