"""Training objectives: pure loss modules on typed inputs."""

from agentq.objectives.base import LossOutput, Objective, PreferenceLogps, SequenceLogps
from agentq.objectives.conservative import ConservativeDPOLoss
from agentq.objectives.dpo import DPOLoss
from agentq.objectives.ipo import IPOLoss
from agentq.objectives.sft import SFTLoss

__all__ = [
    "ConservativeDPOLoss",
    "DPOLoss",
    "IPOLoss",
    "LossOutput",
    "Objective",
    "PreferenceLogps",
    "SFTLoss",
    "SequenceLogps",
]
