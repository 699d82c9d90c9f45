"""A scripted WebShop buyer that knows the goal's product.

It searches with the instruction's text, pages through the results to the
goal's product (``Goal.asin``), selects the goal's options and clicks Buy Now:
the shortest honest path through the shop's pages, so it measures whether a
goal is reachable in a step budget by the search the agent uses (the oracle
row of the evaluation, :mod:`agentq.oracle`). It is not used for training.
"""

from __future__ import annotations

import gymnasium as gym

from envs import OracleResult


def play(env: gym.Env, task_id: int, max_steps: int) -> OracleResult:
    """Play goal ``task_id`` with at most ``max_steps`` steps (and the env's own limit)."""
    goal = env.unwrapped.engine.goals[int(task_id)]
    _, info = env.reset(options={"task_id": task_id})
    steps = 0

    def step(action: str) -> bool:
        """Take ``action``; True while the episode may go on."""
        nonlocal info, steps
        _, _, terminated, truncated, info = env.step(action)
        steps += 1
        return not (terminated or truncated) and steps < max_steps

    def result() -> OracleResult:
        return OracleResult(success=bool(info["success"]), score=float(info["score"]), steps=steps)

    if not step(f"search[{goal.instruction_text}]"):
        return result()
    while f"click[{goal.asin}]" not in info["valid_actions"]:
        if "click[Next >]" not in info["valid_actions"] or not step("click[Next >]"):
            return result()
    if not step(f"click[{goal.asin}]"):
        return result()
    for option in goal.goal_options:
        if not step(f"click[{option}]"):
            return result()
    step("click[Buy Now]")
    return result()
