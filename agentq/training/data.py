"""Step pairs as training batches.

A batch stacks the B chosen completions and then the B rejected ones, each
after its prompt, so one forward pass scores both: rows [0, B) are a_w and
rows [B, 2B) are a_l.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

from agentq.agent.policy import encode_chat
from agentq.data.pairs import StepPair
from agentq.models.logprobs import pad_pairs


@dataclass
class PreferenceBatch:
    input_ids: torch.Tensor  # (2B, T) prompt + completion, right padded
    attention_mask: torch.Tensor  # (2B, T)
    completion_mask: torch.Tensor  # (2B, T) 1 on the completion tokens being scored
    reference_chosen: torch.Tensor  # (B,) logged log pi_ref(a_w | h)
    reference_rejected: torch.Tensor  # (B,)
    prompt_ids: list[list[int]]  # unpadded, for scoring with a shared prompt prefix
    chosen_ids: list[list[int]]
    rejected_ids: list[list[int]]

    @property
    def num_pairs(self) -> int:
        return self.reference_chosen.shape[0]


@dataclass
class TokenizedPair:
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    chosen_logprob: float
    rejected_logprob: float


class PairDataset(Dataset):
    def __init__(self, pairs: Sequence[StepPair], tokenizer, max_prompt_tokens: int) -> None:
        self.items = [
            TokenizedPair(
                prompt_ids=encode_chat(tokenizer, p.prompt, max_prompt_tokens),
                chosen_ids=list(p.chosen_ids) or _encode(tokenizer, p.chosen),
                rejected_ids=list(p.rejected_ids) or _encode(tokenizer, p.rejected),
                chosen_logprob=p.chosen_logprob,
                rejected_logprob=p.rejected_logprob,
            )
            for p in pairs
        ]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> TokenizedPair:
        return self.items[index]


def _encode(tokenizer, text: str) -> list[int]:
    """Pairs from hand-made trees carry text only; end it like a generated turn."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return [*ids, eos if isinstance(eos, int) and eos >= 0 else tokenizer.eos_token_id]


class PairCollator:
    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, items: Sequence[TokenizedPair]) -> PreferenceBatch:
        prompts = [x.prompt_ids for x in items] * 2
        completions = [x.chosen_ids for x in items] + [x.rejected_ids for x in items]
        input_ids, attention_mask, completion_mask = pad_pairs(prompts, completions, self.pad_id)
        return PreferenceBatch(
            input_ids=input_ids,
            attention_mask=attention_mask,
            completion_mask=completion_mask,
            reference_chosen=torch.tensor([x.chosen_logprob for x in items], dtype=torch.float32),
            reference_rejected=torch.tensor([x.rejected_logprob for x in items], dtype=torch.float32),
            prompt_ids=[x.prompt_ids for x in items],
            chosen_ids=[x.chosen_ids for x in items],
            rejected_ids=[x.rejected_ids for x in items],
        )
