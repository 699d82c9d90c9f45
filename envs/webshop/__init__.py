"""WebShop registered with Gymnasium as ``agentq/WebShop-v0``.

``gymnasium.make("envs.webshop:agentq/WebShop-v0", max_steps=15)`` imports this
package and so registers the id; the env's own methods (``task_ids``,
``snapshot``, ``restore``) are on ``env.unwrapped``.
"""

import gymnasium

from envs.webshop.env import WebShopEnv, WebShopState

ENV_ID = "agentq/WebShop-v0"

# Importing twice (e.g. a reload in a notebook) must not re-register: gymnasium
# warns on overriding an existing id.
if ENV_ID not in gymnasium.registry:
    gymnasium.register(
        id=ENV_ID,
        entry_point="envs.webshop.env:WebShopEnv",
        # The env counts its own steps (they are part of its snapshot).
        max_episode_steps=None,
    )

__all__ = ["ENV_ID", "WebShopEnv", "WebShopState"]
