"""Constrained decoding of the COMMAND field onto the environment's valid actions.

A 135M model writes a sound-looking composite action but often a command that
is not on the page: a product id copied from the demonstration, a search on
the results page, a click on the search page. Grounding after the fact (docs/method.md
§2, :mod:`agentq.agent.grounding`) rewrites only a command that is clearly a
listed action and sends the rest to the env, which refuses it: a wasted step.
Here the model itself chooses: while it writes
PLAN and THOUGHT it is free; once it has written ``COMMAND:`` only tokens that
continue one of the valid actions are allowed, so the command is the valid
action the model finds most likely (greedy) or a draw from its distribution
restricted to valid actions (sampling). The rest of the composite is free
again. A template action ``verb[...]`` (WebShop's ``search[...]``) is forced
up to its ``[``, then the argument is free text on one line up to ``]``.

Only the proposal changes. Each sample's log-prob is still the model's raw
log-likelihood of the tokens it emitted, so DPO trains on, and references,
what the model itself assigns to the text.

The state machine runs on token ids with a precomputed token-text table, so a
decode step costs a few dictionary lookups per sequence.

Engines without a per-step logits hook (OpenVINO GenAI) take the same rule as a
regular expression over the completion's text (:meth:`CommandConstraint.regex`,
enforced by the engine's grammar sampler): free lines that are not a COMMAND
header, the header, one valid action, then a free tail. The budget rules that a
regex cannot count (forcing ``COMMAND:`` when the budget runs short, the tail
cap) are applied afterwards on the emitted tokens (:meth:`CommandConstraint.settle`).
A regex constrains strings, not token ids, so the engine may spell an action in
other tokens than the tokenizer's own (e.g. ``" "`` then ``"search"`` where the
trie allows only ``" search"``): same action set, not the same distribution.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from agentq.agent.action import COMMAND_HEADER_LINE, COMMAND_NAMES, LEAD_CHARS, TRAIL_CHARS
from agentq.agent.grounding import TEMPLATE

TRIGGER = "COMMAND:"  # what is forced when a sample runs short of budget
_MAX_ARGUMENT_TOKENS = 12  # a search query longer than this (~10 words) is closed with "]"
_MAX_ARGUMENT_CHARS = 10 * _MAX_ARGUMENT_TOKENS  # the regex's bound: tokens of <= 10 characters


class TokenTable:
    """Per-token decoded text of a tokenizer, computed once per policy."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.size = len(tokenizer)
        self.text = [tokenizer.decode([i]) for i in range(self.size)]
        # Inside a free ``[...]`` argument: one line, "]" only as the last character.
        self.argument_ok = torch.tensor(
            [_argument_token(t) for t in self.text], dtype=torch.bool
        )  # (V,)
        self.closes_argument = [t.endswith("]") for t in self.text]

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)


def _argument_token(text: str) -> bool:
    return "\n" not in text and (text.count("]") == 0 or (text.count("]") == 1 and text.endswith("]")))


@dataclass
class _Trie:
    children: dict[int, _Trie] = field(default_factory=dict)
    end: bool = False  # a whole valid action (with its newline) ends here
    argument: bool = False  # a template's "[" ends here: free argument follows


def _build_trie(table: TokenTable, actions: Sequence[str], prefix: str) -> _Trie:
    root = _Trie()
    for action in actions:
        if action.endswith(TEMPLATE):
            ids, leaf = table.encode(prefix + action[: -len(TEMPLATE)] + "["), "argument"
        else:
            ids, leaf = table.encode(prefix + action + "\n"), "end"
        node = root
        for token in ids:
            node = node.children.setdefault(token, _Trie())
        setattr(node, leaf, True)
    return root


@dataclass
class _State:
    phase: str = "free"  # free | forcing | action | argument | close | done
    node: _Trie | None = None
    line: str = ""  # the text of the current line, to spot a COMMAND header
    argument_tokens: int = 0
    forced: list[int] = field(default_factory=list)
    tail_tokens: int = 0  # written after the command line


class CommandConstraint:
    """Keeps the COMMAND line of each sample on ``valid_actions``.

    Args:
        table: the tokenizer's token texts.
        valid_actions: what the environment accepts; ``verb[...]`` entries are templates.
        eos_token_ids: end tokens, banned until the command is written.
        max_new_tokens: the generation budget. A sample that has not reached
            ``COMMAND:`` when only enough budget for the longest action is
            left gets ``\\nCOMMAND:`` forced, so every sample carries a command.
        max_tail_tokens: tokens a sample may write after its command line (the
            EXPLANATION) before it is cut, as ``max_new_tokens`` cuts it; None: no cap.
    """

    def __init__(
        self,
        table: TokenTable,
        valid_actions: Sequence[str],
        *,
        eos_token_ids: Collection[int],
        max_new_tokens: int,
        max_tail_tokens: int | None = None,
    ) -> None:
        if not valid_actions:
            raise ValueError("CommandConstraint needs at least one valid action")
        self.table = table
        self.with_space = _build_trie(table, valid_actions, " ")
        self.without_space = _build_trie(table, valid_actions, "")
        eos = sorted(eos_token_ids)
        self.no_eos = torch.zeros(table.size)  # (V,) additive
        self.no_eos[eos] = float("-inf")
        self.argument = torch.where(table.argument_ok, self.no_eos, float("-inf"))  # (V,)
        self.newline = table.encode("\n")
        self.close = table.encode("]\n")
        self.force_trigger = table.encode("\n" + TRIGGER)
        reserve = _depth(self.with_space)
        if any(a.endswith(TEMPLATE) for a in valid_actions):
            reserve += _MAX_ARGUMENT_TOKENS + len(self.close)
        self.force_at = max_new_tokens - len(self.force_trigger) - reserve
        self.max_tail_tokens = max_tail_tokens
        self.valid_actions = tuple(valid_actions)
        # The forced continuation's budget on an engine that may spell it one character a token.
        self.forced_chars = len("\n" + TRIGGER + " \n") + max(map(_most_chars, valid_actions))
        self.states: list[_State] = []

    def begin(self, k: int) -> None:
        self.states = [_State() for _ in range(k)]

    def mask(self, sample: int, step: int) -> Tensor | None:
        """Additive logits mask (V,) for ``sample`` at decode ``step``; None when free."""
        state = self._at(sample, step)
        if state.forced:
            return self._only([state.forced[0]])
        if state.phase == "free":
            return self.no_eos
        if state.phase == "action":
            return self._only(list(state.node.children))
        if state.phase == "argument":
            return self.argument
        return None

    def forced_token(self, sample: int, step: int) -> int | None:
        """The one token ``sample`` may write at ``step``, or None when it has a choice.
        A decoder may append such tokens without sampling (they still need scoring)."""
        state = self._at(sample, step)
        if state.forced:
            return state.forced[0]
        if state.phase == "action" and len(state.node.children) == 1:
            return next(iter(state.node.children))
        return None

    def exhausted(self, sample: int) -> bool:
        """``sample`` has written its ``max_tail_tokens`` after the command: stop it."""
        state = self.states[sample]
        return self.max_tail_tokens is not None and state.phase == "done" and state.tail_tokens >= self.max_tail_tokens

    def _at(self, sample: int, step: int) -> _State:
        state = self.states[sample]
        if state.phase == "free" and 0 <= self.force_at <= step:
            state.phase, state.forced = "forcing", list(self.force_trigger)
        return state

    def update(self, sample: int, token: int) -> None:
        """Advance ``sample``'s state past the emitted ``token``."""
        state = self.states[sample]
        if state.phase == "done":
            state.tail_tokens += 1
        elif state.forced:
            state.forced.pop(0)
            if not state.forced:  # "forcing" wrote the trigger; "close" ended the command
                state.phase, state.node = ("action", self.with_space) if state.phase == "forcing" else ("done", None)
        elif state.phase == "free":
            # The first COMMAND header the parser would read starts the action.
            state.line = (state.line + self.table.text[token]).rsplit("\n", 1)[-1]
            if COMMAND_HEADER_LINE.match(state.line):
                trie = self.without_space if state.line[-1:].isspace() else self.with_space
                state.phase, state.node = "action", trie
        elif state.phase == "action":
            state.node = state.node.children[token]
            if state.node.children:
                return  # a longer action shares this prefix
            state.phase = "argument" if state.node.argument else "done"
        elif state.phase == "argument":
            state.argument_tokens += 1
            if self.table.closes_argument[token]:
                state.phase, state.forced = "close", list(self.newline)
            elif state.argument_tokens >= _MAX_ARGUMENT_TOKENS:
                state.phase, state.forced = "close", list(self.close)

    def regex(self, *, forced: bool = False) -> str:
        """The rule as a regex over the completion's text, for grammar-constrained engines.

        ``forced``: the continuation after a sample was cut at ``force_at``: the
        trigger and one action, as the token path forces them. It ends with the
        command line (the token path has only its reserve left for a tail there), so
        its budget is ``forced_chars``, not the tokens left."""
        action = "(" + "|".join(_action_regex(a) for a in self.valid_actions) + ")"
        if forced:
            return _literal("\n" + TRIGGER) + f" {action}\\n"
        return f"(({_FREE_LINE})\\n)*{_HEADER_REGEX} {action}\\n(.|\\n)*"

    def settle(self, token_ids: Sequence[int], *, forced: bool = False) -> tuple[int, bool]:
        """How many of a grammar-constrained completion's tokens the token path keeps.

        Returns ``(keep, force)``: with ``force`` the sample had not written its
        COMMAND header before ``force_at`` and continues, from its first ``keep``
        tokens, with ``regex(forced=True)``; otherwise ``keep`` cuts the tail at
        ``max_tail_tokens`` (or keeps everything)."""
        line, header, end = "", None, None
        for i, token in enumerate(token_ids):
            for char in self.table.text[token]:
                if header is None:
                    line = "" if char == "\n" else line + char
                    if COMMAND_HEADER_LINE.match(line):
                        header = i
                elif char == "\n" and end is None:
                    end = i
            if end is not None:
                break
        if not forced and 0 <= self.force_at <= (len(token_ids) if header is None else header):
            return self.force_at, True
        if end is None or self.max_tail_tokens is None:
            return len(token_ids), False
        return min(len(token_ids), end + 1 + self.max_tail_tokens), False

    def _only(self, allowed: list[int]) -> Tensor:
        mask = torch.full((self.table.size,), float("-inf"))
        mask[allowed] = 0.0
        return mask


_REGEX_SPECIAL = set("\\.^$*+?()[]{}|")


def _literal(text: str) -> str:
    return "".join("\\" + c if c in _REGEX_SPECIAL else ("\\n" if c == "\n" else c) for c in text)


def _either_case(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" for c in word)


def _most_chars(action: str) -> int:
    return len(action) - len(TEMPLATE) + 2 + _MAX_ARGUMENT_CHARS if action.endswith(TEMPLATE) else len(action)


def _action_regex(action: str) -> str:
    if action.endswith(TEMPLATE):  # the argument: one line, no "]"
        return _literal(action[: -len(TEMPLATE)] + "[") + rf"[^\]\n]{{0,{_MAX_ARGUMENT_CHARS}}}\]"
    return _literal(action)


def _not_header_line() -> str:
    """A line none of whose prefixes is a COMMAND header (``action.COMMAND_HEADER_LINE``):
    after the lead, a line that leaves every header's spelling before its ":" or "-"."""
    firsts = "".join(name[0].lower() + name[0] for name in COMMAND_NAMES)
    branches = [f"[^{LEAD_CHARS}{firsts}\\n][^\\n]*"]
    for name in COMMAND_NAMES:
        # The name's first i letters, then the line ends or leaves the name.
        tree = f"[{TRAIL_CHARS}]*([^{TRAIL_CHARS}:\\-\\n][^\\n]*)?"
        for i in range(len(name) - 1, -1, -1):
            if i < len(name) - 1:
                tree = f"({tree}|[^{_either_case(name[i + 1])[1:-1]}\\n][^\\n]*)?"
            tree = _either_case(name[i]) + tree
        branches.append(tree)
    return f"[{LEAD_CHARS}]*(" + "|".join(branches) + ")?"


_FREE_LINE = _not_header_line()
_HEADER_REGEX = f"[{LEAD_CHARS}]*({'|'.join(map(_either_case, COMMAND_NAMES))})[{TRAIL_CHARS}]*[:\\-]"


def _depth(node: _Trie) -> int:
    """Tokens on the longest path below ``node``."""
    return 1 + max(_depth(c) for c in node.children.values()) if node.children else 0
