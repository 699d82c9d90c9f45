"""Reading back what a WebShop episode did from the pages it saw (envs/webshop/episodes.py)."""

from __future__ import annotations

import pytest

from agentq.records.examples import StepPair
from envs.webshop import WebShopEnv
from envs.webshop.episodes import (
    RESULT_IDS,
    behaviour_row,
    directions_row,
    episode_behaviour,
    page_kind,
    pairs_row,
    shortfall_row,
)


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    return WebShopEnv(max_steps=15)


def played(env: WebShopEnv, task_id: int, commands) -> dict:
    """A logged trajectory (each step's command and the page it led to) of ``commands``, where a
    command may be a function of the page it acts on."""
    observation, _ = env.reset(options={"task_id": task_id})
    steps, info = [], {"success": False}
    for command in commands:
        command = command(observation) if callable(command) else command
        observation, _, _, _, info = env.step(command)
        steps.append({"command": command, "observation": observation})
    return {"steps": steps, "success": info["success"]}


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


def goal_on_first_page(env: WebShopEnv):
    """A goal with an option whose own product the instruction's search lists on page 1."""
    for task_id in env.task_ids("train"):
        goal = env.engine.goals[task_id]
        env.reset(options={"task_id": task_id})
        *_, info = env.step(f"search[{goal.instruction_text}]")
        if goal.goal_options and f"click[{goal.asin}]" in info["valid_actions"]:
            return task_id, goal
    raise AssertionError("no goal's product on its first results page")


def test_shortfall_row_replays_each_failure_and_names_what_its_purchase_missed(env: WebShopEnv) -> None:
    task_id, goal = goal_on_first_page(env)
    product = f"click[{goal.asin}]"
    search = f"search[{goal.instruction_text}]"
    right = played(env, task_id, [search, product, *(f"click[{o}]" for o in goal.goal_options), "click[Buy Now]"])
    no_option = played(env, task_id, [search, product, "click[Buy Now]"])
    idle = played(env, task_id, [search])
    assert right["success"] and not no_option["success"]
    row = shortfall_row("policy", env, {task_id: right, task_id + 1: idle})
    assert (row["goals"], row["failed"], row["bought nothing"], row["missed an option"]) == (2, 1, 1, 0)
    row = shortfall_row("policy", env, {task_id: no_option})
    assert (row["failed"], row["missed an option"], row["only an option"], row["wrong type"]) == (1, 1, 1, 0)


def test_pairs_row_counts_pairs_by_the_page_their_state_shows(env: WebShopEnv) -> None:
    task_id, goal = goal_on_first_page(env)
    search_page, _ = env.reset(options={"task_id": task_id})
    results, *_ = env.step(f"search[{goal.instruction_text}]")
    product, *_ = env.step(f"click[{goal.asin}]")
    description, *_ = env.step("click[Description]")
    pages = [search_page, results, product, product, description]
    assert [page_kind(p) for p in pages] == ["search page", "results page", "product page", "product page", "other page"]
    pairs = [
        StepPair(task_id, 0, [{"role": "user", "content": f"Current observation:\n{page}"}], "a", "b", [1], [2], -1.0, -2.0, 1.0, 0.0, 1, 1)
        for page in pages
    ]
    row = pairs_row("iteration 1", pairs)
    assert row == {"row": "iteration 1", "pairs": 5, "search page": 1, "results page": 1, "product page": 2, "other page": 1}


def test_directions_row_counts_what_product_page_pairs_chose_over_what(env: WebShopEnv) -> None:
    from agentq.agent.action import parse_composite

    task_id, goal = goal_on_first_page(env)
    env.reset(options={"task_id": task_id})
    results, *_ = env.step(f"search[{goal.instruction_text}]")
    product, *_ = env.step(f"click[{goal.asin}]")
    moves = [  # (page, chosen, rejected): the results page's pair is no product-page pair
        (product, "click[walnut]", "click[Buy Now]"),
        (product, "click[walnut]", "click[Buy Now]"),
        (product, "click[Buy Now]", "click[black]"),
        (product, "click[Reviews]", "click[Buy Now]"),
        (product, "search[bed]", "click[Buy Now]"),
        (results, "click[Next >]", "click[Buy Now]"),
    ]
    pairs = [
        StepPair(task_id, 0, [{"role": "user", "content": page}], f"COMMAND: {c}", f"COMMAND: {r}", [1], [2], -1.0, -2.0, 1.0, 0.0, 1, 1)
        for page, c, r in moves
    ]
    row = directions_row("arm", pairs, lambda text: parse_composite(text).command)
    assert row["option > Buy Now"] == 2 and row["Buy Now > option"] == 1 and row["other button > Buy Now"] == 1
    assert row["other"] == 1  # "no click > Buy Now" is not among the nine shown
    assert sum(v for k, v in row.items() if k != "row") == 5


def test_product_page_click_tells_an_option_from_buy_now_and_navigation() -> None:
    from envs.webshop.episodes import product_page_click

    kinds = [product_page_click(c) for c in ("click[walnut]", "click[Buy Now]", "click[< Prev]", "click[Reviews]", "search[bed]", "")]
    assert kinds == ["option", "Buy Now", "other button", "other button", "no click", "no click"]
