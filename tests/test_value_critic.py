"""ToT state evaluators: label arithmetic against scripted logits, the tiny random model, ToT end to end."""

import math
from types import SimpleNamespace

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentq.critic.ranking import LLMRankingCritic
from agentq.critic.value import LabelDistribution, LLMValueEvaluator, LLMVoteEvaluator
from agentq.models.loading import TinyRandomModel
from agentq.records.history import History
from tests.conftest import CONF

TASK = History("Goal: craft 1 stick. Crafting commands: craft 4 stick using 2 oak planks")
STATES = [
    TASK.extend("THOUGHT: x\nCOMMAND: get 2 oak planks", "Got 2 oak planks", None),
    TASK.extend("THOUGHT: y\nCOMMAND: inventory", "Inventory: empty", None),
    TASK.extend("THOUGHT: z\nCOMMAND: craft 1 stone", "Could not find stone", None),
]


@pytest.fixture(scope="module")
def tiny():
    return TinyRandomModel().load()


class FakeCache:
    """A KV cache that only remembers token ids (crop takes a negative count, as in transformers 5)."""

    def __init__(self) -> None:
        self.ids: list[int] = []

    def crop(self, count: int) -> None:
        assert count < 0
        del self.ids[count:]


class ScriptedLM:
    """Next-token probabilities looked up by the last token id (``default`` at the prompt's end)."""

    def __init__(
        self,
        vocab: int,
        default: dict[int, float],
        after: dict[int, dict[int, float]] | None = None,
    ):
        self.vocab, self.default, self.after = vocab, default, after or {}
        self.forwards = 0

    def get_input_embeddings(self):
        return SimpleNamespace(weight=torch.zeros(1))

    def __call__(self, input_ids, past_key_values=None, use_cache=True, logits_to_keep=1):
        self.forwards += 1
        cache = past_key_values if past_key_values is not None else FakeCache()
        cache.ids += input_ids[0].tolist()
        logits = torch.full((1, 1, self.vocab), -math.inf)  # (1, 1, V)
        for token, p in self.after.get(cache.ids[-1], self.default).items():
            logits[0, 0, token] = math.log(p)
        return SimpleNamespace(logits=logits, past_key_values=cache)


def tok(tokenizer, text: str) -> int:
    (token,) = tokenizer.encode(text, add_special_tokens=False)
    return token


def test_sure_likely_impossible_is_the_expected_label_value(tiny):
    _, tokenizer = tiny
    sure, likely, impossible, other = (
        tok(tokenizer, t) for t in (" sure", " likely", " impossible", " maybe")
    )
    model = ScriptedLM(len(tokenizer), {sure: 0.2, likely: 0.3, impossible: 0.1, other: 0.4})
    evaluator = LLMValueEvaluator(model, tokenizer)
    # SmolLM2 has each label as one token.
    assert [len(ids) for ids in evaluator.labels.token_ids] == [1, 1, 1]
    # Restricted to the labels: sure 1/3, likely 1/2, impossible 1/6 -> V = 1/3 + 1/4.
    assert evaluator.label_probs(TASK, STATES[0]) == pytest.approx([1 / 3, 1 / 2, 1 / 6])
    assert evaluator.evaluate(TASK, STATES[:2]) == pytest.approx([7 / 12, 7 / 12])
    assert model.forwards == 3  # one per state (the first label call included)


def test_tot_weights_are_a_values_option(tiny):
    _, tokenizer = tiny
    sure, likely = tok(tokenizer, " sure"), tok(tokenizer, " likely")
    model = ScriptedLM(len(tokenizer), {sure: 0.5, likely: 0.5})
    evaluator = LLMValueEvaluator(model, tokenizer, values=[1.0, 0.05, 0.00005])
    assert evaluator.evaluate(TASK, STATES[:1]) == pytest.approx([0.525])


def test_score_1_10_chains_multi_token_labels(tiny):
    # SmolLM2 writes " 7" as " ", "7" and " 10" as " ", "1", "0". After " ": p(1) = .4,
    # p(5) = .2, the rest on non-digits -> restricted 2/3, 1/3. After "1": p(0) = .25,
    # so " 10" gets 2/3 * .25 = 1/6 and " 1" keeps 2/3 * .75 = 1/2.
    # V = 1/2 * 0 + 1/3 * 4/9 + 1/6 * 1 = 17/54.
    _, tokenizer = tiny
    space, one, five, zero, x = (tok(tokenizer, t) for t in (" ", "1", "5", "0", "x"))
    model = ScriptedLM(
        len(tokenizer), {x: 1.0}, {space: {one: 0.4, five: 0.2, x: 0.4}, one: {zero: 0.25, x: 0.75}}
    )
    evaluator = LLMValueEvaluator(model, tokenizer, scale="score_1_10")
    probs = evaluator.label_probs(TASK, STATES[0])
    assert (
        probs[0] == pytest.approx(0.5)
        and probs[4] == pytest.approx(1 / 3)
        and probs[9] == pytest.approx(1 / 6)
    )
    assert sum(probs) == pytest.approx(1.0)
    model.forwards = 0
    assert evaluator.evaluate(TASK, STATES[:1]) == pytest.approx([17 / 54])
    assert model.forwards == 3  # the prompt, then " " and "1" on its cache


def test_vote_share_expected_and_sampled(tiny):
    _, tokenizer = tiny
    space, one, two, three = (tok(tokenizer, t) for t in (" ", "1", "2", "3"))
    after = {space: {one: 0.1, two: 0.6, three: 0.3}}
    expected = LLMVoteEvaluator(ScriptedLM(len(tokenizer), {space: 1.0}, after), tokenizer)
    assert expected.evaluate(TASK, STATES) == pytest.approx([0.1, 0.6, 0.3])
    sampled = [
        LLMVoteEvaluator(
            ScriptedLM(len(tokenizer), {space: 1.0}, after), tokenizer, num_votes=5, seed=3
        ).evaluate(TASK, STATES)
        for _ in range(2)
    ]
    assert sampled[0] == sampled[1] and sum(sampled[0]) == pytest.approx(1.0)
    assert all(v * 5 == round(v * 5) for v in sampled[0])
    certain = {space: {two: 1.0}}
    voter = LLMVoteEvaluator(
        ScriptedLM(len(tokenizer), {space: 1.0}, certain), tokenizer, num_votes=5
    )
    assert voter.evaluate(TASK, STATES) == [0.0, 1.0, 0.0]
    assert voter.evaluate(TASK, STATES[:1]) == [1.0]  # one state: no question to ask


@pytest.mark.parametrize("cls", [LLMValueEvaluator, LLMVoteEvaluator])
def test_tiny_model_values_are_in_range_and_deterministic(tiny, cls):
    model, tokenizer = tiny
    first = cls(model, tokenizer).evaluate(TASK, STATES)
    again = cls(model, tokenizer).evaluate(TASK, STATES)
    assert len(first) == 3 and all(0.0 <= v <= 1.0 for v in first)
    assert first == again
    assert len(set(first)) > 1  # the states are told apart (random weights, but not constant)


def test_tiny_model_score_scale(tiny):
    model, tokenizer = tiny
    values = LLMValueEvaluator(model, tokenizer, scale="score_1_10").evaluate(TASK, STATES)
    assert all(0.0 <= v <= 1.0 for v in values)


def test_label_checks_fail_clearly(tiny):
    _, tokenizer = tiny
    with pytest.raises(ValueError, match="' sure' and ' sure' encode to the same tokens"):
        LabelDistribution(tokenizer, [" sure", " sure"], owner="critic X")
    with pytest.raises(ValueError, match="critic X: the answer label '' encodes to no tokens"):
        LabelDistribution(tokenizer, ["", " sure"], owner="critic X")
    with pytest.raises(ValueError, match="critic.scale must be one of"):
        LLMValueEvaluator(None, tokenizer, scale="stars")
    with pytest.raises(ValueError, match="critic.values must be 3 numbers in"):
        LLMValueEvaluator(None, tokenizer, values=[1.0, 0.5])
    with pytest.raises(ValueError, match="critic.num_votes"):
        LLMVoteEvaluator(None, tokenizer, num_votes=0)


def test_critic_kinds():
    assert LLMValueEvaluator.kind == LLMVoteEvaluator.kind == "state"
    assert LLMRankingCritic.kind == "rank"


@pytest.mark.parametrize(
    "name, cls", [("llm_value", LLMValueEvaluator), ("llm_vote", LLMVoteEvaluator)]
)
def test_critic_yaml_builds_with_the_model(tiny, name, cls):
    model, tokenizer = tiny
    evaluator = instantiate(OmegaConf.load(CONF / "critic" / f"{name}.yaml"))(model, tokenizer)
    assert isinstance(evaluator, cls)


def test_tot_search_with_the_tiny_llm_is_deterministic(tiny, monkeypatch):
    """Same seed, same tree, whatever the policy and evaluator ran before (see
    test_mcts.test_llm_search_is_deterministic_for_a_seed)."""
    import gymnasium as gym

    from agentq.agent.grounding import Grounder
    from agentq.agent.policy import LLMPolicy, Sampling
    from agentq.agent.prompt import PromptBuilder
    from agentq.data.pairs import StepPairBuilder
    from agentq.search.tot import BFS
    from tests.conftest import PrefillLog

    model, tokenizer = tiny
    policy = LLMPolicy(
        model,
        tokenizer,
        prompt=PromptBuilder(),
        grounder=Grounder(),
        sampling=Sampling(max_new_tokens=8),
    )
    env = gym.make("envs.textcraft:agentq/TextCraft-v0", disable_env_checker=True)
    search = BFS(breadth=2, num_actions=3, max_depth=2)
    evaluator = LLMValueEvaluator(model, tokenizer)
    log = PrefillLog(monkeypatch, policy, evaluator)
    search(env, policy, evaluator, task_id=151, generator=torch.Generator().manual_seed(9))  # warm caches
    log.take()
    trees, prefills = [], []
    for _ in range(2):
        generator = torch.Generator().manual_seed(3)
        trees.append(search(env, policy, evaluator, task_id=150, generator=generator).tree)
        prefills.append(log.take())
    assert prefills[0] == prefills[1]
    assert trees[0].to_dict() == trees[1].to_dict()
    nodes = trees[0].nodes[1:]
    assert nodes and all(0.0 <= n.critic_score <= 1.0 and n.kept is not None for n in nodes)
    assert sum(n.kept for n in nodes if n.depth == 1) == min(2, sum(n.depth == 1 for n in nodes))
    assert all(p.q_chosen > p.q_rejected for p in StepPairBuilder(threshold=0.0)(trees[0]))
    env.close()
