"""``engine=server`` (agentq/models/server_engine.py) against a stub of vLLM's
OpenAI-compatible server (tests/openai_stub.py: the tiny model behind the same
requests; no real server installs on this CPU machine): the samples it returns,
one LoRA adapter per iteration equal to the adapters merged in order, a whole run
whose trees record the weights that sampled them, and settings refused before any
model loads."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model

from agentq.components import build
from agentq.layout import read_json
from agentq.loop import run
from agentq.models.engine import HFEngine, request_seed
from agentq.models.loading import TinyRandomModel
from agentq.models.server_engine import ServerEngine, ServerError, adapters_digest
from agentq.models.stacking import stack_adapters
from agentq.records.tree import SearchResult
from agentq.training.fit import merge_adapter
from tests.openai_stub import OpenAIStub
from tests.test_loop import check_summary

EOS = {2}  # SmolLM2's <|im_end|>
PROMPT = [1, 9690, 198, 2683, 359, 253, 5356, 30, 2, 198, 1, 4093, 198]


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = TinyRandomModel().load()
    return model.eval(), tokenizer


@pytest.fixture
def stub(tiny):
    server = OpenAIStub(copy.deepcopy(tiny[0]), tiny[1])
    yield server
    server.close()


def random_adapter(model, folder, seed: int, **lora) -> None:
    """A LoRA with non-zero B (a trained adapter's shape, random values) saved to ``folder``."""
    torch.manual_seed(seed)
    config = LoraConfig(init_lora_weights=False, task_type="CAUSAL_LM", **lora)
    get_peft_model(copy.deepcopy(model), config).save_pretrained(str(folder))


def weights_gap(a: torch.nn.Module, b: torch.nn.Module) -> float:
    other = b.state_dict()
    return max((t - other[name]).abs().max().item() for name, t in a.state_dict().items())


def test_stacked_adapters_equal_merging_them_in_order(tiny, tmp_path):
    model, _ = tiny
    first, second = tmp_path / "a1", tmp_path / "a2"
    random_adapter(model, first, 0, r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    random_adapter(model, second, 1, r=2, lora_alpha=16, target_modules=["q_proj", "k_proj", "o_proj"])
    merged = merge_adapter(merge_adapter(copy.deepcopy(model), first), second)
    stacked = merge_adapter(copy.deepcopy(model), stack_adapters([first, second], tmp_path / "stacked"))
    assert weights_gap(merged, model) > 1e-2  # the adapters change the weights
    assert weights_gap(stacked, merged) < 1e-5  # v_proj and k_proj each padded with the other's zeros


def test_adapters_that_do_not_add_up_are_refused(tiny, tmp_path):
    random_adapter(tiny[0], tmp_path / "dora", 0, r=2, target_modules=["q_proj"], use_dora=True)
    with pytest.raises(ValueError, match="use_dora"):
        stack_adapters([tmp_path / "dora"], tmp_path / "out")


def test_the_engine_returns_what_the_server_sampled(tiny, stub, tmp_path):
    model, tokenizer = tiny
    engine = ServerEngine(model, tokenizer, url=stub.url, served_model="base", adapter_dir=tmp_path)
    kwargs = {"max_new_tokens": 10, "eos_token_ids": EOS}
    greedy = engine.sample(PROMPT, 3, temperature=0.0, top_p=1.0, **kwargs)
    reference = HFEngine(model, tokenizer).sample(PROMPT, 3, temperature=0.0, top_p=1.0, **kwargs)
    assert [s.token_ids for s in greedy] == [s.token_ids for s in reference]
    assert [s.text for s in greedy] == [s.text for s in reference]
    assert [s.finished for s in greedy] == [s.finished for s in reference]
    assert greedy[0].logprob == pytest.approx(reference[0].logprob, abs=1e-4)
    assert stub.completions()[0]["n"] == 1  # greedy: one completion, repeated

    drawn = [engine.sample(PROMPT, 4, temperature=1.0, top_p=1.0, generator=torch.Generator().manual_seed(7), **kwargs)
             for _ in range(2)]  # fmt: skip
    assert drawn[0] == drawn[1]  # the request's seed comes from the search's generator
    assert len({s.token_ids for s in drawn[0]}) > 1
    request = stub.completions()[-1]
    assert request["seed"] == request_seed(torch.Generator().manual_seed(7))
    assert (request["prompt"], request["n"], request["stop_token_ids"]) == (PROMPT, 4, [2])
    for sample in drawn[0]:
        assert sample.finished == (sample.token_ids[-1] in EOS)
        assert sample.text == tokenizer.decode([t for t in sample.token_ids if t not in EOS], skip_special_tokens=True)


def test_a_constraint_or_an_unknown_model_is_an_error_not_a_sample(tiny, stub, tmp_path):
    model, tokenizer = tiny
    engine = ServerEngine(model, tokenizer, url=stub.url, served_model="base", adapter_dir=tmp_path)
    kwargs = {"max_new_tokens": 4, "temperature": 1.0, "top_p": 1.0, "eos_token_ids": EOS}
    with pytest.raises(ValueError, match="constrain_command=false"):
        engine.sample(PROMPT, 2, constraint=object(), **kwargs)
    engine.weights_name = "never-loaded"
    with pytest.raises(ServerError, match="404"):
        engine.sample(PROMPT, 2, **kwargs)


def test_each_iteration_serves_one_adapter_equal_to_the_merged_policy(tiny, stub, tmp_path):
    model, tokenizer = tiny
    adapters = [tmp_path / "iter_001", tmp_path / "iter_002"]
    random_adapter(model, adapters[0], 0, r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    random_adapter(model, adapters[1], 1, r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    engine = ServerEngine(model, tokenizer, url=stub.url, served_model="base", adapter_dir=tmp_path / "served")
    for upto in (1, 2):
        policy = copy.deepcopy(model)
        for adapter in adapters[:upto]:
            policy = merge_adapter(policy, adapter)
        engine.serve(policy, adapters[:upto])
        assert engine.weights_name == f"agentq-{adapters_digest(adapters[:upto])}"
        assert weights_gap(stub.models[engine.weights_name], policy) < 1e-5
        served = engine.sample(PROMPT, 2, max_new_tokens=8, temperature=0.0, top_p=1.0, eos_token_ids=EOS)
        assert stub.completions()[-1]["model"] == engine.weights_name
        local = HFEngine(policy, tokenizer).sample(PROMPT, 2, max_new_tokens=8, temperature=0.0, top_p=1.0, eos_token_ids=EOS)
        assert [s.token_ids for s in served] == [s.token_ids for s in local]
    assert [p.name for p in (tmp_path / "served").iterdir()] == [engine.weights_name]  # one adapter needs no stack
    engine.serve(policy, adapters)  # a resumed run, or a Ray actor, loads it again: the server already has it
    assert engine.weights_name in stub.models


@pytest.mark.slow
def test_a_run_on_the_server_records_which_weights_sampled_each_tree(make_cfg, tmp_path, tiny):
    stub = OpenAIStub(*TinyRandomModel().load())  # the run's base model, as the server holds it
    try:
        summary = run(make_cfg(
            "+experiment=smoke", "engine=server", f"engine.url={stub.url}", "engine.served_model=base",
            "agent.sampling.constrain_command=false", "iterations=2", "collect.num_tasks=4",
            "eval.base=false", "eval.num_tasks=1", "eval.search=false",
        ))  # fmt: skip
    finally:
        stub.close()
    run_dir = tmp_path / "run"
    trained = [run_dir / f"iter_00{i}" / "adapter" for i in (1, 2)]
    assert all(a.exists() for a in trained), "the smoke run trained no adapter: nothing was swapped"
    names = [f"agentq-{adapters_digest(trained[:1])}", f"agentq-{adapters_digest(trained)}"]
    assert [body["lora_name"] for path, body in stub.requests if path == "/v1/load_lora_adapter"] == names
    for iteration, weights in ((1, "base"), (2, names[0])):  # iteration 2 searches with pi_1
        trees = sorted((run_dir / f"iter_00{iteration}" / "collect").glob("task_*.json"))
        assert len(trees) == 4
        assert {SearchResult.from_dict(read_json(p)).weights for p in trees} == {weights}
    assert stub.completions()[-1]["model"] == names[1]  # the last evaluation: pi_2
    episodes = sorted((run_dir / "iter_002" / "eval" / "zero_shot").glob("task_*.json"))
    assert episodes and {read_json(p)["weights"] for p in episodes} == {names[1]}
    policy = TinyRandomModel().load()[0]
    for adapter in trained:
        policy = merge_adapter(policy, adapter)
    assert weights_gap(stub.models[names[1]], policy) < 1e-5
    check_summary(summary, iterations=2, modes=("zero_shot",), base=False)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["engine.url=http://127.0.0.1:9", "engine.served_model=base"], "engine.url"),
        (["engine.url=localhost:8000", "engine.served_model=base"], "engine.url"),
        (["engine.served_model=SmolLM2"], "engine.served_model"),
        (["engine.url=null", "engine.served_model=base"], "engine.url"),
    ],
)
def test_bad_server_settings_are_refused_before_any_model_loads(make_cfg, stub, overrides, named):
    if not any(o.startswith("engine.url") for o in overrides):
        overrides.append(f"engine.url={stub.url}")
    with pytest.raises(ValueError, match=named):
        build(make_cfg("+experiment=smoke", "engine=server", "agent.sampling.constrain_command=false", *overrides))
