"""Constrained decoding of the COMMAND field (agentq.agent.constrained).

The tiny random model writes random tokens: it never writes ``COMMAND:`` on
its own, so these tests exercise the budget forcing, the trie over listed
actions, the free ``search[...]`` argument and its length cap.
"""

from __future__ import annotations

import pytest
import torch

from agentq.agent.action import parse_composite
from agentq.agent.constrained import CommandConstraint, TokenTable
from agentq.agent.grounding import Grounder
from agentq.models import TinyRandomModel, completion_logprobs, sample_k
from agentq.models.sampling import Sample

RESULTS_PAGE = ["click[Back to Search]", "click[Next >]", "click[B08H6TFG8S]", "click[B0L2UU1J61]"]
SEARCH_PAGE = ["search[...]"]


@pytest.fixture(scope="module")
def tiny():
    return TinyRandomModel().load()


@pytest.fixture(scope="module")
def table(tiny):
    return TokenTable(tiny[1])


@pytest.fixture(scope="module")
def prompt(tiny) -> list[int]:
    messages = [{"role": "user", "content": "Buy a mauve lipstick. What is your command?"}]
    return tiny[1].apply_chat_template(messages, add_generation_prompt=True, return_dict=False)


def draw(tiny, table, prompt, actions, *, k=6, temperature=1.0, max_new_tokens=48, seed=0) -> list[Sample]:
    model, tokenizer = tiny
    constraint = CommandConstraint(table, actions, eos_token_ids={2}, max_new_tokens=max_new_tokens)
    return sample_k(
        model, prompt, k, tokenizer=tokenizer, max_new_tokens=max_new_tokens, temperature=temperature,
        eos_token_ids={2}, generator=torch.Generator().manual_seed(seed), constraint=constraint,
    )


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_command_is_a_listed_action(tiny, table, prompt, temperature):
    for sample in draw(tiny, table, prompt, RESULTS_PAGE, temperature=temperature):
        assert parse_composite(sample.text).command in RESULTS_PAGE, sample.text


def test_search_argument_is_one_line_and_closed(tiny, table, prompt):
    grounder = Grounder()
    for sample in draw(tiny, table, prompt, SEARCH_PAGE, k=8):
        command = parse_composite(sample.text).command
        assert command.startswith("search[") and command.endswith("]"), sample.text
        assert "\n" not in command
        # The template is filled with the same words (whitespace normalised).
        words = command[len("search[") : -1].split()
        assert grounder(command, SEARCH_PAGE).command == f"search[{' '.join(words)}]"


def test_a_free_unconstrained_run_rarely_writes_a_listed_command(tiny, prompt):
    """The control: without the constraint the random model lists nothing."""
    model, tokenizer = tiny
    samples = sample_k(model, prompt, 6, tokenizer=tokenizer, max_new_tokens=48, temperature=1.0,
                       eos_token_ids={2}, generator=torch.Generator().manual_seed(0))
    assert not any(parse_composite(s.text).command in RESULTS_PAGE for s in samples)


def test_logprob_is_the_raw_models_likelihood_of_the_emitted_tokens(tiny, table, prompt):
    model, _ = tiny
    samples = draw(tiny, table, prompt, RESULTS_PAGE, k=3)
    for sample in samples:
        ids = torch.tensor([list(prompt) + list(sample.token_ids)])
        completion = torch.zeros_like(ids, dtype=torch.bool)
        completion[0, len(prompt):] = True
        with torch.no_grad():
            expected = completion_logprobs(model, ids, torch.ones_like(ids), completion)
        assert sample.logprob == pytest.approx(float(expected[0]), abs=1e-3)


def test_trigger_written_by_the_model_starts_the_action(table):
    """A sample that writes ``COMMAND:`` itself is constrained from the next token on."""
    constraint = CommandConstraint(table, RESULTS_PAGE, eos_token_ids={2}, max_new_tokens=200)
    constraint.begin(1)
    for token in table.encode("THOUGHT: open the first result.\nCOMMAND:"):
        assert constraint.mask(0, 0) is not None  # free text, only end tokens banned
        assert constraint.mask(0, 0)[2] == float("-inf")
        constraint.update(0, token)
    allowed = (constraint.mask(0, 0) == 0).nonzero().flatten().tolist()
    assert sorted(allowed) == sorted(set(table.encode(" click")))  # every listed action starts " click"
    for token in table.encode(" click[Next >]\n"):
        constraint.update(0, token)
    assert constraint.mask(0, 1) is None  # the command is written: free again, end allowed


@pytest.mark.parametrize("header", ["**Command:**", "command -", "ACTION:", "  COMMAND :"])
def test_any_header_the_parser_reads_starts_the_action(table, header):
    """The parser takes the first COMMAND header in any spelling; the constraint must
    catch the same one, or an unconstrained command would win."""
    constraint = CommandConstraint(table, RESULTS_PAGE, eos_token_ids={2}, max_new_tokens=200)
    constraint.begin(1)
    text = f"THOUGHT: open the first result.\n{header}"
    for token in table.encode(text):
        constraint.update(0, token)
    mask = constraint.mask(0, 0)
    written = ""
    while mask is not None and (mask == 0).sum() < 1000:
        token = int((mask == 0).nonzero()[0])  # follow the first path to an action
        written += table.text[token]
        constraint.update(0, token)
        mask = constraint.mask(0, 0)
    assert parse_composite(text + written).command in RESULTS_PAGE


def test_trigger_inside_a_line_is_not_a_field(table):
    """``THOUGHT: ... COMMAND: x`` on one line is no COMMAND field for the parser, nor here."""
    constraint = CommandConstraint(table, RESULTS_PAGE, eos_token_ids={2}, max_new_tokens=200)
    constraint.begin(1)
    for token in table.encode("THOUGHT: I will write COMMAND:"):
        constraint.update(0, token)
    assert (constraint.mask(0, 0) == 0).sum() > 1000  # still free text


def test_rejects_an_empty_action_list(table):
    with pytest.raises(ValueError, match="at least one valid action"):
        CommandConstraint(table, [], eos_token_ids={2}, max_new_tokens=48)


LONG_TITLES = [  # forced for many tokens once a title is chosen: what jump-forward skips
    "click[Back to Search]",
    "click[Sleek navy ergonomic office chair with padded armrests and lumbar support]",
    "click[Waterproof men's hiking boots, breathable, non-slip sole, size 10.5]",
]


@pytest.mark.parametrize("actions", [LONG_TITLES, SEARCH_PAGE])
@pytest.mark.parametrize("tail", [None, 3])
def test_jump_forward_writes_the_same_tokens_and_logprobs(tiny, table, prompt, actions, tail):
    """Forced tokens scored in one forward: greedy tokens equal, log-probs within 1e-4 of one forward per token."""
    model, tokenizer = tiny
    runs, forwards = {}, {}
    for jump in (False, True):
        constraint = CommandConstraint(table, actions, eos_token_ids={2}, max_new_tokens=48, max_tail_tokens=tail)
        calls: list[int] = []
        hook = model.register_forward_pre_hook(lambda *_, calls=calls: calls.append(1))
        runs[jump] = sample_k(
            model, prompt, 1, tokenizer=tokenizer, max_new_tokens=48, temperature=0.0,
            eos_token_ids={2}, constraint=constraint, jump_forward=jump,
        )[0]
        hook.remove()
        forwards[jump] = len(calls)
    assert forwards[True] < forwards[False]  # the forced "COMMAND:" trigger at least ran in one forward
    assert runs[True].token_ids == runs[False].token_ids
    assert runs[True].logprob == pytest.approx(runs[False].logprob, abs=1e-4)
    ids = torch.tensor([list(prompt) + list(runs[True].token_ids)])
    completion = torch.zeros_like(ids, dtype=torch.bool)
    completion[0, len(prompt) :] = True
    with torch.no_grad():
        expected = completion_logprobs(model, ids, torch.ones_like(ids), completion)
    assert runs[True].logprob == pytest.approx(float(expected[0]), abs=1e-4)


def test_tail_cap_cuts_the_action_after_its_command(tiny, table, prompt):
    model, tokenizer = tiny
    constraint = CommandConstraint(table, LONG_TITLES, eos_token_ids={2}, max_new_tokens=48, max_tail_tokens=2)
    sample = sample_k(
        model, prompt, 1, tokenizer=tokenizer, max_new_tokens=48, temperature=0.0,
        eos_token_ids={2}, constraint=constraint,
    )[0]
    command = parse_composite(sample.text).command
    assert command in LONG_TITLES
    tail = sample.text.split(command, 1)[1]
    assert tail.startswith("\n")  # the command line ends, then at most 2 more tokens
    assert len(tokenizer.encode(tail.lstrip("\n"), add_special_tokens=False)) <= 2
    assert not sample.finished  # cut, as max_new_tokens cuts, not an end token


# The same rule as a regex, for engines that take one (engine=openvino).


def test_the_regex_free_line_is_exactly_a_line_without_a_command_header():
    """A free line is one none of whose prefixes the token path reads as a COMMAND header."""
    import random
    import re

    from agentq.agent.action import COMMAND_HEADER_LINE
    from agentq.agent.constrained import _FREE_LINE

    free_line, rng, alphabet = re.compile(_FREE_LINE), random.Random(0), "cCoOmMaAnNdDtTiI *_-:\t#>xy"
    for _ in range(20_000):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        header = any(COMMAND_HEADER_LINE.match(line[:i]) for i in range(len(line) + 1))
        assert bool(free_line.fullmatch(line)) is not header, line


@pytest.mark.parametrize("actions", [RESULTS_PAGE, SEARCH_PAGE, LONG_TITLES])
def test_every_token_path_sample_matches_the_regex(tiny, table, prompt, actions):
    """The two forms of the rule agree: what the logits mask lets through, the regex accepts."""
    import re

    constraint = CommandConstraint(table, actions, eos_token_ids={2}, max_new_tokens=48)
    pattern = re.compile(constraint.regex())
    for sample in draw(tiny, table, prompt, actions, k=6):
        assert pattern.fullmatch(sample.text), sample.text
    assert not pattern.fullmatch("THOUGHT: x\nCOMMAND: click[Not listed]\n")
    assert not pattern.fullmatch("THOUGHT: no command at all")


def test_settle_forces_a_late_command_and_caps_the_tail(table):
    def ids(text: str) -> list[int]:
        return table.encode(text)

    constraint = CommandConstraint(table, RESULTS_PAGE, eos_token_ids={2}, max_new_tokens=48, max_tail_tokens=2)
    early = ids("THOUGHT: go.\nCOMMAND: click[Next >]\nEXPLANATION: the next page of results")
    keep, force = constraint.settle(early)
    assert not force and table.tokenizer.decode(early[:keep]).startswith("THOUGHT: go.\nCOMMAND: click[Next >]\n")
    assert keep == len(ids("THOUGHT: go.\nCOMMAND: click[Next >]\n")) + 2  # two tail tokens kept
    late = ids("THOUGHT: " + "very " * constraint.force_at + "\nCOMMAND: click[Next >]\n")
    assert constraint.settle(late) == (constraint.force_at, True)  # cut where the token path forces the trigger
    assert constraint.settle(late, forced=True)[1] is False


def test_a_policy_told_to_exclude_commands_never_proposes_them(tiny):
    from agentq.agent.policy import LLMPolicy, Sampling
    from agentq.agent.prompt import PromptBuilder
    from agentq.records.history import History

    model, tokenizer = tiny
    policy = LLMPolicy(
        model, tokenizer, prompt=PromptBuilder(), grounder=Grounder(),
        sampling=Sampling(max_new_tokens=48, constrain_command=True, reuse_prefix_cache=False),
    )
    history = History("Results page", valid_actions=tuple(RESULTS_PAGE))
    seed = torch.Generator().manual_seed(0)
    free = {c.command for c in policy.propose(history, 16, generator=seed)}
    assert len(free) > 2  # the random model spreads over the page: excluding has work to do
    excluded = set(RESULTS_PAGE[:2])
    kept = policy.propose(history, 16, generator=torch.Generator().manual_seed(0), exclude=excluded)
    assert len(kept) == 16 and {c.command for c in kept} <= set(RESULTS_PAGE[2:])
    assert all(c.prompt == kept[0].prompt for c in kept)  # the prompt still lists every action
    assert "click[Back to Search]" in kept[0].prompt[-1]["content"]
    assert policy.propose(history, 4, exclude=set(RESULTS_PAGE)) == []
    free_policy = LLMPolicy(model, tokenizer, prompt=PromptBuilder(), grounder=Grounder(), sampling=Sampling())
    with pytest.raises(ValueError, match="constrain_command=true"):
        free_policy.propose(history, 2, exclude=excluded)
