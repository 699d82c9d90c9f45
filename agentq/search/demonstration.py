"""Scripted demonstrations: the env's oracle plays each task, recorded as a search result.

Not a search of the policy: it is how a behaviour-cloned base gets its data
(docs/method.md §9). The loop's collection phase "searches" each training task
with the scripted oracle (``envs.<name>.oracle``); its episode is replayed
through the tree bookkeeping every search uses, so the trajectory has the
prompts the policy would see (h_t rendered by the policy's own prompt builder)
and composite texts written from :attr:`ScriptedDemonstration.template`.
``objective=sft`` (pairs ``successes``) then trains on the successful ones.

What the oracle knows (WebShop: the goal's product id; ScienceWorld: the gold
path) the policy does not: the demonstrations are reachable commands, never
the reasoning that finds them, so a template writes no THOUGHT by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import torch

from agentq.records.action import Candidate
from agentq.records.tree import SearchResult
from agentq.search.position import leaf_trajectory
from agentq.search.run import SearchRun
from envs.demonstrations import oracle_commands

SOURCE = "oracle"  # Trajectory.source of a demonstration


@dataclass
class ScriptedDemonstration:
    """Arguments are the config keys of ``conf/search/demonstration.yaml``.

    Args:
        max_depth: the oracle's step budget.
        dense_reward: the trajectory's return is the env's score instead of 1/0 success.
        template: the composite text of a step, ``{command}`` the oracle's command and
            ``{status}`` CONTINUE, or SUCCESS / FAILURE at the episode's last step.
    """

    critic_kind: ClassVar[None] = None
    has_visits: ClassVar[bool] = False
    scripted: ClassVar[bool] = True  # the oracle acts, not the policy: nothing to evaluate as a search

    max_depth: int = 15
    dense_reward: bool = False
    template: str = "COMMAND: {command}"

    def __post_init__(self) -> None:
        if self.max_depth < 1:
            raise ValueError(f"search.max_depth must be >= 1, got {self.max_depth}")
        try:
            text = self.template.format(command="click[x]", status="CONTINUE")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(
                f"search.template={self.template!r} is not a format string of {{command}} and {{status}}: {e}"
            ) from None
        if "COMMAND: click[x]" not in text:
            raise ValueError(f"search.template={self.template!r} must contain the line 'COMMAND: {{command}}'")

    def __call__(
        self,
        env: gym.Env,
        policy: Any,
        critic: Any = None,
        *,
        task_id: Any,
        generator: torch.Generator | None = None,
    ) -> SearchResult:
        outcome, commands = oracle_commands(env, task_id, self.max_depth)
        run = SearchRun(env, task_id, alpha=0.0, max_policy_calls=None)  # resets to the task
        node = run.root
        for i, command in enumerate(commands):
            last = i == len(commands) - 1
            status = ("SUCCESS" if outcome.success else "FAILURE") if last else "CONTINUE"
            node.prompt = policy.prompt(node.history)
            text = self.template.format(command=command, status=status)
            node = run.step_into(node, Candidate(text=text, command=command, prompt=node.prompt))
        trajectory = leaf_trajectory(run.tree, node, dense_reward=self.dense_reward, source=SOURCE)
        if trajectory.success != outcome.success:  # the env's replay contract (envs/contract.py)
            raise RuntimeError(
                f"task {task_id!r}: replaying the oracle's {len(commands)} commands gave success="
                f"{trajectory.success}, the oracle's episode {outcome.success}: the env does not replay deterministically"
            )
        run.trajectories.append(trajectory)
        run.stats.episodes = 1
        return run.result(trajectory)
