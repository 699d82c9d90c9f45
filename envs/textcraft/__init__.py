"""TextCraft (ADaPT) registered with Gymnasium as ``agentq/TextCraft-v0``.

``gymnasium.make("envs.textcraft:agentq/TextCraft-v0", max_steps=20)`` imports
this package and so registers the id; the env's own methods (``task_ids``,
``snapshot``, ``restore``) are on ``env.unwrapped``.
"""

import gymnasium

from envs.textcraft.env import TextCraftEnv, TextCraftState

ENV_ID = "agentq/TextCraft-v0"

# Importing twice (e.g. a reload in a notebook) must not re-register: gymnasium
# warns on overriding an existing id.
if ENV_ID not in gymnasium.registry:
    gymnasium.register(
        id=ENV_ID,
        entry_point="envs.textcraft.env:TextCraftEnv",
        # The env counts its own steps (they are part of its snapshot).
        max_episode_steps=None,
    )

__all__ = ["ENV_ID", "TextCraftEnv", "TextCraftState"]
