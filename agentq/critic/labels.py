"""How every critic reads the LLM: its next-token distribution restricted to answer labels.

A critic's prompt asks for one of fixed labels (a candidate's number, Good /
Bad / Uncertain, sure / likely / impossible, ...). Instead of generating an
answer and parsing it, the critic reads the model's next-token distribution
at the end of the prompt, restricted to the labels and renormalised over
them: one forward of the prompt, through the critic's
:class:`~agentq.models.prefix_cache.PrefixCache` when it keeps one. The
answer always parses and is the model's own choice, which matters with small
models that rarely answer in the requested format (our departure from the
papers' free-text answers).

How a label is read (``read``):

- ``"whole"``: through all its tokens. Labels that are several tokens
  (SmolLM2 writes " 10" as " ", "1", "0") are scored exactly by chaining the
  restricted distribution through their tokens (one short cached forward per
  branching point); where one label is a prefix of another (" 1" and " 10"),
  the shorter one gets the mass of every token other than the longer one's
  continuation. Computed in float64 from the full softmax.
- ``"first"``: by its first token ("Uncertain" is "Un" + "certain" for
  SmolLM2); the first tokens must differ. The float32 softmax of the
  next-token logits at those tokens.
- ``"single"``: as ``"first"``, every label being one token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from agentq.agent.policy import encode_chat
from agentq.models.prefix_cache import PrefixCache
from agentq.records.history import Messages

Read = Literal["whole", "first", "single"]


@dataclass
class _Trie:
    children: dict[int, _Trie] = field(default_factory=dict)
    label: int | None = None  # the label whose tokens end here


class LabelDistribution:
    """p(label | prompt) over fixed answer labels, restricted to them and renormalised.

    Args:
        tokenizer: the model's; encodes the prompt and the labels.
        labels: the answer strings, in the order of the probabilities returned.
        owner: the critic, named in errors.
        read: ``"whole"``, ``"first"`` or ``"single"`` (the module docstring).
        answer_prefix: text appended after the chat template's opened assistant
            turn, so the next token is the label ("" for none).
    """

    def __init__(
        self,
        tokenizer,
        labels: Sequence[str],
        owner: str,
        *,
        read: Read = "whole",
        answer_prefix: str = "",
    ) -> None:
        if read not in ("whole", "first", "single"):
            raise ValueError(f"{owner}: unknown label reading {read!r}")
        self.tokenizer, self.labels, self.read = tokenizer, tuple(labels), read
        self.token_ids: list[tuple[int, ...]] = []
        for label in self.labels:
            ids = tuple(tokenizer.encode(label, add_special_tokens=False))
            if read == "single" and len(ids) != 1:
                raise ValueError(
                    f"{owner}: the answer label {label!r} is not one token for this tokenizer"
                )
            if not ids:
                raise ValueError(f"{owner}: the answer label {label!r} encodes to no tokens")
            if read == "whole" and ids in self.token_ids:
                other = self.labels[self.token_ids.index(ids)]
                raise ValueError(
                    f"{owner}: the answer labels {other!r} and {label!r} encode to the same tokens {list(ids)}"
                )
            self.token_ids.append(ids)
        self.first_ids = [ids[0] for ids in self.token_ids]
        if read != "whole" and len(set(self.first_ids)) != len(self.labels):
            raise ValueError(
                f"{owner}: the labels {', '.join(self.labels)} do not start with distinct tokens"
            )
        self.trie = _trie(self.token_ids)
        self.answer_ids = (
            tokenizer.encode(answer_prefix, add_special_tokens=False) if answer_prefix else []
        )

    def prompt_ids(self, messages: Messages, max_prompt_tokens: int) -> list[int]:
        """The chat-templated prompt (its newest ``max_prompt_tokens``), then the answer prefix."""
        return encode_chat(self.tokenizer, messages, max_prompt_tokens) + self.answer_ids

    @torch.no_grad()
    def logits(
        self,
        model,
        messages: Messages,
        max_prompt_tokens: int,
        prefix_cache: PrefixCache | None = None,
    ) -> torch.Tensor:
        """The next-token logits at the labels' first tokens, (n,). ``prefix_cache``:
        the critic's (None: a plain forward of the whole prompt)."""
        _, logits = _prefill(
            model, self.prompt_ids(messages, max_prompt_tokens), prefix_cache
        )  # (1, V)
        return logits[0, self.first_ids]

    @torch.no_grad()
    def __call__(
        self,
        model,
        messages: Messages,
        max_prompt_tokens: int,
        prefix_cache: PrefixCache | None = None,
    ) -> list[float]:
        """p(label | messages) for each label."""
        if self.read != "whole":
            logits = self.logits(model, messages, max_prompt_tokens, prefix_cache)  # (n,)
            return torch.softmax(logits.float(), dim=-1).tolist()
        if len(self.labels) == 1:
            return [1.0]
        return self._chain(model, self.prompt_ids(messages, max_prompt_tokens), prefix_cache)

    def _chain(self, model, prompt_ids: list[int], prefix_cache: PrefixCache | None) -> list[float]:
        """Whole labels: one forward of the prompt, then one short forward on its
        cache per branching point inside multi-token labels."""
        probs = [0.0] * len(self.labels)
        cache, logits = _prefill(model, prompt_ids, prefix_cache)  # logits: (1, V)
        device = logits.device

        def resolve(
            node: _Trie, pending: list[int], mass: float, logits: torch.Tensor | None
        ) -> None:
            # Single-option stretches need no forward: their restricted probability is 1.
            while node.label is None and len(node.children) == 1:
                token, node = next(iter(node.children.items()))
                pending = [*pending, token]
            if not node.children:
                probs[node.label] += mass
                return
            if mass == 0.0:
                return
            if pending:
                ids = torch.tensor([pending], dtype=torch.long, device=device)  # (1, n)
                logits = model(
                    input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1
                ).logits[0, -1]
            p = torch.softmax(logits.double(), dim=-1)  # (V,)
            child_p = {t: float(p[t]) for t in node.children}
            continuing = sum(child_p.values())
            if node.label is not None:  # the label ends here: it takes every other token's mass
                probs[node.label] += mass * max(0.0, 1.0 - continuing)
                total = max(1.0, continuing)
            elif continuing > 0:
                total = continuing
            else:  # every label token underflowed: no preference
                child_p, total = dict.fromkeys(child_p, 1.0), float(len(child_p))
            for token, child in node.children.items():
                resolve(child, [token], mass * child_p[token] / total, None)
            if pending:
                cache.crop(-len(pending))

        resolve(self.trie, [], 1.0, logits[0])
        return probs


def _trie(token_ids: Sequence[tuple[int, ...]]) -> _Trie:
    """The labels' tokens as a tree; a node where label i's tokens end has ``label = i``."""
    root = _Trie()
    for i, ids in enumerate(token_ids):
        node = root
        for token in ids:
            node = node.children.setdefault(token, _Trie())
        node.label = i
    return root


def _prefill(model, prompt_ids: list[int], prefix_cache: PrefixCache | None):
    """(KV cache, logits (1, V) at the prompt's last position)."""
    return (prefix_cache if prefix_cache is not None else PrefixCache(enabled=False)).prefill(
        model, prompt_ids
    )
