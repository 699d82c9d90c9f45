"""OpenTable-style booking registered with Gymnasium as ``agentq/OpenTable-v0``.

``gymnasium.make("envs.opentable:agentq/OpenTable-v0", max_steps=30)`` imports
this package and so registers the id; the env's own methods (``task_ids``,
``task``) are on ``env.unwrapped``. Needs the system Chromium
(``/usr/bin/chromium``, Debian package ``chromium``).
"""

from envs import register
from envs.opentable.env import OpenTableEnv

ENV_ID = "agentq/OpenTable-v0"

register(ENV_ID, "envs.opentable.env:OpenTableEnv")

__all__ = ["ENV_ID", "OpenTableEnv"]
