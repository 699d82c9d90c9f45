"""Reuse of prompt KV caches across model calls: a radix tree of token segments.

Every prompt of a run starts with the same system message and demonstrations
(about 900 tokens on WebShop), and a node's prompt extends its parent's with
the action taken and the new observation. Prefilling prompts from scratch is
about half the cost of a composite action on a CPU. In a search the prompts
do not arrive in tree order (node, critic, child, rollout, back to the root,
another branch ...), so keeping only the last prompt's cache loses most of
what two prompts share. :class:`PrefixCache` keeps the KV caches of many
prompts in a radix tree (the structure of SGLang's RadixAttention, Zheng et
al. 2024, arXiv 2312.07104):

- a node holds the keys and values of its own token segment only, per layer
  ``(1, H, len(segment), D)``; a prompt's cache is the concatenation of the
  segments on its root-to-node path, so a child's cache is built from its
  parent's and nothing shared is stored twice;
- a prompt that leaves a node's segment part-way splits that node in two, and
  the tokens it adds become a new leaf below the split;
- memory is bounded by ``max_tokens`` cached tokens: the least recently used
  leaves are evicted first (a shared prefix is an inner node and outlives its
  leaves), never a node of the prompt just served.

The cache holds keys and values computed by one set of weights: a
``PrefixCache`` belongs to one policy (or critic) object and is dropped with
it; the loop builds new ones after every training phase (and the cache clears
itself if it is handed another model object).

Caches are scoped to one task (``agentq.agent.policy.forget_prompts``), so
each task would prefill the system message and demonstrations again (two
~1,000-token prompts per WebShop task: the first step's system message
differs). :class:`Preambles` holds those beginnings, computed once per model,
alone, and shared by every task's cache: a task's result still depends on its
own prompts only, because a preamble is always the same computation.

Memory: SmolLM2-135M in fp32 stores 30 layers x 3 KV heads x 64 dims x 2 (K
and V) x 4 bytes = 46,080 bytes per token, so the default 8,192 tokens hold
up to about 380 MB.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Node:
    """One token segment of the radix tree (the root's is empty)."""

    tokens: tuple[int, ...]
    kv: list[tuple[Tensor, Tensor]]  # per layer: keys, values, each (1, H, len(tokens), D)
    parent: _Node | None
    children: dict[int, _Node] = field(default_factory=dict)  # keyed by the child's first token
    last_used: int = 0  # the prefill count when a prompt last went through this node


class PrefixCache:
    """KV caches of earlier prompts in a radix tree; a prompt prefills only what no
    earlier prompt shares with it.

    Args:
        enabled: False runs every prefill from scratch (the plain path, for
            comparisons and benchmarks).
        max_tokens: bound on the tokens cached in the tree (memory is about
            this times the KV bytes per token, see the module docstring).
        max_leaves: bound on the cached prompts' leaves, None for none;
            1 keeps only the last prompt's path (the previous behaviour, for
            benchmarks).

    Attributes:
        reused_tokens, computed_tokens: prompt tokens taken from the tree and
            run through the model, summed over prefills.
        evicted_tokens: tokens dropped from the tree to stay within the bounds.
        num_tokens: tokens in the tree now.
    """

    def __init__(
        self,
        enabled: bool = True,
        max_tokens: int = 8192,
        max_leaves: int | None = None,
        preambles: Preambles | None = None,
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"PrefixCache: max_tokens must be >= 1, got {max_tokens}")
        if max_leaves is not None and max_leaves < 1:
            raise ValueError(f"PrefixCache: max_leaves must be >= 1 or None, got {max_leaves}")
        self.enabled = enabled
        self.max_tokens, self.max_leaves = max_tokens, max_leaves
        self.preambles = preambles
        self.reused_tokens = 0
        self.computed_tokens = 0
        self.evicted_tokens = 0
        self.clear()

    def clear(self) -> None:
        self.root = _Node(tokens=(), kv=[], parent=None)
        self.num_tokens = 0
        self._clock = 0
        self._model = None

    @torch.no_grad()
    def prefill(self, model, prompt_ids: Sequence[int]) -> tuple[DynamicCache, Tensor]:
        """KV cache of ``prompt_ids`` (a private object the caller may extend,
        repeat or crop: no tensor of it is stored in the tree) and the logits
        (1, V) at the last prompt position."""
        ids = list(prompt_ids)
        if not ids:
            raise ValueError("PrefixCache.prefill: prompt_ids is empty")
        device = model.get_input_embeddings().weight.device
        if not self.enabled:
            out = model(
                input_ids=torch.tensor([ids], device=device), use_cache=True, logits_to_keep=1
            )
            self.computed_tokens += len(ids)
            return out.past_key_values, out.logits[:, -1]
        if model is not self._model:  # keys and values of other weights are worthless
            self.clear()
            self._model = model

        path, matched = self._match(ids)
        # At least the last token is recomputed: its logits start the decode.
        reused = min(matched, len(ids) - 1)
        shared, kv = self.preambles.match(model, ids) if self.preambles else (0, [])
        if min(shared, len(ids) - 1) > reused:  # the task's tree holds less of it than a preamble
            reused = min(shared, len(ids) - 1)
            past = _cache_of(kv, reused)
        else:
            past = self._assemble(path, reused) if reused else None  # None: the model makes its own
        new = torch.tensor([ids[reused:]], dtype=torch.long, device=device)  # (1, P - reused)
        out = model(input_ids=new, past_key_values=past, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        self.reused_tokens += reused
        self.computed_tokens += len(ids) - reused
        if not _plain(cache):
            # Sliding-window or quantised layers do not keep every position: no tree.
            log.warning(
                "PrefixCache: %s does not return a DynamicCache of DynamicLayers; prefix reuse is off",
                type(model).__name__,
            )
            self.enabled = False
            self.clear()
            return cache, out.logits[:, -1]

        self._clock += 1
        for node in self._insert(path, ids, matched, cache):
            node.last_used = self._clock
        self._evict()
        return cache, out.logits[:, -1]

    def cached_prefix(self, prompt_ids: Sequence[int]) -> int:
        """Length of the longest prefix of ``prompt_ids`` the tree holds (no side effects)."""
        return self._match(list(prompt_ids))[1]

    # -- the tree ---------------------------------------------------------------
    def _match(self, ids: list[int]) -> tuple[list[tuple[_Node, int]], int]:
        """The longest cached prefix of ``ids``: the nodes it runs through, each
        with how many of its tokens match (all but maybe the last), and its length."""
        node, pos, path = self.root, 0, []
        while pos < len(ids):
            child = node.children.get(ids[pos])
            if child is None:
                break
            same = _common_prefix(child.tokens, ids, pos)
            path.append((child, same))
            pos += same
            if same < len(child.tokens):
                break
            node = child
        return path, pos

    def _assemble(self, path: list[tuple[_Node, int]], length: int) -> DynamicCache:
        """A new cache holding the first ``length`` (> 0) tokens of ``path``."""
        cache = DynamicCache()  # grows a DynamicLayer per update()d layer
        parts, left = [], length
        for node, _ in path:
            if left == 0:
                break
            take = min(left, len(node.tokens))
            parts.append((node, take))
            left -= take
        for layer in range(len(parts[0][0].kv)):
            # Each part (1, H, take, D), concatenated to (1, H, length, D). update()
            # concatenates onto an empty tensor, so the cache owns a copy even of a
            # single part: in-place changes by the caller never reach the tree.
            keys = torch.cat([node.kv[layer][0][..., :take, :] for node, take in parts], dim=-2)
            values = torch.cat([node.kv[layer][1][..., :take, :] for node, take in parts], dim=-2)
            cache.update(keys, values, layer)
        return cache

    def _insert(
        self, path: list[tuple[_Node, int]], ids: list[int], matched: int, cache: DynamicCache
    ) -> list[_Node]:
        """Store the tokens of ``ids`` past ``matched`` (their KV read from ``cache``)
        as a leaf; the nodes of the prompt's path."""
        nodes = [node for node, _ in path]
        if matched == len(ids) or len(ids) > self.max_tokens:
            return nodes  # nothing new, or a prompt the bound cannot hold even alone
        if path and path[-1][1] < len(path[-1][0].tokens):
            nodes[-1] = _split(*path[-1])
        parent = nodes[-1] if nodes else self.root
        # Copies (1, H, P - matched, D): the caller's cache tensors stay its own.
        kv = [
            (c.keys[..., matched:, :].clone(), c.values[..., matched:, :].clone())
            for c in cache.layers
        ]
        leaf = _Node(tokens=tuple(ids[matched:]), kv=kv, parent=parent)
        parent.children[leaf.tokens[0]] = leaf
        self.num_tokens += len(leaf.tokens)
        return [*nodes, leaf]

    def _evict(self) -> None:
        """Drop least recently used leaves until within the bounds.

        The nodes of the prompt just served carry the newest stamp, so they go
        last, and they never have to: that prompt was stored only if it fits
        the bound on its own, and it is one leaf.
        """
        while True:
            leaves = [n for n in self._nodes() if not n.children]
            over_leaves = self.max_leaves is not None and len(leaves) > self.max_leaves
            if self.num_tokens <= self.max_tokens and not over_leaves:
                return
            victim = min(leaves, key=lambda n: n.last_used)
            del victim.parent.children[victim.tokens[0]]
            self.num_tokens -= len(victim.tokens)
            self.evicted_tokens += len(victim.tokens)

    def _nodes(self) -> Iterator[_Node]:
        """Every node but the root."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    @property
    def num_bytes(self) -> int:
        """Bytes of the keys and values held in the tree."""
        return sum(k.nbytes + v.nbytes for node in self._nodes() for k, v in node.kv)


class Preambles:
    """Beginnings of prompts that every task shares (the system message and the
    demonstrations), with their keys and values computed once per model, each alone.

    Shared by the caches of all lanes of a policy (read only; a cache built from
    them copies). A prompt that starts with one reuses it; which prompt computed it
    first does not matter, since it is always the same forward pass.
    """

    def __init__(self, prompts: Sequence[Sequence[int]]) -> None:
        self.prompts = sorted({tuple(p) for p in prompts if p}, key=len, reverse=True)  # longest first
        self._kv: dict[tuple[int, ...], list[tuple[Tensor, Tensor]]] = {}
        self._model = None
        self._lock = threading.Lock()

    @torch.no_grad()
    def match(self, model, ids: Sequence[int]) -> tuple[int, list[tuple[Tensor, Tensor]]]:
        """The longest preamble ``ids`` starts with: its length and per-layer keys and
        values (0 and [] when none)."""
        preamble = next((p for p in self.prompts if len(p) <= len(ids) and tuple(ids[: len(p)]) == p), None)
        if preamble is None:
            return 0, []
        with self._lock:
            if model is not self._model:  # keys and values of other weights are worthless
                self._kv, self._model = {}, model
            if preamble not in self._kv:
                device = model.get_input_embeddings().weight.device
                out = model(input_ids=torch.tensor([preamble], device=device), use_cache=True, logits_to_keep=1)
                if not _plain(out.past_key_values):
                    self.prompts = []  # as the tree: no reuse for caches that drop positions
                    return 0, []
                self._kv[preamble] = [(c.keys, c.values) for c in out.past_key_values.layers]
            return len(preamble), self._kv[preamble]


def _cache_of(kv: list[tuple[Tensor, Tensor]], length: int) -> DynamicCache:
    """A new cache holding (copies of) the first ``length`` positions of ``kv``."""
    cache = DynamicCache()
    for layer, (keys, values) in enumerate(kv):
        cache.update(keys[..., :length, :].clone(), values[..., :length, :].clone(), layer)
    return cache


def _plain(cache) -> bool:
    """A cache that keeps every position's keys and values, which the tree can cut up."""
    return isinstance(cache, DynamicCache) and all(
        type(layer) is DynamicLayer for layer in cache.layers
    )


def _split(node: _Node, at: int) -> _Node:
    """Cut ``node`` after ``at`` tokens; the new upper node takes its place. Both
    halves are copied so that each owns exactly its tokens' memory."""
    upper = _Node(
        tokens=node.tokens[:at],
        kv=[(k[..., :at, :].clone(), v[..., :at, :].clone()) for k, v in node.kv],
        parent=node.parent,
        last_used=node.last_used,
    )
    node.parent.children[upper.tokens[0]] = upper
    node.tokens = node.tokens[at:]
    node.kv = [(k[..., at:, :].clone(), v[..., at:, :].clone()) for k, v in node.kv]
    node.parent = upper
    upper.children[node.tokens[0]] = node
    return upper


def _common_prefix(segment: Sequence[int], ids: Sequence[int], start: int) -> int:
    """How many leading tokens of ``segment`` equal ``ids[start:]``."""
    n = min(len(segment), len(ids) - start)
    for i in range(n):
        if segment[i] != ids[start + i]:
            return i
    return n
