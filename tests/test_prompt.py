"""The history h_t = (a_1..a_{t-1}, o_t) as chat messages."""

from agentq.agent.prompt import PromptBuilder
from agentq.records.history import History


def test_history_keeps_actions_and_only_the_current_observation():
    h = History("obs 0", valid_actions=("a", "b")).extend("COMMAND: a", "obs 1", ["b"]).extend("COMMAND: b", "obs 2", None)
    assert h.previous == ("COMMAND: a", "COMMAND: b") and h.observation == "obs 2" and h.valid_actions is None
    user = PromptBuilder()(h)[-1]["content"]
    assert "obs 2" in user and "obs 0" not in user and "obs 1" not in user
    assert user.index("Step 1:\nCOMMAND: a") < user.index("Step 2:\nCOMMAND: b") < user.index("obs 2")


def test_plan_is_asked_for_on_the_first_step_only():
    builder = PromptBuilder(env_instructions="ENV DOC")
    first = builder(History("o"))[0]["content"]
    later = builder(History("o", previous=("x",)))[0]["content"]
    assert "PLAN:" in first and "PLAN:" not in later and "ENV DOC" in first and "ENV DOC" in later


def test_valid_actions_listed_and_capped():
    builder = PromptBuilder(max_valid_actions=2)
    user = builder(History("o", valid_actions=("v1", "v2", "v3")))[-1]["content"]
    assert "v1\nv2" in user and "v3" not in user
    assert "Valid commands" not in PromptBuilder(show_valid_actions=False)(History("o", valid_actions=("v1",)))[-1]["content"]


def test_examples_become_earlier_turns_and_max_previous_keeps_numbering():
    builder = PromptBuilder(examples=[{"observation": "ex obs", "action": "COMMAND: ex\n"}], max_previous=1)
    messages = builder(History("now", previous=("COMMAND: one", "COMMAND: two")))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == "COMMAND: ex" and "ex obs" in messages[1]["content"]
    assert "Step 2:\nCOMMAND: two" in messages[3]["content"] and "COMMAND: one" not in messages[3]["content"]


def test_templates_are_not_shown_to_the_model():
    user = PromptBuilder()(History("o", valid_actions=("search[...]",)))[-1]["content"]
    assert "search[...]" not in user and "Valid commands" not in user
    user = PromptBuilder()(History("o", valid_actions=("search[...]", "click[x]")))[-1]["content"]
    assert "click[x]" in user and "search[...]" not in user


def test_a_policys_preambles_begin_its_prompts_at_first_and_later_steps():
    from agentq.agent.grounding import Grounder
    from agentq.agent.policy import LLMPolicy, Sampling
    from agentq.models import TinyRandomModel

    model, tokenizer = TinyRandomModel().load()
    examples = [{"observation": "Search page.", "action": "THOUGHT: search.\nCOMMAND: search[lamp]"}]
    prompt = PromptBuilder(env_instructions="Commands: search[...], click[...]", examples=examples)
    policy = LLMPolicy(model, tokenizer, prompt=prompt, grounder=Grounder(), sampling=Sampling())
    first = policy.encode(prompt(History("Instruction: a red lamp. Search page.")))
    later = policy.encode(prompt(History("Results.", previous=("THOUGHT: go.\nCOMMAND: search[red lamp]",))))
    shared = policy.preambles.prompts
    assert len(shared) == 2 and all(len(p) > 50 for p in shared)
    assert any(first[: len(p)] == list(p) for p in shared) and any(later[: len(p)] == list(p) for p in shared)
    assert policy.fork().preambles is policy.preambles
