"""WebShop registered with Gymnasium as ``agentq/WebShop-v0``.

``gymnasium.make("envs.webshop:agentq/WebShop-v0", max_steps=15)`` imports this
package and so registers the id; the env's own methods (``task_ids``,
``snapshot``, ``restore``) are on ``env.unwrapped``.
"""

from envs import register
from envs.webshop.env import WebShopEnv, WebShopState

ENV_ID = "agentq/WebShop-v0"

register(ENV_ID, "envs.webshop.env:WebShopEnv")

__all__ = ["ENV_ID", "WebShopEnv", "WebShopState"]
