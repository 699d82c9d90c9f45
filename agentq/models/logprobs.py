"""Summed log-probabilities of completions, with the LM head only where it is needed.

DPO and SFT need ``log pi(y | x) = sum_t log softmax(z_t)[y_t]`` over the
completion (action) tokens only (Agent Q, Eq. 1 and Eq. 5). A causal LM's
forward computes logits for every position; with a 49,152-token vocabulary the
prompt positions dominate time and memory (docs/method.md §10). So the decoder runs on
the whole sequence for hidden states, the rows that predict completion tokens
are gathered, and only those go through the output embedding and log_softmax.

This assumes the model's logits are ``output_embeddings(hidden)``, as for
Llama, Mistral, Qwen and SmolLM; models that post-process logits (Gemma-2's
final soft-capping, Cohere's logit scale) are rejected rather than scored wrongly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


def decoder_and_head(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The transformer body and the output embedding of a causal LM or a peft model of one.

    peft injects LoRA layers into the base model's modules in place, so the
    modules reached through ``get_base_model()`` run with the adapter active,
    and ``PeftModel.disable_adapter()`` switches them off in place as well.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    for key in ("final_logit_softcapping", "logit_scale"):
        if getattr(config, key, None) not in (None, 1.0):
            raise NotImplementedError(
                f"completion_logprobs: {type(base).__name__} sets config.{key}; its logits are "
                "not the plain output-embedding projection this function computes"
            )
    head = base.get_output_embeddings()
    if head is None:
        raise TypeError(f"completion_logprobs: {type(base).__name__} has no output embeddings")
    return base.get_decoder(), head


def completion_logprobs(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, completion_mask: Tensor
) -> Tensor:
    """Summed log pi of the completion tokens of each row.

    Args:
        model: a causal LM, or a peft ``PeftModel`` wrapping one.
        input_ids: (B, T) prompt + completion, right padded.
        attention_mask: (B, T) 1 on real tokens, 0 on padding.
        completion_mask: (B, T) 1 on the tokens being scored; the prediction
            for token t comes from position t - 1, so column 0 must be 0.

    Returns:
        (B,) ``sum_t completion_mask[b, t] * log pi(input_ids[b, t] | input_ids[b, :t])``,
        in float32, differentiable when grad is enabled.
    """
    if input_ids.shape != attention_mask.shape or input_ids.shape != completion_mask.shape:
        raise ValueError(
            "completion_logprobs: input_ids, attention_mask and completion_mask must have one "
            f"shape, got {tuple(input_ids.shape)}, {tuple(attention_mask.shape)}, "
            f"{tuple(completion_mask.shape)}"
        )
    if completion_mask[:, 0].any():
        raise ValueError(
            "completion_logprobs: completion_mask[:, 0] must be 0 (no position predicts it)"
        )

    decoder, head = decoder_and_head(model)
    hidden = decoder(
        input_ids=input_ids, attention_mask=attention_mask, use_cache=False
    ).last_hidden_state  # (B, T, H)

    scored = completion_mask[:, 1:].bool()  # (B, T-1): position t predicts token t+1
    rows = scored.nonzero()[:, 0]  # (N,) batch row of each scored token
    predicting = hidden[:, :-1][scored]  # (N, H)
    targets = input_ids[:, 1:][scored]  # (N,)

    logits = head(predicting).float()  # (N, V)
    token_logps = torch.log_softmax(logits, dim=-1).gather(1, targets[:, None]).squeeze(1)  # (N,)
    summed = torch.zeros(input_ids.shape[0], dtype=token_logps.dtype, device=token_logps.device)
    return summed.index_add(0, rows, token_logps)  # (B,)


def pad_pairs(
    prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Concatenate each prompt with its completion and right-pad to one length.

    Returns:
        input_ids (B, T), attention_mask (B, T) and completion_mask (B, T),
        the masks as long tensors of 0/1.
    """
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(
            f"pad_pairs: {len(prompt_ids)} prompts but {len(completion_ids)} completions"
        )
    if len(prompt_ids) == 0:
        raise ValueError("pad_pairs: no pairs given")
    if any(len(prompt) == 0 for prompt in prompt_ids):
        raise ValueError("pad_pairs: every prompt needs at least one token to condition on")
    width = max(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids, strict=True))
    batch = len(prompt_ids)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros(batch, width, dtype=torch.long)  # (B, T)
    completion_mask = torch.zeros(batch, width, dtype=torch.long)  # (B, T)
    for b, (prompt, completion) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
        p, n = len(prompt), len(prompt) + len(completion)
        input_ids[b, :n] = torch.tensor([*prompt, *completion], dtype=torch.long)
        attention_mask[b, :n] = 1
        completion_mask[b, p:n] = 1
    return input_ids, attention_mask, completion_mask


def pair_logprobs(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    chosen_ids: Sequence[Sequence[int]],
    rejected_ids: Sequence[Sequence[int]],
) -> tuple[Tensor, Tensor]:
    """Summed log pi of chosen and rejected completions that share their prompt.

    A step pair's two actions follow the same history, and the history (system
    message, demonstrations, earlier actions, the observation: ~1,000-2,000
    tokens) is far longer than an action (~50). So the prompt runs once, its
    KV cache is repeated for the two completions, and only the completions run
    again: about half the tokens of scoring ``[prompt, a_w]`` and
    ``[prompt, a_l]`` as two rows. Gradients flow through the cached keys and
    values into the prompt's computation, so the result, and its gradient, is
    that of :func:`completion_logprobs` on the padded rows.

    Returns:
        (B,) chosen and (B,) rejected summed log-probs, float32, differentiable.
    """
    decoder, head = decoder_and_head(model)
    device = head.weight.device
    chosen_out, rejected_out = [], []
    for prompt, chosen, rejected in zip(prompt_ids, chosen_ids, rejected_ids, strict=True):
        if not prompt or not chosen or not rejected:
            raise ValueError("pair_logprobs: prompts and completions need at least one token")
        out = decoder(input_ids=torch.tensor([list(prompt)], device=device), use_cache=True)
        cache = out.past_key_values
        cache.batch_repeat_interleave(2)
        width = max(len(chosen), len(rejected))
        # Right padding needs no mask: a causal model's real tokens never see later pads.
        completions = torch.zeros(2, width, dtype=torch.long, device=device)  # (2, C)
        completions[0, : len(chosen)] = torch.tensor(chosen)
        completions[1, : len(rejected)] = torch.tensor(rejected)
        hidden = decoder(input_ids=completions, past_key_values=cache, use_cache=True).last_hidden_state  # (2, C, H)
        # Token 0 of a completion is predicted by the prompt's last position.
        last_prompt = out.last_hidden_state[:, -1:].expand(2, -1, -1)  # (2, 1, H)
        predicting = torch.cat([last_prompt, hidden[:, :-1]], dim=1)  # (2, C, H)
        for row, (ids, sink) in enumerate(((chosen, chosen_out), (rejected, rejected_out))):
            logits = head(predicting[row, : len(ids)]).float()  # (n, V)
            targets = completions[row, : len(ids)]  # (n,)
            sink.append(torch.log_softmax(logits, dim=-1).gather(1, targets[:, None]).sum())
    return torch.stack(chosen_out), torch.stack(rejected_out)


def segment_logprobs(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    owner: Sequence[int],
    num_sequences: int,
    *,
    rows_per_forward: int,
    pad_id: int = 0,
) -> Tensor:
    """Summed log pi of sequences made of several (prompt, completion) segments.

    A trajectory's log-likelihood is the sum of its steps' log-likelihoods,
    each step scored after its own prompt (docs/method.md §2): segment ``i`` adds
    ``log pi(completion_ids[i] | prompt_ids[i])`` to sequence ``owner[i]``.
    Segments are sorted by length, so rows of similar length share a forward,
    and run ``rows_per_forward`` at a time through :func:`completion_logprobs`
    on right-padded rows (``pad_id`` only fills masked positions). Autograd
    keeps every chunk's activations until the backward pass.

    Returns:
        (num_sequences,) float32, differentiable; 0 for a sequence with no segment.
    """
    if not len(prompt_ids) == len(completion_ids) == len(owner):
        raise ValueError(
            f"segment_logprobs: {len(prompt_ids)} prompts, {len(completion_ids)} completions "
            f"and {len(owner)} owners"
        )
    if rows_per_forward < 1:
        raise ValueError(f"segment_logprobs: rows_per_forward must be >= 1, got {rows_per_forward}")
    if any(not 0 <= s < num_sequences for s in owner):
        raise ValueError(f"segment_logprobs: every owner must lie in [0, {num_sequences})")
    if any(len(c) == 0 for c in completion_ids):
        raise ValueError("segment_logprobs: every completion needs at least one token")
    device = decoder_and_head(model)[1].weight.device
    order = sorted(range(len(owner)), key=lambda i: len(prompt_ids[i]) + len(completion_ids[i]))
    total = torch.zeros(num_sequences, dtype=torch.float32, device=device)  # (S,)
    for start in range(0, len(order), rows_per_forward):
        rows = order[start : start + rows_per_forward]
        batch = pad_pairs([prompt_ids[i] for i in rows], [completion_ids[i] for i in rows], pad_id)
        logps = completion_logprobs(model, *(t.to(device) for t in batch))  # (R,)
        total = total.index_add(0, torch.tensor([owner[i] for i in rows], device=device), logps)
    return total
