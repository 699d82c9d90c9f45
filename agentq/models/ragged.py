"""One step of new tokens for many requests at once, each on its own KV cache.

Decoding one token of a 135M model on a CPU is bound by reading the weights,
not by arithmetic: one step for many rows costs far less than one step per
row (benchmarks/bench_batched.py measures what it buys a search). Requests from
concurrent searches therefore share their decode steps. Their caches differ
in length (each search is at its own depth), so they cannot be stacked into
one padded batch without copying every cache at every step. Here only what
is the same for every row runs as one batch (the projections, the MLP, the
norms, the output embedding: all the weights) and attention runs per request
against that request's own cache, through the model's own attention function.

A request runs one token per row (a decode step) or several (a jump-forward
run of tokens the COMMAND constraint forces, attending causally to each other
through an explicit mask). For one request of one token per row this is exactly
the model's forward (the same modules, the same attention call, the same cache
update); otherwise each request's logits equal its own forward's to float noise
(a matrix product's rounding may depend on how many rows it has, an explicit
causal mask may take another attention kernel: tests/test_batched_engine.py).

Supported: decoder layers of the Llama kind (pre-norm, rotary q/k, one
``self_attn`` with ``q/k/v/o_proj`` and an ``mlp``), which covers Llama,
SmolLM2, Mistral and Qwen2 without sliding windows. :func:`check_supported`
refuses the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import DynamicCache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, eager_attention_forward

from agentq.models.logprobs import decoder_and_head

SUPPORTED = ("llama", "mistral", "qwen2")


def check_supported(model: torch.nn.Module) -> None:
    """Raise ValueError unless :func:`decode_step` computes ``model``'s forward."""
    decoder, _ = decoder_and_head(model)
    config = decoder.config
    kind = getattr(config, "model_type", "?")
    if kind not in SUPPORTED or getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        raise ValueError(
            f"engine hf_batched shares decode steps only for models of kind {', '.join(SUPPORTED)} without a "
            f"sliding window (this one: {kind}): use engine=hf"
        )


@torch.no_grad()
def decode_step(
    model: torch.nn.Module, requests: Sequence[tuple[DynamicCache, Tensor]], rows: int | None = None
) -> list[Tensor]:
    """Run each request's new tokens; each cache grows by them.

    Args:
        model: a causal LM of a supported kind (or a peft model of one).
        requests: per request, its cache (A_i rows, any length) and the ids to
            run: (A_i,) one token per row, or (A_i, T_i) several (a jump-forward
            run of forced tokens), attending causally to each other.
        rows: every weight multiplication takes exactly this many token rows (all
            requests' tokens, padded and cut in blocks of it), so a token's result
            does not depend on how many ran beside it; None: one block of all rows
            (one request alone is then the model's forward, to the attention's float noise).

    Returns:
        per request, the logits of the positions run: (A_i, V) for (A_i,) ids,
        (A_i, T_i, V) for (A_i, T_i).
    """
    decoder, head = decoder_and_head(model)
    grids = [ids.reshape(len(ids), -1) for _, ids in requests]  # (A_i, T_i)
    sizes = [grid.numel() for grid in grids]
    ids = torch.cat([grid.flatten() for grid in grids])  # (B,): row a's T_i tokens, then row a + 1's
    # Each token's position continues its row's sequence: the cache's length, then one more per token.
    positions = torch.cat(
        [(cache.get_seq_length() + torch.arange(grid.shape[1])).repeat(len(grid)) for (cache, _), grid in zip(requests, grids, strict=True)]
    ).to(ids.device)  # fmt: skip
    pad = (-len(ids)) % rows if rows else 0
    ids, positions = F.pad(ids, (0, pad)), F.pad(positions, (0, pad))  # padding rows: token 0 at position 0

    def blocks(fn, x: Tensor) -> Tensor:
        return torch.cat([fn(block) for block in x.split(rows)]) if rows else fn(x)

    hidden = decoder.embed_tokens(ids[:, None])  # (P, 1, H)
    cos, sin = decoder.rotary_emb(hidden, position_ids=positions[:, None])
    for layer in decoder.layers[: decoder.config.num_hidden_layers]:
        residual = hidden
        hidden = residual + _attention(layer, hidden, cos, sin, requests, grids, blocks)
        residual = hidden
        hidden = residual + blocks(lambda h, layer=layer: layer.mlp(layer.post_attention_layernorm(h)), hidden)
    logits = blocks(lambda h: head(decoder.norm(h)), hidden)[: sum(sizes), -1]  # (B, V)
    return [
        out.view(*given.shape, -1)
        for out, (_, given) in zip(logits.split(sizes), requests, strict=True)
    ]


def _attention(layer, hidden: Tensor, cos: Tensor, sin: Tensor, requests, grids: list[Tensor], blocks) -> Tensor:
    """The attention block for all rows: projections in blocks, attention per request."""
    attn = layer.self_attn
    shape = (hidden.shape[0], 1, -1, attn.head_dim)
    normed = blocks(layer.input_layernorm, hidden)
    query = blocks(attn.q_proj, normed).view(shape).transpose(1, 2)  # (P, heads, 1, D)
    key = blocks(attn.k_proj, normed).view(shape).transpose(1, 2)  # (P, kv heads, 1, D)
    value = blocks(attn.v_proj, normed).view(shape).transpose(1, 2)
    query, key, value = (x[:, :, 0] for x in (*apply_rotary_pos_emb(query, key, cos, sin), value))  # (P, heads, D)
    attend = ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation, eager_attention_forward)
    outputs, start = [], 0
    for (cache, _), grid in zip(requests, grids, strict=True):
        rows, steps = grid.shape
        # This request's tokens, (A_i * T_i, heads, D) -> (A_i, heads, T_i, D).
        q, k, v = (x[start : start + grid.numel()].view(rows, steps, *x.shape[1:]).transpose(1, 2) for x in (query, key, value))
        keys, values = _append(cache.layers[attn.layer_idx], k, v)
        # One query per row needs no mask (the model's own forward passes none either);
        # several see the cache and the tokens before them.
        mask = None if steps == 1 else _causal(steps, keys.shape[-2], query.dtype, query.device)
        out, _ = attend(attn, q, keys, values, mask, dropout=0.0, scaling=attn.scaling)
        outputs.append(out.reshape(rows * steps, 1, -1))  # (A_i * T_i, 1, heads * D): out is (A_i, T_i, heads, D)
        start += grid.numel()
    padding = hidden.new_zeros(hidden.shape[0] - start, 1, outputs[0].shape[-1])
    return blocks(attn.o_proj, torch.cat([*outputs, padding]))


def _causal(steps: int, length: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """Additive mask (1, 1, steps, length) for the last ``steps`` of ``length`` positions:
    each sees every position up to its own."""
    sees = torch.arange(length, device=device) <= torch.arange(length - steps, length, device=device)[:, None]
    return torch.zeros(steps, length, dtype=dtype, device=device).masked_fill(~sees, torch.finfo(dtype).min)[None, None]


GROW = 64  # positions reserved at a time past a cache's end


def _append(layer, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """``DynamicLayer.update`` for new positions (A, H, T, D), without copying the whole cache.

    The layer's own update concatenates, copying every cached position at every
    step (for a 1,000-token prompt most of a shared step's time). Here the keys and
    values live in a buffer with room for ``GROW`` more positions, and the layer
    holds views of its filled part; whatever replaces them (a row selection, the
    model's own forward) leaves the buffer stale, and the next append starts a new one.
    """
    length, new = layer.keys.shape[-2], key.shape[-2]
    reserve = getattr(layer, "_agentq_reserve", None)
    if reserve is None or reserve[0].data_ptr() != layer.keys.data_ptr() or reserve[0].shape[-2] < length + new \
            or reserve[0].shape[:2] != layer.keys.shape[:2]:  # fmt: skip
        shape = (*layer.keys.shape[:2], length + new + GROW, layer.keys.shape[-1])
        reserve = (layer.keys.new_empty(shape), layer.values.new_empty(shape))
        reserve[0][..., :length, :] = layer.keys
        reserve[1][..., :length, :] = layer.values
        layer._agentq_reserve = reserve
    reserve[0][..., length : length + new, :] = key
    reserve[1][..., length : length + new, :] = value
    layer.keys, layer.values = reserve[0][..., : length + new, :], reserve[1][..., : length + new, :]
    return layer.keys, layer.values
