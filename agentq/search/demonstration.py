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

An oracle never fails, so its episodes never show what to do after a failed
command, and a clone trained on them repeats its own failed command to the end of
the budget (experiments/textcraft_bc/). With ``mistake_rate`` the demonstration
plants mistakes, as DART (Laskey et al., 2017) perturbs a supervisor's
demonstrations: before an oracle command, with that probability, one other valid
action, kept only if the oracle's remaining commands still succeed after it.
The mistake stays in the history the next steps see (their prompts show it and
the env's answer); its step is marked ``imitate=False``, so no objective trains
on it, and the oracle's next command becomes the correction. Measured on
TextCraft at 0.3: the 135M clone still loops (experiments/textcraft_bc/NOTES.md).
Its loops repeat one command, so ``mistake_repeat`` makes that share of the
mistakes a repeat of the command before them, then the correction.
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
MISTAKE_TRIES = 8  # other valid actions tried, in random order, for one planted mistake


@dataclass
class ScriptedDemonstration:
    """Arguments are the config keys of ``conf/search/demonstration.yaml``.

    Args:
        max_depth: the oracle's step budget.
        dense_reward: the trajectory's return is the env's score instead of 1/0 success.
        template: the composite text of a step, ``{command}`` the oracle's command and
            ``{status}`` CONTINUE, or SUCCESS / FAILURE at the episode's last step.
        mistake_rate: the probability of a planted mistake before each oracle command
            (0: the oracle's episode as it is).
        mistake_repeat: the probability that a planted mistake repeats the command before
            it (if that command is valid there and not the oracle's next one) rather than
            another valid action; a repeat after which the oracle's commands fail plants
            nothing there.
    """

    critic_kind: ClassVar[None] = None
    has_visits: ClassVar[bool] = False
    scripted: ClassVar[bool] = True  # the oracle acts, not the policy: nothing to evaluate as a search

    max_depth: int = 15
    dense_reward: bool = False
    template: str = "COMMAND: {command}"
    mistake_rate: float = 0.0
    mistake_repeat: float = 0.0

    def __post_init__(self) -> None:
        if self.max_depth < 1:
            raise ValueError(f"search.max_depth must be >= 1, got {self.max_depth}")
        if not 0.0 <= self.mistake_rate < 1.0:
            raise ValueError(f"search.mistake_rate must be in [0, 1), got {self.mistake_rate}")
        if not 0.0 <= self.mistake_repeat <= 1.0:
            raise ValueError(f"search.mistake_repeat must be in [0, 1], got {self.mistake_repeat}")
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
        outcome, oracle = oracle_commands(env, task_id, self.max_depth)
        commands, mistakes = oracle, set()
        if outcome.success and self.mistake_rate > 0:
            commands, mistakes = self._plant_mistakes(env, task_id, oracle, generator)
        run = SearchRun(env, task_id, alpha=0.0, max_policy_calls=None)  # resets to the task
        node = run.root
        for i, command in enumerate(commands):
            last = i == len(commands) - 1
            status = ("SUCCESS" if outcome.success else "FAILURE") if last else "CONTINUE"
            node.prompt = policy.prompt(node.history)
            text = self.template.format(command=command, status=status)
            node = run.step_into(node, Candidate(text=text, command=command, prompt=node.prompt))
        trajectory = leaf_trajectory(run.tree, node, dense_reward=self.dense_reward, source=SOURCE)
        for i in mistakes:
            trajectory.steps[i].imitate = False
        if trajectory.success != outcome.success:  # the env's replay contract (envs/contract.py)
            raise RuntimeError(
                f"task {task_id!r}: replaying the oracle's {len(commands)} commands gave success="
                f"{trajectory.success}, the oracle's episode {outcome.success}: the env does not replay deterministically"
            )
        run.trajectories.append(trajectory)
        run.stats.episodes = 1
        return run.result(trajectory)

    def _plant_mistakes(
        self, env: gym.Env, task_id: Any, oracle: list[str], generator: torch.Generator | None
    ) -> tuple[list[str], set[int]]:
        """The oracle's commands with mistakes planted before some of them, and the
        mistakes' positions. A mistake is another of the env's valid actions at that
        point, kept only if the oracle's remaining commands still succeed after it
        within ``max_depth``; after :data:`MISTAKE_TRIES` refused actions none is planted.
        A repeat is the only try when chosen: if the oracle's commands fail after it,
        that position gets no mistake."""
        commands: list[str] = []
        mistakes: set[int] = set()
        for i, command in enumerate(oracle):
            if float(torch.rand((), generator=generator)) >= self.mistake_rate:
                commands.append(command)
                continue
            others = [a for a in _replay(env, task_id, commands)[1] if a != command]
            # The random order is drawn even when a repeat replaces it, and the repeat's coin only
            # when mistake_repeat > 0: saved runs' demonstrations keep their draws.
            order = torch.randperm(len(others), generator=generator)[:MISTAKE_TRIES].tolist()
            tries = [others[j] for j in order]
            repeat = self.mistake_repeat > 0 and float(torch.rand((), generator=generator)) < self.mistake_repeat
            if repeat and commands and commands[-1] in others:
                tries = [commands[-1]]
            for mistake in tries:
                trial = [*commands, mistake, *oracle[i:]]
                if len(trial) <= self.max_depth and _replay(env, task_id, trial)[0]:
                    mistakes.add(len(commands))
                    commands.append(mistake)
                    break
            commands.append(command)
        return commands, mistakes


def _replay(env: gym.Env, task_id: Any, commands: list[str]) -> tuple[bool, list[str]]:
    """Whether ``commands`` from the task's reset succeed exactly at their last command,
    and the valid actions where they end."""
    _, info = env.reset(options={"task_id": task_id})
    success = False
    for i, command in enumerate(commands):
        _, _, terminated, truncated, info = env.step(command)
        success = bool(info["success"])
        if (terminated or truncated) and i < len(commands) - 1:
            return False, []
    return success, list(info.get("valid_actions") or [])
