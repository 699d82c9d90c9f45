"""Summed log-probabilities of completions, with the LM head only where it is needed.

DPO and SFT need ``log pi(y | x) = sum_t log softmax(z_t)[y_t]`` over the
completion (action) tokens only (Agent Q, Eq. 1 and Eq. 5). A causal LM's
forward computes logits for every position; with a 49,152-token vocabulary the
prompt positions dominate time and memory (DESIGN §10). So the decoder runs on
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


def _decoder_and_head(model: nn.Module) -> tuple[nn.Module, nn.Module]:
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

    decoder, head = _decoder_and_head(model)
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
