"""Training examples other than step pairs: what trajectory DPO, RFT and
Agent-R's masked SFT train on.

Every example is made of *segments*: one generated turn each, the prompt the
policy answered (h_t rendered as chat messages) and the completion it wrote.
A trajectory's log-likelihood is the sum of its segments' log-likelihoods,
because each step of an episode is sampled from its own prompt (docs/method.md §2).
A segment's ``train`` flag says whether its tokens carry loss: Agent-R's
revision trajectories keep the bad prefix as context only.

This module is also the one owner of an example's *kind*: which record types
a preference objective trains on and which an SFT objective does
(:data:`KINDS`, :func:`kind_of`), and the tag each type has in a run's
``examples.jsonl`` (:data:`TAGS`). Builders, objectives, the replay buffer
and training all ask here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentq.records.history import Messages
from agentq.records.trajectory import Step, Trajectory


@dataclass
class StepPair:
    """(h, a_w, a_l) with what training needs: the exact generated token ids and
    the collecting policy's log-probs (the logged reference)."""

    task_id: Any
    node_id: int
    prompt: Messages
    chosen: str
    rejected: str
    chosen_ids: list[int]
    rejected_ids: list[int]
    chosen_logprob: float
    rejected_logprob: float
    q_chosen: float
    q_rejected: float
    visits_chosen: int
    visits_rejected: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Segment:
    prompt: Messages
    completion: str
    completion_ids: list[int] = field(default_factory=list)  # as generated; empty: tokenize the text
    logprob: float = 0.0  # log-prob the collecting policy gave it (the logged reference)
    train: bool = True  # its tokens carry loss

    @classmethod
    def from_step(cls, step: Step, train: bool = True, *, prompt: Messages | None = None) -> Segment:
        """The step's action as a segment. A step not to imitate (a demonstration's planted
        mistake) never carries loss. ``prompt``: another rendering of the step's history (an
        Agent-R splice); the logged log-prob was of the original prompt, so none is kept."""
        train = train and step.imitate
        if prompt is None:
            return cls(step.prompt, step.action, list(step.action_ids), step.logprob, train)
        return cls(prompt, step.action, list(step.action_ids), 0.0, train)


def segments_of(trajectory: Trajectory, train: bool = True) -> list[Segment]:
    """A segment per step."""
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


# --------------------------------------------------------------------- kinds

PREFERENCE = "preference"  # a chosen and a rejected sequence: DPO, IPO, conservative DPO
SFT = "sft"  # a sequence to imitate: RFT, Agent-R's masked SFT

# The record types of each kind. A builder's and an objective's ``kind`` is one of these keys.
KINDS: dict[str, tuple[type, ...]] = {PREFERENCE: (StepPair, TrajectoryPair), SFT: (SFTExample,)}

# The type tag of each example type in examples.jsonl (written into every run's buffer: never rename).
TAGS: dict[str, type] = {"step_pair": StepPair, "trajectory_pair": TrajectoryPair, "sft": SFTExample}


def kind_of(example: Any) -> str | None:
    """``"preference"`` or ``"sft"`` for a training example (or its type), None for anything else."""
    cls = example if isinstance(example, type) else type(example)
    return next((kind for kind, types in KINDS.items() if cls in types), None)


def common_kind(examples: Sequence[Any], context: str = "fit") -> str:
    """The one kind of all ``examples``; raises on an empty list, a mix, or a type of no kind.
    ``context`` starts the error messages (who refuses them)."""
    if not examples:
        raise ValueError(f"{context}: no training examples")
    types = {type(e) for e in examples}
    unknown = {t for t in types if kind_of(t) is None}
    if unknown:
        known = [t.__name__ for types_of_kind in KINDS.values() for t in types_of_kind]
        raise TypeError(
            f"{context}: cannot train on {sorted(t.__name__ for t in unknown)}; "
            f"examples must be {', '.join(known)}"
        )
    if len(types) > 1:
        raise ValueError(
            f"{context}: examples mix {sorted(t.__name__ for t in types)}; train on one kind at a time"
        )
    return kind_of(types.pop())
