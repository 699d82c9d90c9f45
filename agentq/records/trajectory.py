"""Trajectories: what an episode or a search rollout did, step by step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentq.records.action import Candidate
from agentq.records.history import Messages


@dataclass
class Step:
    """One environment step. ``prompt`` is h_t as chat messages; ``action`` the
    composite text the policy generated; ``logprob`` what the collecting
    policy gave it (the off-policy reference for DPO); ``grounding`` how
    ``command`` relates to the env's valid actions
    (:data:`agentq.agent.grounding.GROUNDINGS`; None when unknown: a scripted
    policy, a replayed prefix, or a file written before it was recorded).
    ``imitate`` is False for a mistake put into a scripted demonstration on purpose
    (:mod:`agentq.search.demonstration`): it stays in the history that later steps
    see, and no objective trains on it."""

    prompt: Messages
    action: str
    command: str
    observation: str  # o_{t+1}, after the command
    reward: float
    logprob: float = 0.0
    action_ids: list[int] = field(default_factory=list)
    grounding: str | None = None
    imitate: bool = True

    @classmethod
    def from_candidate(cls, candidate: Candidate, observation: str, reward: float) -> Step:
        return cls(
            prompt=candidate.prompt,
            action=candidate.text,
            command=candidate.command,
            observation=observation,
            reward=reward,
            logprob=candidate.logprob,
            action_ids=list(candidate.action_ids),
            grounding=candidate.grounding,
        )


@dataclass
class Trajectory:
    task_id: Any
    steps: list[Step]
    reward: float  # the return used for learning and evaluation (success or env score)
    success: bool
    score: float = 0.0  # the env's own score in [0, 1]
    source: str = ""  # "mcts", "greedy", ...
    milestone: int | None = None  # the furthest of the env's milestones reached (envs/contract.py), if it has any

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Trajectory:
        data = dict(data)
        data["steps"] = [Step(**s) for s in data["steps"]]
        return cls(**data)


def commands(trajectory: Trajectory) -> tuple[str, ...]:
    return tuple(s.command for s in trajectory.steps)


def distinct(trajectories: Sequence[Trajectory]) -> list[tuple[int, Trajectory]]:
    """(index, trajectory) of the first trajectory of each command sequence, in order."""
    seen: set[tuple[str, ...]] = set()
    kept = []
    for i, trajectory in enumerate(trajectories):
        key = commands(trajectory)
        if key not in seen:
            seen.add(key)
            kept.append((i, trajectory))
    return kept
