"""TextCraft (ADaPT) registered with Gymnasium as ``agentq/TextCraft-v0``.

``gymnasium.make("envs.textcraft:agentq/TextCraft-v0", max_steps=20)`` imports
this package and so registers the id; the env's own methods (``task_ids``,
``snapshot``, ``restore``) are on ``env.unwrapped``.
"""

from envs import register
from envs.textcraft.env import TextCraftEnv, TextCraftState

ENV_ID = "agentq/TextCraft-v0"

register(ENV_ID, "envs.textcraft.env:TextCraftEnv")

__all__ = ["ENV_ID", "TextCraftEnv", "TextCraftState"]
