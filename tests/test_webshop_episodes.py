"""Reading back what a WebShop episode did from the pages it saw (envs/webshop/episodes.py)."""

from __future__ import annotations

import pytest

from envs.webshop import WebShopEnv
from envs.webshop.episodes import RESULT_IDS, behaviour_row, episode_behaviour


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    return WebShopEnv(max_steps=15)


def played(env: WebShopEnv, task_id: int, commands) -> dict:
    """A logged trajectory (each step's command and the page it led to) of ``commands``, where a
    command may be a function of the page it acts on."""
    observation, _ = env.reset(options={"task_id": task_id})
    steps = []
    for command in commands:
        command = command(observation) if callable(command) else command
        observation, *_ = env.step(command)
        steps.append({"command": command, "observation": observation})
    return {"steps": steps}


def goal_with_options(env: WebShopEnv, at_least: int):
    engine = env.engine
    task_id = next(t for t in env.task_ids("train") if len(engine.goals[t].goal_options) >= at_least)
    return task_id, engine.goals[task_id]


def test_counts_the_opened_rank_the_options_and_the_purchase(env: WebShopEnv) -> None:
    task_id, goal = goal_with_options(env, at_least=2)
    second = lambda page: f"click[{RESULT_IDS.findall(page)[1]}]"  # noqa: E731
    trajectory = played(
        env,
        task_id,
        [f"search[{goal.instruction_text}]", second, "click[Description]", "click[< Prev]",
         *(f"click[{o}]" for o in goal.goal_options), "click[Buy Now]"],
    )
    assert episode_behaviour(trajectory) == (2, len(goal.goal_options), True)


def test_an_episode_that_never_opens_a_result_or_buys(env: WebShopEnv) -> None:
    task_id, goal = goal_with_options(env, at_least=1)
    trajectory = played(env, task_id, [f"search[{goal.instruction_text}]", "click[Next >]", "click[< Prev]"])
    assert episode_behaviour(trajectory) == (None, 0, False)


def test_behaviour_row_sums_the_episodes(env: WebShopEnv) -> None:
    task_id, goal = goal_with_options(env, at_least=1)
    first = lambda page: f"click[{RESULT_IDS.findall(page)[0]}]"  # noqa: E731
    bought = played(env, task_id, [f"search[{goal.instruction_text}]", first, "click[Buy Now]"])
    idle = played(env, task_id, [f"search[{goal.instruction_text}]"])
    row = behaviour_row("policy", {1: bought, 2: idle})
    assert row["goals"] == 2 and row["bought"] == 1
    assert row["opened result 1"] == 1 and row["opened none"] == 1
    assert row["options clicked: 0"] == 2
