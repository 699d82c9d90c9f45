"""Acting with search: the committed mode of inference-time MCTS (docs/method.md, §3).

At every real step the agent searches from the state it is in and then executes
one action: the root's most visited edge (ties: the higher Q of Eq. 10, then
the first expanded). The search sees what an agent on the live web would: the
policy's proposals, the critic's ranking, and, as R in Eq. 8, a judge's value of
the state each simulation reached. It never sees the environment's reward, so
the episode's reward is the reward of what the agent actually did.

The verifier mode (``SearchResult.best``: the best of a search's rollouts by the
environment's own reward) is pass@rollouts with the environment as the
verifier, an upper bound that no deployed agent has; every table labels it so.

Each step's search is a fresh tree (no reuse of the subtree below the executed
edge), rooted at the current state: envs that snapshot restore it, the others
are reset and replay the committed commands before the search's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import torch

from agentq.agent import episode as ep
from agentq.agent.policy import Policy, forget_prompts
from agentq.records.history import History
from agentq.records.trajectory import Step, Trajectory
from agentq.records.tree import Node, SearchResult, SearchStats
from agentq.search.mcts import MCTS, Critic
from agentq.search.position import Position, path_steps


def committed_episode(
    env: gym.Env,
    policy: Policy,
    critic: Critic,
    judge,
    search: MCTS,
    *,
    task_id: Any,
    max_steps: int,
    dense_reward: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[Trajectory, SearchStats]:
    """One episode of at most ``max_steps`` real steps, each chosen by a search.

    ``judge`` values a state without the env's reward: ``judge.evaluate(task, [state])``
    (a :class:`~agentq.critic.value.StateEvaluator`). ``search.max_depth`` is the
    lookahead of each step's search, cut to the steps the episode has left. The
    stats are the searches' summed, plus the real steps in ``env_steps`` and ``searches``.
    """
    forget_prompts(policy, critic, judge)  # prompt caches live for this episode only
    history = task = ep.start(env, task_id)

    def leaf_value(state: History) -> float:
        return judge.evaluate(task, [state])[0]

    stats = SearchStats()
    steps: list[Step] = []
    commands: list[str] = []
    outcome = ep.Outcome(terminal=False, success=False, score=0.0)
    for t in range(max_steps):
        lookahead = dataclasses.replace(search, max_depth=min(search.max_depth, max_steps - t))
        result = lookahead.search_from(
            env, policy, critic, task_id=task_id, generator=generator,
            start=history, prefix=commands, leaf_value=leaf_value,
        )  # fmt: skip
        stats.add(result.stats)
        edge = chosen_edge(result)
        # Back to the root's state, which the search left (its replay is not the agent's: uncounted).
        Position(env, task_id, result.tree, SearchStats(), commands).goto(result.tree.root)
        history, reward, outcome = ep.step(env, history, edge.action, edge.command)
        stats.env_steps += 1
        step = path_steps(result.tree, edge)[-1]
        steps.append(dataclasses.replace(step, observation=history.observation, reward=reward))
        commands.append(edge.command)
        if outcome.terminal:
            break
    stats.searches = len(steps)
    return outcome.trajectory(task_id, steps, dense_reward=dense_reward, source="committed"), stats


def chosen_edge(result: SearchResult) -> Node:
    """The root's most visited child; ties go to the higher Q (Eq. 10), then to the first."""
    tree = result.tree
    children = tree.children(tree.root)
    if not children:
        raise RuntimeError(f"task {tree.task_id!r}: the search expanded no action at the root")
    return max(children, key=lambda c: (c.visits, c.blended_q(tree.alpha), -c.id))

