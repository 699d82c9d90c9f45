"""ScienceWorld registered with Gymnasium as ``agentq/ScienceWorld-v0``.

``gymnasium.make("envs.scienceworld:agentq/ScienceWorld-v0", max_steps=30)``
imports this package and so registers the id; the env's own methods
(``task_ids``) are on ``env.unwrapped``. Each env runs one JVM: ``close()`` it.
"""

from envs import register
from envs.scienceworld.env import DEFAULT_TASKS, ScienceWorldEnv, parse_task_id, task_id
from envs.scienceworld.simulator import TASK_NAMES

ENV_ID = "agentq/ScienceWorld-v0"

register(ENV_ID, "envs.scienceworld.env:ScienceWorldEnv")

__all__ = ["DEFAULT_TASKS", "ENV_ID", "TASK_NAMES", "ScienceWorldEnv", "parse_task_id", "task_id"]
