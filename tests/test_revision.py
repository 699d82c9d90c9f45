"""Agent-R revision trajectories (docs/method.md §6) from hand-made searches, with a scripted judge."""

import json
from types import SimpleNamespace

import pytest
import torch

from agentq.agent.action import format_composite
from agentq.agent.prompt import PromptBuilder
from agentq.critic.judge import LABELS, ActorStepJudge
from agentq.records.examples import SFTExample
from agentq.records.history import History
from agentq.records.trajectory import Step, Trajectory
from agentq.records.tree import Node, SearchResult, Tree
from agentq.search.revision import DEFAULT_REVISION_THOUGHTS, RevisionBuilder, RevisionPair

PB = PromptBuilder(env_instructions="Reach the goal.")
VALID = ("a", "b", "c")
TASK = 3


def act(command: str) -> str:
    return format_composite(command, thought=f"do {command}")


def trajectory(commands: list[str], reward: float) -> Trajectory:
    """A path of a deterministic env whose state is the command path ("at a/b"); each
    step's prompt is what the policy saw (rendered with the valid commands)."""
    history = History("start", valid_actions=VALID)
    steps = []
    for i, c in enumerate(commands):
        observation = "at " + "/".join(commands[: i + 1])
        steps.append(
            Step(PB(history), act(c), c, observation, 0.0, logprob=-1.0 - i, action_ids=[100 + i])
        )
        history = history.extend(act(c), observation, VALID)
    return Trajectory(
        TASK, steps, reward=reward, success=reward >= 1.0, score=reward, source="mcts"
    )


def search(*trajectories: Trajectory) -> SearchResult:
    tree = Tree(task_id=TASK, alpha=0.5)
    tree.add(Node(id=0, parent=None, depth=0, history=History("start", valid_actions=VALID)))
    return SearchResult(tree=tree, trajectories=list(trajectories), best=None, stats={})


class ScriptedJudge:
    """Labels step t (0-based) of the judged path with ``labels[t]`` ("good" when absent)."""

    def __init__(self, labels: dict[int, str]) -> None:
        self.labels, self.calls = labels, []

    def __call__(self, task, steps_so_far, step):
        self.calls.append((task, [s.command for s in steps_so_far], step.command))
        return self.labels.get(len(steps_so_far), "good")


def policy() -> SimpleNamespace:
    return SimpleNamespace(model="M", tokenizer="T", prompt=PB)


def last_user(segment) -> str:
    return segment.prompt[-1]["content"]


# -- the splice -----------------------------------------------------------------


def test_splice_texts_mask_and_revision_point():
    good, bad = trajectory(["a", "b", "c"], 1.0), trajectory(["a", "c", "c"], 0.0)
    judge = ScriptedJudge({1: "uncertain", 2: "bad"})
    builder = RevisionBuilder(include_good=False, judge=lambda model, tokenizer: judge)
    [example] = builder.from_search(search(good, bad), policy())

    assert example.source == "revision" and example.task_id == TASK
    assert judge.calls == [("start", ["a"], "c"), ("start", ["a", "c"], "c")]  # from d = 1 on
    info = example.info
    assert (info["divergence"], info["revision_step"], info["revision_point"]) == (1, 2, "judged")
    assert info["judgements"] == ["uncertain", "bad"]
    assert (
        info["good_value"],
        info["bad_value"],
        info["good_trajectory"],
        info["bad_trajectory"],
    ) == (1.0, 0.0, 0, 1)
    # crc32("3/0/1") % 4 == 0: the first phrasing
    revision = (
        "THOUGHT: I realize my previous actions were wrong; I will go back and try another way."
    )
    assert info["thought"] == 0

    segs = example.segments
    assert [s.train for s in segs] == [False, False, False, True, True, True]
    assert [s.completion for s in segs] == [
        act("a"),
        act("c"),
        act("c"),
        revision,
        act("b"),
        act("c"),
    ]
    # bad prefix: the exact prompts, ids and log-probs the policy had
    for seg, step in zip(segs[:3], bad.steps, strict=True):
        assert (
            seg.prompt == step.prompt
            and seg.completion_ids == step.action_ids
            and seg.logprob == step.logprob
        )
    # revision turn: the state after bad step t' = 2, the path's end (no valid commands recorded)
    assert last_user(segs[3]) == (
        f"Your previous actions:\nStep 1:\n{act('a')}\n\nStep 2:\n{act('c')}\n\nStep 3:\n{act('c')}"
        "\n\nCurrent observation:\nat a/c/c"
    )
    assert segs[3].completion_ids == [] and segs[3].logprob == 0.0
    # good steps from d = 1: previous = bad 0..2 + revision + good d..j-1, the good path's
    # observation, and the valid commands the exact prompt listed
    assert last_user(segs[4]) == (
        f"Your previous actions:\nStep 1:\n{act('a')}\n\nStep 2:\n{act('c')}\n\nStep 3:\n{act('c')}"
        f"\n\nStep 4:\n{revision}\n\nCurrent observation:\nat a\n\nValid commands:\na\nb\nc"
    )
    previous = (act("a"), act("c"), act("c"), revision, act("b"))
    assert segs[5].prompt == PB(History("at a/b", previous, VALID))
    assert (
        segs[4].prompt[0] == segs[5].prompt[0] == PB(History("x", ("y",)))[0]
    )  # not the first-step system
    assert [s.completion_ids for s in segs[4:]] == [
        [101],
        [102],
    ]  # generated ids, prompt-independent
    assert [s.logprob for s in segs[4:]] == [0.0, 0.0]


def test_revision_turn_reuses_the_bad_paths_next_prompt():
    good, bad = trajectory(["a", "b", "c"], 1.0), trajectory(["a", "c", "c"], 0.0)
    builder = RevisionBuilder(include_good=False)
    [example] = builder.build(search(good, bad), PB, ScriptedJudge({1: "bad"}))
    assert example.info["revision_step"] == 1 and example.info["revision_point"] == "judged"
    segs = example.segments
    assert [s.train for s in segs] == [False, False, True, True, True]
    assert segs[2].prompt == bad.steps[2].prompt  # exactly the state after bad step 1
    assert [s.completion for s in segs[3:]] == [act("b"), act("c")]
    assert segs[3].prompt == PB(History("at a", (act("a"), act("c"), segs[2].completion), VALID))


def test_fallback_splices_at_the_divergence_point():
    good, bad = trajectory(["a", "b", "c"], 1.0), trajectory(["a", "c", "c"], 0.0)
    judge = ScriptedJudge({})  # nothing judged Bad
    [example] = RevisionBuilder(include_good=False).build(search(good, bad), PB, judge)
    info = example.info
    assert (info["revision_point"], info["divergence"], info["revision_step"]) == ("fallback", 1, 1)
    assert info["judgements"] == ["good", "good"]
    assert [s.train for s in example.segments] == [False, False, True, True, True]
    assert [s.completion for s in example.segments[:2]] == [act("a"), act("c")]


def test_divergence_at_the_root_renders_the_root_observation():
    good, bad = trajectory(["b", "a"], 1.0), trajectory(["c", "c"], 0.0)
    [example] = RevisionBuilder(include_good=False).build(
        search(good, bad), PB, ScriptedJudge({0: "bad"})
    )
    assert (example.info["divergence"], example.info["revision_step"]) == (0, 0)
    segs = example.segments
    revision = "THOUGHT: " + DEFAULT_REVISION_THOUGHTS[0]
    assert [s.completion for s in segs] == [act("c"), revision, act("b"), act("a")]
    assert [s.train for s in segs] == [False, True, True, True]
    assert segs[1].prompt == bad.steps[1].prompt
    assert segs[2].prompt == PB(History("start", (act("c"), revision), VALID))


def test_output_is_deterministic_and_good_paths_are_mixed_in():
    result = search(
        trajectory(["a", "b", "c"], 1.0), trajectory(["a", "c", "c"], 0.0), trajectory(["b"], 0.8)
    )
    builder = RevisionBuilder(max_good_per_task=1)
    first = builder.build(result, PB, ScriptedJudge({2: "bad"}))
    assert [e.to_dict() for e in first] == [
        e.to_dict() for e in builder.build(result, PB, ScriptedJudge({2: "bad"}))
    ]
    assert [e.source for e in first] == ["revision", "good"]
    assert [
        SFTExample.from_dict(json.loads(json.dumps(e.to_dict()))) for e in first
    ] == first  # buffer round trip
    good = first[1]
    assert good.info == {"trajectory": 0, "reward": 1.0, "success": True}
    assert [s.completion for s in good.segments] == [act("a"), act("b"), act("c")] and all(
        s.train for s in good.segments
    )
    assert [
        e.source
        for e in RevisionBuilder(max_good_per_task=None).build(result, PB, ScriptedJudge({}))
    ] == ["revision", "good", "good"]
    assert [
        e.source for e in RevisionBuilder(include_good=False).build(result, PB, ScriptedJudge({}))
    ] == ["revision"]


def test_a_prompt_from_another_builder_is_refused():
    good, bad = trajectory(["a", "b", "c"], 1.0), trajectory(["a", "c"], 0.0)
    # max_previous=1 renders good step 2 with only its newest earlier action
    with pytest.raises(ValueError, match="prompt builder"):
        RevisionBuilder().build(search(good, bad), PromptBuilder(max_previous=1), ScriptedJudge({}))


# -- pair selection -------------------------------------------------------------


def paths() -> list[Trajectory]:
    return [
        trajectory(["a", "b", "c"], 1.0),  # 0 good
        trajectory(["a", "c", "c"], 0.0),  # 1 bad: shares "a c" with 2, only "a" with 0
        trajectory(["a", "c", "a"], 0.8),  # 2 good (alpha .5); only .2 below 0: not more than beta
        trajectory(["b", "a"], 0.7),  # 3 good; bad against 0 (gap .3), not against 2 (gap .1)
        trajectory(["a", "c", "c"], 0.0),  # 4 the same commands as 1: counted once
        trajectory(["a", "c"], 0.0),  # 5 a prefix of 2 (nothing to revise there): pairs with 0
        trajectory(["c"], 0.5),  # 6 d = 0 with 0 and 2 (3 is only .2 above): the higher value wins
    ]


def test_pairs_with_alpha_beta_prefix_and_cap():
    assert RevisionBuilder(alpha=0.5, beta=0.2).pairs(paths()) == [
        RevisionPair(good=2, bad=1, divergence=2),  # the adjacent good path, not the best one
        RevisionPair(good=0, bad=3, divergence=0),
        RevisionPair(good=0, bad=5, divergence=1),
        RevisionPair(good=0, bad=6, divergence=0),
    ]
    assert RevisionBuilder(alpha=0.5, beta=0.2, max_revisions_per_task=2).pairs(paths()) == [
        RevisionPair(good=2, bad=1, divergence=2),
        RevisionPair(good=0, bad=3, divergence=0),
    ]
    assert RevisionBuilder(alpha=0.9, beta=0.2).pairs(paths()) == [
        RevisionPair(good=0, bad=1, divergence=1),
        RevisionPair(good=0, bad=3, divergence=0),
        RevisionPair(good=0, bad=5, divergence=1),
        RevisionPair(good=0, bad=6, divergence=0),
    ]
    assert RevisionBuilder(alpha=0.5, beta=0.6).pairs(paths()) == [
        RevisionPair(good=2, bad=1, divergence=2),
        RevisionPair(good=0, bad=5, divergence=1),
    ]
    assert RevisionBuilder(alpha=1.0, beta=0.0).pairs(paths()[1:]) == []  # no good path


def test_no_pairs_means_no_judge_and_only_good_paths():
    def no_model(model, tokenizer):
        raise AssertionError("the judge is built only when there is a pair")

    result = search(trajectory(["a", "b"], 1.0), trajectory(["a", "c"], 0.9))
    examples = RevisionBuilder(judge=no_model).from_search(result, policy())
    assert [e.source for e in examples] == ["good", "good"]


def test_good_only_ablation_trains_on_the_same_good_paths_without_a_judge():
    def no_model(model, tokenizer):
        raise AssertionError("the good-only ablation never judges a step")

    result = search(
        trajectory(["a", "b", "c"], 1.0), trajectory(["a", "c", "c"], 0.0), trajectory(["b"], 0.8)
    )
    full = RevisionBuilder().build(result, PB, ScriptedJudge({2: "bad"}))
    good_only = RevisionBuilder(include_revisions=False, judge=no_model).from_search(result, policy())
    assert [e.source for e in full] == ["revision", "good", "good"]
    assert [e.to_dict() for e in good_only] == [e.to_dict() for e in full if e.source == "good"]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"include_revisions": False, "include_good": False}, "pairs.include_revisions"),
        ({"alpha": 1.5}, "pairs.alpha"),
        ({"beta": 1.0}, "pairs.beta"),
        ({"beta": -0.1}, "pairs.beta"),
        ({"max_revisions_per_task": 0}, "pairs.max_revisions_per_task"),
        ({"max_good_per_task": -1}, "pairs.max_good_per_task"),
        ({"revision_thoughts": []}, "pairs.revision_thoughts"),
        ({"revision_thoughts": ["ok", " "]}, "pairs.revision_thoughts"),
    ],
)
def test_bad_values_name_their_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        RevisionBuilder(**kwargs)


# -- the actor judge --------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    from agentq.models.loading import TinyRandomModel

    return TinyRandomModel().load()


def test_actor_judge_reads_the_three_label_tokens(tiny):
    model, tokenizer = tiny
    judge = ActorStepJudge(model, tokenizer)
    assert [tokenizer.decode([i]) for i in judge.label_ids] == ["Good", "Bad", "Un"]
    bad = trajectory(["a", "c", "c"], 0.0)
    label = judge("start", bad.steps[:1], bad.steps[1])
    assert label in LABELS and judge("start", bad.steps[:1], bad.steps[1]) == label  # deterministic
    # the label is the argmax of the model's own logits restricted to the three tokens
    from agentq.agent.policy import encode_chat

    ids = encode_chat(tokenizer, judge.messages("start", bad.steps[:1], bad.steps[1]), 2048)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
    assert label == LABELS[int(logits[judge.label_ids].argmax())]
    probs = judge.probabilities("start", bad.steps[:1], bad.steps[1])
    assert sum(probs.values()) == pytest.approx(1.0) and max(probs, key=probs.get) == label
    user = judge.messages("start", bad.steps[:1], bad.steps[1])[1]["content"]
    assert "Commands so far:\n1. a" in user and "Command: c\nEnvironment response:\nat a/c" in user


def test_actor_judge_is_the_default_judge_of_from_search(tiny):
    model, tokenizer = tiny
    good, bad = trajectory(["a", "b"], 1.0), trajectory(["a", "c"], 0.0)
    pb = SimpleNamespace(model=model, tokenizer=tokenizer, prompt=PB)
    [example] = RevisionBuilder(include_good=False).from_search(search(good, bad), pb)
    assert example.info["judgements"][0] in LABELS and example.info["revision_step"] == 1
