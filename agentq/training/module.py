"""The LightningModule that optimises the policy on preference pairs.

It computes the summed log-probs of whole composite actions once (Agent Q,
Eq. 1: the joint likelihood of plan, thought, command and explanation), gets
the reference log-probs, and calls the configured objective. The reference is
the policy at the start of the iteration (DESIGN §4): either the same network
with the LoRA adapter disabled (no second copy in memory) or the log-probs the
collecting policy logged in the replay buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import nn

from agentq.models.logprobs import completion_logprobs, pair_logprobs
from agentq.objectives.dpo import PreferenceLogps
from agentq.training.data import PreferenceBatch


class PreferenceModule(L.LightningModule):
    def __init__(
        self,
        model: nn.Module,
        objective: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        *,
        use_logged_reference: bool = False,
        shared_prefix: bool = False,
    ) -> None:
        super().__init__()
        self.model = model  # a peft model: only the adapter is trainable
        self.objective = objective
        self.optimizer_factory = optimizer
        self.use_logged_reference = use_logged_reference
        self.shared_prefix = shared_prefix
        # Checkpoints hold the adapter only (see on_save_checkpoint).
        self.strict_loading = False
        self.history: list[tuple[int, float, float]] = []  # (epoch, loss, reward accuracy) per step

    def preference_logps(self, batch: PreferenceBatch) -> PreferenceLogps:
        b = batch.num_pairs
        policy = self.logps(batch)  # (2B,)
        if self.use_logged_reference:
            reference = torch.cat([batch.reference_chosen, batch.reference_rejected]).to(policy)
        else:
            with torch.no_grad(), self.model.disable_adapter():
                reference = self.logps(batch)
        return PreferenceLogps(
            policy_chosen=policy[:b],
            policy_rejected=policy[b:],
            reference_chosen=reference[:b],
            reference_rejected=reference[b:],
        )

    def logps(self, batch: PreferenceBatch) -> torch.Tensor:
        """(2B,) summed log-probs of the chosen then the rejected completions."""
        if self.shared_prefix:  # the history once, both actions from its KV cache
            chosen, rejected = pair_logprobs(self.model, batch.prompt_ids, batch.chosen_ids, batch.rejected_ids)
            return torch.cat([chosen, rejected])
        return completion_logprobs(self.model, batch.input_ids, batch.attention_mask, batch.completion_mask)

    def training_step(self, batch: PreferenceBatch, batch_idx: int) -> torch.Tensor:
        out = self.objective(self.preference_logps(batch))
        loss = out.losses.mean()
        accuracy = (out.chosen_rewards > out.rejected_rewards).float().mean()
        margin = (out.chosen_rewards - out.rejected_rewards).mean()
        self.log_dict(
            {"train/loss": loss, "train/reward_accuracy": accuracy, "train/reward_margin": margin},
            batch_size=batch.num_pairs,
            prog_bar=True,
        )
        self.history.append((self.current_epoch, loss.item(), accuracy.item()))
        return loss

    def last_epoch_metrics(self) -> dict[str, float]:
        """Mean loss and reward accuracy over the steps of the last epoch."""
        if not self.history:
            return {}
        last = max(epoch for epoch, _, _ in self.history)
        rows = [(loss, acc) for epoch, loss, acc in self.history if epoch == last]
        return {
            "loss": sum(r[0] for r in rows) / len(rows),
            "reward_accuracy": sum(r[1] for r in rows) / len(rows),
            "steps": len(self.history),
        }

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_factory([p for p in self.parameters() if p.requires_grad])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # A full checkpoint would repeat the frozen base (over 500 MB for 135M).
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}
        checkpoint["step_metrics"] = list(self.history)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # The metrics of steps taken before a restart still belong to this phase.
        self.history = [tuple(row) for row in checkpoint.get("step_metrics", [])]
