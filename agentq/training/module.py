"""The LightningModules that optimise the policy: on preference pairs and by SFT.

Each computes the summed log-probs of its sequences once (Agent Q, Eq. 1: the
joint likelihood of plan, thought, command and explanation; a trajectory's is
the sum over its steps) and calls the configured objective; the objective's
:meth:`~agentq.objectives.base.LossOutput.loss` is the batch loss. The
reference is the policy at the start of the iteration (docs/method.md §4): either the
same network with the LoRA adapter disabled (no second copy in memory) or the
log-probs the collecting policy logged in the replay buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from agentq.models.logprobs import decoder_and_head, segment_logprobs
from agentq.objectives.base import PreferenceLogps, SequenceLogps
from agentq.training.data import PreferenceBatch, PromptGroups, Segments, SFTBatch


class AdapterModule(L.LightningModule):
    """What preference and SFT training share: an optimiser over the trainable
    (adapter) parameters, adapter-only checkpoints, and per-step metrics.

    Args:
        model: a peft model: only the adapter is trainable.
        objective: the loss module.
        optimizer: builds the optimiser from the trainable parameters.
        rows_per_forward: segment rows scored in one forward pass.
        gradient_checkpointing: recompute activations in the backward pass.
    """

    # Metrics summed, not averaged, over the last epoch.
    summed_metrics: tuple[str, ...] = ()

    def __init__(
        self,
        model: nn.Module,
        objective: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        *,
        rows_per_forward: int = 8,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        self.model = model
        self.objective = objective
        self.optimizer_factory = optimizer
        self.rows_per_forward = rows_per_forward
        self.gradient_checkpointing = gradient_checkpointing
        # Checkpoints hold the adapter only (see on_save_checkpoint).
        self.strict_loading = False
        self.history: list[dict[str, float]] = []  # per step: "epoch" and the logged metrics

    def setup(self, stage: str) -> None:
        # Here rather than before fit: setup runs in the process that trains (a
        # spawned worker under ddp_spawn), and the input hook below cannot be pickled.
        if self.gradient_checkpointing:  # activations of long prompts dominate memory: recompute them
            if hasattr(self.model, "activation_checkpointing_enable"):  # transformers >= 5.24's name
                self.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            self.model.enable_input_require_grads()

    def teardown(self, stage: str) -> None:
        if self.gradient_checkpointing:
            if hasattr(self.model, "activation_checkpointing_disable"):
                self.model.activation_checkpointing_disable()
            else:
                self.model.gradient_checkpointing_disable()

    def score(self, segments: Segments) -> torch.Tensor:
        """(S,) summed log-probs of the sequences the segments make up."""
        return segment_logprobs(
            self.model,
            segments.prompt_ids,
            segments.completion_ids,
            segments.owner,
            segments.num_sequences,
            rows_per_forward=self.rows_per_forward,
        )

    def record(self, metrics: dict[str, torch.Tensor], batch_size: int) -> None:
        self.log_dict({f"train/{k}": v for k, v in metrics.items()}, batch_size=batch_size, prog_bar=True)
        self.history.append({"epoch": self.current_epoch, **{k: float(v) for k, v in metrics.items()}})

    def last_epoch_metrics(self) -> dict[str, float]:
        """Each metric averaged (or summed, see ``summed_metrics``) over the steps
        of the last epoch, and the number of steps of the whole phase."""
        if not self.history:
            return {}
        last = max(row["epoch"] for row in self.history)
        rows = [row for row in self.history if row["epoch"] == last]
        keys = [k for k in rows[0] if k != "epoch"]
        metrics = {}
        for key in keys:
            total = sum(row[key] for row in rows)
            metrics[key] = total if key in self.summed_metrics else total / len(rows)
        return metrics | {"steps": len(self.history)}

    def history_over_ranks(self) -> list[dict[str, float]]:
        """The per-step history combined over data-parallel ranks: each step's metric
        averaged over the ranks (summed for ``summed_metrics``), i.e. over the global
        batch of ``world_size x batch_size`` examples. A collective: every rank calls it."""
        if self.trainer.world_size <= 1 or not self.history:
            return list(self.history)
        keys = [k for k in self.history[0] if k != "epoch"]
        rows = torch.tensor([[row[k] for k in keys] for row in self.history], dtype=torch.float64)  # (R, M)
        counts = self.all_gather(torch.tensor(rows.shape[0]))  # (W,)
        if not bool((counts == rows.shape[0]).all()):
            # The loader pads every rank to the same number of batches (EpochSampler), so this
            # only happens if ranks resumed from different checkpoints.
            rank_zero_warn(f"ranks ran different numbers of steps {counts.tolist()}: keeping each rank's own metrics")
            return list(self.history)
        gathered = self.all_gather(rows)  # (W, R, M)
        combined = gathered.mean(dim=0)  # (R, M)
        summed = [i for i, k in enumerate(keys) if k in self.summed_metrics]
        combined[:, summed] = gathered[:, :, summed].sum(dim=0)
        return [
            {"epoch": row["epoch"], **dict(zip(keys, values.tolist(), strict=True))}
            for row, values in zip(self.history, combined, strict=True)
        ]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_factory([p for p in self.parameters() if p.requires_grad])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # A full checkpoint would repeat the frozen base (over 500 MB for 135M).
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}
        checkpoint["step_metrics"] = list(self.history)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # The metrics of steps taken before a restart still belong to this phase.
        self.history = [dict(row) for row in checkpoint.get("step_metrics", [])]


class PreferenceModule(AdapterModule):
    """Preference objectives (DPO, trajectory DPO, conservative DPO, IPO) on step or trajectory pairs.

    Precision: the reference forward (adapter disabled) runs inside the same
    training step as the policy forward, so in the same precision: fp32 by
    default, and under Lightning's ``precision: bf16-mixed`` both in bf16
    autocast over the fp32 weights. With a zero adapter π and π_ref are then
    bit-identical (Δ = 0, as in fp32); once the adapter has moved their bf16
    rounding no longer cancels (on SmolLM2-135M it moved Δ by up to ~0.3 nats:
    conf/trainer/cpu.yaml). A logged reference comes from sampling, in the
    engine's precision: fit refuses it with bf16 training
    (:func:`~agentq.training.fit.resolve_precision`).

    Args:
        use_logged_reference: π_ref log-probs from the batch (the buffer) instead
            of a forward pass with the adapter disabled.
        shared_prefix: score each distinct history of a batch of step pairs once,
            and every distinct action after it from its KV cache
            (:func:`shared_prompt_logprobs` over :class:`~agentq.training.data.PromptGroups`):
            one prompt forward per search node of the batch, not one per pair.
    """

    def __init__(
        self,
        model: nn.Module,
        objective: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        *,
        use_logged_reference: bool = False,
        shared_prefix: bool = False,
        rows_per_forward: int = 8,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__(
            model, objective, optimizer, rows_per_forward=rows_per_forward, gradient_checkpointing=gradient_checkpointing
        )
        self.use_logged_reference = use_logged_reference
        self.shared_prefix = shared_prefix

    def preference_logps(self, batch: PreferenceBatch) -> PreferenceLogps:
        b = batch.num_pairs
        policy = self.logps(batch)  # (2B,)
        if self.use_logged_reference:
            reference = torch.cat([batch.reference_chosen, batch.reference_rejected]).to(policy)
        else:
            with torch.no_grad(), self.model.disable_adapter():
                reference = self.logps(batch)  # (2B,)
        return PreferenceLogps(
            policy_chosen=policy[:b],
            policy_rejected=policy[b:],
            reference_chosen=reference[:b],
            reference_rejected=reference[b:],
            chosen_tokens=batch.chosen_tokens,
            rejected_tokens=batch.rejected_tokens,
            chosen_visits=batch.chosen_visits,
            rejected_visits=batch.rejected_visits,
        )

    def logps(self, batch: PreferenceBatch) -> torch.Tensor:
        """(2B,) summed log-probs of the chosen then the rejected sequences."""
        if self.shared_prefix and batch.by_prompt is not None:  # each history once, its actions from its KV cache
            return grouped_logprobs(self.model, batch.by_prompt)
        return self.score(batch.segments)

    def training_step(self, batch: PreferenceBatch, batch_idx: int) -> torch.Tensor:
        out = self.objective(self.preference_logps(batch))
        loss = out.loss()
        metrics = {"loss": loss.detach()}
        if out.chosen_rewards is not None and out.rejected_rewards is not None:
            metrics["reward_accuracy"] = (out.chosen_rewards > out.rejected_rewards).float().mean()
            metrics["reward_margin"] = (out.chosen_rewards - out.rejected_rewards).mean()
        self.record(metrics, batch_size=batch.num_pairs)
        return loss


def grouped_logprobs(model: nn.Module, groups: PromptGroups) -> torch.Tensor:
    """(S,) summed log-probs of the sequences of ``groups``: each distinct completion
    scored once after its prompt, then copied to every sequence that is it (autograd
    adds up the copies' gradients)."""
    scored = torch.cat(
        [shared_prompt_logprobs(model, p, c) for p, c in zip(groups.prompt_ids, groups.completion_ids, strict=True)]
    )  # (D,)
    return scored[groups.row.to(scored.device)]  # (S,)


def shared_prompt_logprobs(
    model: nn.Module, prompt_ids: Sequence[int], completion_ids: Sequence[Sequence[int]]
) -> torch.Tensor:
    """Summed log pi of several completions of one prompt: the prompt runs once, its
    KV cache is repeated for the C completions, which run as one right-padded batch.

    :func:`~agentq.models.logprobs.pair_logprobs` for a search node's K sibling
    actions instead of two: scoring a node's pairs (up to K(K-1)/2 of them, each
    a ~1,000-token history and ~50-token actions) costs one history, not one per
    pair. Gradients flow through the cached keys and values into the prompt's
    computation, so values and gradients are those of scoring each
    ``[prompt, completion]`` row on its own (up to float rounding).

    Returns:
        (C,) float32, differentiable.
    """
    if not prompt_ids or not completion_ids or not all(completion_ids):
        raise ValueError("shared_prompt_logprobs: the prompt and every completion need at least one token")
    decoder, head = decoder_and_head(model)
    device = head.weight.device
    count, width = len(completion_ids), max(len(c) for c in completion_ids)
    prompt = decoder(input_ids=torch.tensor([list(prompt_ids)], device=device), use_cache=True)
    cache = prompt.past_key_values
    cache.batch_repeat_interleave(count)
    # Right padding needs no attention mask: a causal model's real tokens never see later pads.
    completions = torch.zeros(count, width, dtype=torch.long, device=device)  # (C, W)
    real = torch.zeros(count, width, dtype=torch.bool, device=device)  # (C, W)
    for i, ids in enumerate(completion_ids):
        completions[i, : len(ids)] = torch.tensor(ids)
        real[i, : len(ids)] = True
    hidden = decoder(input_ids=completions, past_key_values=cache, use_cache=True).last_hidden_state  # (C, W, H)
    # Token 0 of a completion is predicted by the prompt's last position.
    last_prompt = prompt.last_hidden_state[:, -1:].expand(count, -1, -1)  # (C, 1, H)
    predicting = torch.cat([last_prompt, hidden[:, :-1]], dim=1)[real]  # (N, H)
    # The head in its weights' dtype (fp32 for training) even under bf16 autocast: bf16
    # logits (8 significant bits, ~0.06 at |z| ~ 15) move every token's log-prob by about
    # that much, and the head on the action tokens alone costs ~2% of the forward.
    with torch.autocast(device.type, enabled=False):
        logits = head(predicting.to(head.weight.dtype)).float()  # (N, V)
    token_logps = torch.log_softmax(logits, dim=-1).gather(1, completions[real][:, None]).squeeze(1)  # (N,)
    rows = real.nonzero()[:, 0]  # (N,) the completion of each scored token
    return torch.zeros(count, dtype=token_logps.dtype, device=device).index_add(0, rows, token_logps)  # (C,)


class SFTModule(AdapterModule):
    """SFT objectives (RFT, Agent-R's masked SFT): only trained segments are scored."""

    summed_metrics = ("tokens",)

    def sequence_logps(self, batch: SFTBatch) -> SequenceLogps:
        return SequenceLogps(policy=self.score(batch.segments), num_tokens=batch.num_tokens)

    def training_step(self, batch: SFTBatch, batch_idx: int) -> torch.Tensor:
        out = self.objective(self.sequence_logps(batch))
        loss = out.loss()
        self.record({"loss": loss.detach(), "tokens": batch.num_tokens.sum()}, batch_size=batch.num_examples)
        return loss
