"""Lanes: the parts of the searches that run side by side (``collect.concurrency``,
``eval.concurrency``, :mod:`agentq.parallel`).

Each lane has its own env instance, its own policy object (prompt cache and
counters; the engine is shared and batches the lanes' requests) and its own
critic and judge objects (their prompt caches), so nothing mutable is shared
but the engine and the critic's torch model, whose forward passes take turns
with the engine's (:class:`~agentq.models.engine.Serialized`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agentq.components import Components, Weights
from agentq.models.engine import Serialized


@dataclass(frozen=True)
class Lane:
    env: gym.Env
    policy: Any
    critic: Any
    critic_model: Any  # the critic's and the judge's LLM (shared, serialised when lanes > 1)


def lanes(parts: Components, weights: Weights, policy, n: int) -> list[Lane]:
    """``n`` lanes around ``policy`` (the first lane uses it and the run's env as they are)."""
    critic_model = weights.critic if n <= 1 else Serialized(weights.critic, weights.engine.run)
    envs = parts.envs(max(n, 1))
    return [
        Lane(env, policy if i == 0 else policy.fork(), parts.critic(critic_model, weights.tokenizer), critic_model)
        for i, env in enumerate(envs)
    ]

