"""Training objectives: pure loss modules on typed inputs."""

from agentq.objectives.dpo import DPOLoss, LossOutput, PreferenceLogps

__all__ = ["DPOLoss", "LossOutput", "PreferenceLogps"]
