"""One training task's search, and the weights it runs with: the pieces of
collection that the loop's own process and a Ray worker (:mod:`agentq.on_ray`)
share, so both search a task alike."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from agentq import evaluate as ev
from agentq.components import Components
from agentq.data.buffer import ReplayBuffer
from agentq.lanes import Lane
from agentq.layout import RunLayout
from agentq.models.engine import cast_copy
from agentq.training.fit import merge_adapter


def frozen_base(parts: Components, critic):
    """A frozen copy of the base LLM for the critic, or None when the critic uses the policy's model.

    docs/method.md §3: the critic is "the same base LLM". Training merges each adapter
    into the policy's weights in place, so after iteration 1 the base survives only
    as a copy (one model's weights more in memory) of ``critic``, the base as the
    critic reads it (in the HF engine's dtype). It is made only when a trained
    policy's search would use it: MCTS at evaluation, or collection after iteration 1.
    ``critic_model=policy`` lets the critic follow the trained policy instead.
    """
    trained_search = parts.iterations > 1 or (parts.iterations == 1 and bool(parts.eval.search_modes))
    if not parts.frozen_critic or not trained_search:
        return None
    return cast_copy(critic)


def trained_policy(model: torch.nn.Module, layout: RunLayout, iteration: int) -> torch.nn.Module:
    """pi_i: the base ``model`` with the adapters of iterations 1..``iteration`` merged in
    order, as the loop left it (an iteration without training examples has none)."""
    for adapter in layout.adapters(iteration):
        model = merge_adapter(model, adapter)
    return model


def search_task(parts: Components, buffer: ReplayBuffer, iteration: int, lane: Lane, task_id: Any) -> None:
    """Search one training task from its own seed (not from what ran before it) and
    write the result to the buffer."""
    generator = torch.Generator().manual_seed(ev.task_seed(parts.seed, iteration, task_id))
    with torch.no_grad():
        result = parts.search(lane.env, lane.policy, lane.critic, task_id=task_id, generator=generator)
    buffer.write_search(iteration, task_id, dataclasses.replace(result, weights=lane.policy.engine.weights_name))
