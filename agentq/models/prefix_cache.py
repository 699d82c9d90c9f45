"""Reuse of the prompt's KV cache across consecutive model calls.

Every prompt of a run starts with the same system message and demonstrations
(about 900 tokens on WebShop), and a node's prompt extends its parent's
earlier actions, so consecutive prompts share long prefixes. Prefilling them
from scratch is about half the cost of a composite action on a CPU.
:class:`PrefixCache` keeps the KV cache of the last prompt; the next prompt
crops it to the shared prefix and runs only the new tokens.

The cache holds keys and values computed by one set of weights: a
``PrefixCache`` belongs to one policy (or critic) object and is dropped with
it; the loop builds new ones after every training phase.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor


class PrefixCache:
    """The last prompt's ids and KV cache.

    Args:
        enabled: False runs every prefill from scratch (the plain path, for
            comparisons and benchmarks).
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.ids: list[int] = []
        self.cache = None
        self.reused_tokens = 0  # prompt tokens not recomputed, for benchmarks
        self.computed_tokens = 0

    @torch.no_grad()
    def prefill(self, model, prompt_ids: Sequence[int]) -> tuple[object, Tensor]:
        """KV cache of ``prompt_ids`` (a private copy the caller may extend) and
        the logits (1, V) at the last prompt position."""
        ids = list(prompt_ids)
        device = model.get_input_embeddings().weight.device
        # At least the last token is recomputed: its logits start the decode.
        shared = _common_prefix(self.ids, ids, limit=len(ids) - 1) if self.enabled and self.cache is not None else 0
        if shared > 0:
            if shared < len(self.ids):
                self.cache.crop(shared - len(self.ids))  # transformers 5: a negative count drops tokens
            cache = self.cache
        else:
            cache = None
        new = torch.tensor([ids[shared:]], dtype=torch.long, device=device)  # (1, P - shared)
        out = model(input_ids=new, past_key_values=cache, use_cache=True, logits_to_keep=1)
        self.reused_tokens += shared
        self.computed_tokens += len(ids) - shared
        if self.enabled:
            self.ids, self.cache = ids, out.past_key_values
            return copy.deepcopy(out.past_key_values), out.logits[:, -1]
        return out.past_key_values, out.logits[:, -1]

    def clear(self) -> None:
        self.ids, self.cache = [], None


def _common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
