"""The vLLM engine without vLLM: the import guard, the refused
combinations, the request parameters, and the glue from vLLM-shaped outputs to
our samples (a fake ``vllm`` module stands in for the engine; the real one needs
a CUDA machine and has not run here)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch

from agentq.agent.grounding import Grounder
from agentq.agent.policy import LLMPolicy, Sampling
from agentq.agent.prompt import PromptBuilder
from agentq.components import IncompatibleConfig, build
from agentq.models import TinyRandomModel
from agentq.models.vllm_engine import VLLMEngine, samples_from_output, sampling_kwargs
from agentq.records.history import History


@pytest.fixture
def no_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError


@pytest.fixture(scope="module")
def tiny():
    return TinyRandomModel().load()


def _token(logprob: float) -> SimpleNamespace:
    return SimpleNamespace(logprob=logprob, rank=1, decoded_token="")


def _completion(ids, logprobs, finish_reason="stop", cumulative=None):
    """A vLLM ``CompletionOutput``: per-step dicts hold the sampled token and a runner-up."""
    steps = None if logprobs is None else [{t: _token(lp), t + 1: _token(lp - 1.0)} for t, lp in zip(ids, logprobs, strict=True)]
    return SimpleNamespace(
        token_ids=list(ids), logprobs=steps, cumulative_logprob=cumulative, finish_reason=finish_reason, text="ignored"
    )


# --- the import guard -------------------------------------------------------------------------


def test_choosing_vllm_without_it_says_how_to_install(no_vllm, make_cfg):
    import agentq.models.vllm_engine  # noqa: F401  (importable without vllm)

    with pytest.raises(Exception) as info:  # at build time, before any model loads
        build(make_cfg("+experiment=smoke", "engine=vllm"))
    assert "pip install vllm on a CUDA machine" in str(info.value) + str(info.value.__cause__)


@pytest.mark.parametrize(
    "overrides, named",
    [
        (["agent.sampling.constrain_command=true"], "agent.sampling.constrain_command=false"),
        (["collect.concurrency=4"], "collect.concurrency > 1"),
        (["trainer.use_logged_reference=true"], "trainer.use_logged_reference=false"),
    ],
)
def test_what_vllm_cannot_do_is_refused_at_build(monkeypatch, make_cfg, overrides, named):
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    with pytest.raises(IncompatibleConfig, match="engine VLLMEngine") as info:
        build(make_cfg("+experiment=smoke", "engine=vllm", *overrides))
    assert named in str(info.value)


# --- request and output glue ------------------------------------------------------------------


def test_sampling_params_for_k_candidates_and_for_greedy():
    sampled = sampling_kwargs(4, max_new_tokens=32, temperature=0.7, top_p=0.9, eos_token_ids={7, 2}, seed=11)
    assert sampled == {
        "n": 4, "temperature": 0.7, "top_p": 0.9, "max_tokens": 32, "logprobs": 0,
        "stop_token_ids": [2, 7], "skip_special_tokens": True, "seed": 11,
    }
    greedy = sampling_kwargs(4, max_new_tokens=32, temperature=0.0, top_p=0.9, eos_token_ids={2}, seed=11)
    assert greedy["n"] == 1 and greedy["temperature"] == 0.0 and greedy["top_p"] == 1.0 and greedy["seed"] is None


def test_outputs_become_samples_like_the_hf_path(tiny):
    _, tokenizer = tiny
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    look = tokenizer.encode("COMMAND: look", add_special_tokens=False)
    craft = tokenizer.encode("COMMAND: craft 4 sticks and then", add_special_tokens=False)
    output = SimpleNamespace(
        outputs=[
            _completion([*look, end], [-0.5] * (len(look) + 1), cumulative=-99.0),
            _completion(craft, [-1.0] * len(craft), finish_reason="length"),
            _completion([*look, end], None, cumulative=-2.25),  # no per-step entries: the cumulative sum
        ]
    )
    stop, cut, cumulative = samples_from_output(output, 3, tokenizer=tokenizer, eos_token_ids={end})
    # The end token stays in the ids (the training target) and out of the text.
    assert stop.token_ids == (*look, end) and stop.text == "COMMAND: look" and stop.finished
    assert stop.logprob == pytest.approx(-0.5 * (len(look) + 1))  # the sampled tokens, not the runner-ups
    assert cut.token_ids == tuple(craft) and cut.text == "COMMAND: craft 4 sticks and then" and not cut.finished
    assert cut.logprob == pytest.approx(-1.0 * len(craft))
    assert cumulative.logprob == -2.25

    greedy = SimpleNamespace(outputs=[_completion([*look, end], [-0.1] * (len(look) + 1))])
    samples = samples_from_output(greedy, 3, tokenizer=tokenizer, eos_token_ids={end})
    assert len(samples) == 3 and len(set(samples)) == 1
    with pytest.raises(ValueError, match="2 completions for k=3"):
        samples_from_output(SimpleNamespace(outputs=output.outputs[:2]), 3, tokenizer=tokenizer, eos_token_ids={end})


def test_the_policy_samples_through_a_vllm_shaped_engine(monkeypatch, tiny):
    """The whole switch with a fake ``vllm``: engine built once from the model's
    source, the policy's weights pushed, K candidates in one request."""
    model, tokenizer = tiny
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    reply = tokenizer.encode("THOUGHT: I need planks.\nCOMMAND: get 2 oak planks", add_special_tokens=False) + [end]
    calls = {"engines": [], "params": [], "pushed": []}

    class FakeLLM:
        def __init__(self, model, **kwargs):
            calls["engines"].append((model, kwargs))
            runner = SimpleNamespace(load_weights=lambda weights: calls["pushed"].append(dict(weights)))
            worker = SimpleNamespace(model_runner=SimpleNamespace(model=runner))
            self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(worker=worker)))

        def generate(self, prompts, params, use_tqdm):
            [prompt] = prompts
            assert prompt["prompt_token_ids"] and not use_tqdm
            calls["params"].append(params.kwargs)
            n = params.kwargs["n"]
            return [SimpleNamespace(outputs=[_completion(reply, [-0.25] * len(reply)) for _ in range(n)])]

    fake = types.ModuleType("vllm")
    fake.LLM = FakeLLM
    fake.SamplingParams = lambda **kwargs: SimpleNamespace(kwargs=kwargs)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setattr(VLLMEngine, "_engines", {})
    monkeypatch.setattr(model.config, "_name_or_path", "/models/smollm2-fp32")

    sampling = Sampling(reuse_prefix_cache=False, max_new_tokens=24, temperature=0.8)
    engine = VLLMEngine(model, tokenizer)
    policy = LLMPolicy(
        model, tokenizer, prompt=PromptBuilder(env_instructions="Craft."), grounder=Grounder(), sampling=sampling,
        engine=engine,
    )  # fmt: skip
    history = History("Goal: craft 4 sticks.", valid_actions=("get 2 oak planks", "inventory"))
    candidates = policy.propose(history, 3, generator=torch.Generator().manual_seed(0))
    assert [c.command for c in candidates] == ["get 2 oak planks"] * 3
    assert candidates[0].action_ids == tuple(reply) and candidates[0].logprob == pytest.approx(-0.25 * len(reply))
    [greedy] = policy.propose(history, 1, greedy=True)
    assert greedy.command == "get 2 oak planks"

    sampled, greedy_params = calls["params"]
    assert sampled["n"] == 3 and sampled["temperature"] == 0.8 and sampled["logprobs"] == 0
    assert isinstance(sampled["seed"], int) and greedy_params["n"] == 1 and greedy_params["temperature"] == 0.0
    VLLMEngine(model, tokenizer).serve(model)  # the next iteration: the same engine, the weights pushed again
    assert [source for source, _ in calls["engines"]] == ["/models/smollm2-fp32"]
    assert calls["engines"][0][1]["logprobs_mode"] == "raw_logprobs"
    assert len(calls["pushed"]) == 3 and calls["pushed"][0].keys() == model.state_dict().keys()
