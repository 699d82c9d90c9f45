"""Training examples other than step pairs: what trajectory DPO, RFT and
Agent-R's masked SFT train on.

Every example is made of *segments*: one generated turn each, the prompt the
policy answered (h_t rendered as chat messages) and the completion it wrote.
A trajectory's log-likelihood is the sum of its segments' log-likelihoods,
because each step of an episode is sampled from its own prompt (DESIGN §2).
A segment's ``train`` flag says whether its tokens carry loss: Agent-R's
revision trajectories keep the bad prefix as context only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentq.agent.prompt import Messages
from agentq.data.trajectory import Step, Trajectory


@dataclass
class Segment:
    prompt: Messages
    completion: str
    completion_ids: list[int] = field(default_factory=list)  # as generated; empty: tokenize the text
    logprob: float = 0.0  # log-prob the collecting policy gave it (the logged reference)
    train: bool = True  # its tokens carry loss

    @classmethod
    def from_step(cls, step: Step, train: bool = True) -> Segment:
        return cls(step.prompt, step.action, list(step.action_ids), step.logprob, train)


def segments_of(trajectory: Trajectory, train: bool = True) -> list[Segment]:
    return [Segment.from_step(s, train) for s in trajectory.steps]


@dataclass
class TrajectoryPair:
    """A successful and a failed trajectory of one task (outcome-only trajectory DPO)."""

    task_id: Any
    chosen: list[Segment]
    rejected: list[Segment]
    reward_chosen: float
    reward_rejected: float

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrajectoryPair:
        data = dict(data)
        data["chosen"] = [Segment(**s) for s in data["chosen"]]
        data["rejected"] = [Segment(**s) for s in data["rejected"]]
        return cls(**data)


@dataclass
class SFTExample:
    """A trajectory to imitate: RFT's successes, Agent-R's revisions and good paths.
    Only segments with ``train`` set carry loss; ``info`` records how it was made."""

    task_id: Any
    segments: list[Segment]
    source: str  # "success", "good", "revision"
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SFTExample:
        data = dict(data)
        data["segments"] = [Segment(**s) for s in data["segments"]]
        return cls(**data)
