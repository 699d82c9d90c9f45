"""WebShop engine, reward and env: hand-worked rewards, page flow, bad input,
snapshots, the Gymnasium contract, the web UI, and solvability of the default
catalogue by a scripted oracle."""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.parse
import urllib.request

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from envs import OracleResult
from envs.webshop import ENV_ID, WebShopEnv
from envs.webshop.engine import RESULTS_PER_PAGE, SessionState, WebShopEngine
from envs.webshop.oracle import play
from envs.webshop.reward import get_reward, title_nouns, token_set_ratio
from envs.webshop.schema import Catalogue, Goal, Product

SHIRT = Product(
    asin="B0SHIRT001",
    name="Cotton Crew Neck T-Shirt",
    category="fashion",
    product_category="Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
    query="men t shirt",
    price=19.99,
    description="A soft everyday tee made of ring spun cotton.",
    bullet_points=("Short sleeve", "Machine wash cold", "Relaxed fit"),
    attributes=("machine wash", "cotton"),
    options={"size": ("small", "medium", "large"), "color": ("navy blue", "white")},
    reviews=("Great shirt, fits well.",),
    rating=4.5,
)
MUG = Product(
    asin="B0MUG00001",
    name="Ceramic Coffee Mug",
    category="furniture",
    product_category="Home & Kitchen › Kitchen & Dining › Dining › Mugs",
    query="coffee mug",
    price=9.5,
    description="Dishwasher safe ceramic mug.",
    attributes=("dishwasher safe",),
)
TOTE = Product(
    asin="B0TOTE0001",
    name="Cotton Tote Bag",
    category="fashion",
    product_category="Clothing, Shoes & Jewelry › Women › Handbags › Totes",
    query="tote bag",
    price=12.0,
    attributes=("cotton",),
)
# 23 lamps all matching "lamp": three result pages of 10, 10 and 3.
LAMPS = tuple(
    Product(
        asin=f"B0LAMP{i:04d}",
        name=f"Desk Lamp Model {i}",
        category="furniture",
        product_category="Home & Kitchen › Lighting › Lamps",
        query="desk lamp",
        price=20.0 + i,
        description="lamp " * (1 + i % 3),
        options={"color": ("black", "white")},
    )
    for i in range(23)
)
GOAL = Goal(
    goal_id=0,
    asin=SHIRT.asin,
    category=SHIRT.category,
    query=SHIRT.query,
    name=SHIRT.name,
    product_category=SHIRT.product_category,
    instruction_text="i need a large navy blue cotton t-shirt for machine wash, short sleeve, and price lower than 30.00 dollars",
    attributes=("machine wash", "short sleeve"),
    goal_options=("large", "navy blue"),
    price_upper=30.0,
)
LAMP_GOAL = Goal(
    goal_id=1,
    asin=LAMPS[14].asin,
    category="furniture",
    query="desk lamp",
    name=LAMPS[14].name,
    product_category=LAMPS[14].product_category,
    instruction_text="i want a white desk lamp, and price lower than 40.00 dollars",
    attributes=(),
    goal_options=("white",),
    price_upper=40.0,
)
CATALOGUE = Catalogue(
    products=(SHIRT, MUG, TOTE, *LAMPS),
    goals=(GOAL, LAMP_GOAL),
    train_goals=(0,),
    test_goals=(1,),
    source="test",
)


@pytest.fixture(scope="module")
def engine() -> WebShopEngine:
    return WebShopEngine(CATALOGUE)


@pytest.fixture()
def env() -> WebShopEnv:
    return WebShopEnv(max_steps=15, catalogue=CATALOGUE)


# -- reward -------------------------------------------------------------------


def test_reward_full_match_is_one() -> None:
    r = get_reward(SHIRT, GOAL, ["large", "navy blue"])
    # "machine wash" is an attribute; "short sleeve" is found in the bullet points.
    assert (r.r_type, r.attr_matches, r.option_matches, r.price_ok) == (1.0, 2, 2, True)
    assert r.total == 1.0 and r.success


def test_reward_missing_option() -> None:
    r = get_reward(SHIRT, GOAL, ["large"])
    assert r.option_matches == 1
    assert r.total == pytest.approx(4 / 5) and not r.success
    # Colour normalisation: "blue" is the first colour word (in list order) of
    # both, so "sky blue" matches "navy blue" (token-set ratio alone gives 67).
    assert token_set_ratio("sky blue", "navy blue") <= 85
    assert get_reward(SHIRT, GOAL, ["large", "sky blue"]).option_matches == 2
    assert get_reward(SHIRT, GOAL, ["medium", "white"]).total == pytest.approx(3 / 5)


def test_reward_price_over_limit() -> None:
    r = get_reward(SHIRT, dataclasses.replace(GOAL, price_upper=10.0), ["large", "navy blue"])
    assert not r.price_ok and r.total == pytest.approx(4 / 5)


def test_reward_wrong_product_type() -> None:
    # No noun of the goal title in "Ceramic Coffee Mug": r_type 0 zeroes everything.
    mug = get_reward(MUG, GOAL, ["large", "navy blue"])
    assert mug.title_score == 0.0 and mug.r_type == 0.0 and mug.total == 0.0
    # One of four goal nouns (cotton / crew / neck / shirt) shared: 0.25 > 0.2 -> 1.0.
    tote = get_reward(TOTE, GOAL, [])
    assert tote.title_score == pytest.approx(0.25) and tote.r_type == 1.0
    # One of six shared, no query or breadcrumb match: 0.5.
    six = dataclasses.replace(GOAL, name="Cotton Crew Neck T-Shirt Pack Set")
    half = get_reward(TOTE, six, [])
    assert half.title_score == pytest.approx(1 / 6) and half.r_type == 0.5
    # One of eleven (< 0.1): 0.1.
    many = dataclasses.replace(
        GOAL, name="cotton crew neck shirt pack set tee top jersey polo henley"
    )
    assert get_reward(TOTE, many, []).r_type == 0.1
    # The same query alone still gives 1.0 when some noun is shared.
    same_query = dataclasses.replace(TOTE, query=GOAL.query)
    assert get_reward(same_query, six, []).r_type == 1.0


def test_title_nouns_drop_adjectives_numbers_and_stopwords() -> None:
    assert title_nouns("New Large Navy Blue Cotton T-Shirt for Men, 2 Pack") == [
        "cotton", "shirt", "men", "pack",
    ]  # fmt: skip
    assert title_nouns("Waterproof Portable 10000mAh Power Bank") == ["power", "bank"]
    # "stainless" goes by its -less suffix (spaCy tags it ADJ too).
    assert title_nouns("Beautiful Stainless Steel Water Bottle") == ["steel", "water", "bottle"]
    assert title_nouns("") == []


def test_token_set_ratio_is_case_insensitive_and_rounded() -> None:
    assert token_set_ratio("Machine Wash", "machine wash cold") == 100
    assert isinstance(token_set_ratio("a", "b"), int)


# -- page flow ----------------------------------------------------------------


def _click(engine: WebShopEngine, state: SessionState, text: str) -> SessionState:
    new = engine.step(state, f"click[{text}]")
    assert not new.message, new.message
    return new


def test_page_flow_search_item_options_buy(engine: WebShopEngine) -> None:
    state = engine.new_session(0)
    obs = engine.observation(state)
    assert obs.startswith("Instruction: [SEP] " + GOAL.instruction_text)
    assert engine.has_search_bar(state) and engine.valid_actions(state) == ["search[...]"]

    state = engine.step(state, "search[cotton t-shirt navy]")
    assert state.page == "results" and state.results[0] == SHIRT.asin
    assert "[button] B0SHIRT001 [button_]" in engine.observation(state)
    assert "click[b0shirt001]" not in engine.valid_actions(state)  # listed as shown
    assert "click[B0SHIRT001]" in engine.valid_actions(state)

    state = _click(engine, state, "b0shirt001")  # case-insensitive
    assert state.page == "item"
    assert engine.valid_actions(state) == [
        "click[Back to Search]", "click[< Prev]", "click[small]", "click[medium]", "click[large]",
        "click[navy blue]", "click[white]", "click[Description]", "click[Features]",
        "click[Reviews]", "click[Buy Now]",
    ]  # fmt: skip
    state = _click(engine, state, "LARGE")
    state = _click(engine, state, "white")
    state = _click(engine, state, "navy blue")  # replaces white in the color group
    assert state.selected == (("size", "large"), ("color", "navy blue"))
    obs = engine.observation(state)
    assert "[clicked button] large [clicked button_]" in obs and "[button] white [button_]" in obs

    for label, page, text in [
        ("Description", "description", "ring spun cotton"),
        ("Features", "features", "Machine wash cold"),
        ("Reviews", "reviews", "fits well"),
    ]:
        sub = _click(engine, state, label)
        assert sub.page == page and text in engine.observation(sub)
        assert engine.valid_actions(sub) == ["click[Back to Search]", "click[< Prev]"]
        back = _click(engine, sub, "< Prev")
        assert back == state  # options kept

    done = _click(engine, state, "Buy Now")
    assert done.done and done.reward is not None and done.reward.total == 1.0
    assert engine.valid_actions(done) == []
    assert "Your score" in engine.observation(done)
    after = engine.step(done, "click[Buy Now]")
    assert after.done and "over" in after.message

    prev = _click(engine, state, "< Prev")
    assert prev.page == "results" and prev.selected == () and prev.query == "cotton t-shirt navy"
    assert _click(engine, prev, "Back to Search") == engine.new_session(0)


def test_pagination_ten_per_page(engine: WebShopEngine) -> None:
    state = engine.step(engine.new_session(1), "search[lamp]")
    assert len(state.results) == 23 and state.page_num == 1
    shown = lambda s: [a for a in engine.valid_actions(s) if "B0LAMP" in a]  # noqa: E731
    assert len(shown(state)) == RESULTS_PER_PAGE
    assert "click[< Prev]" not in engine.valid_actions(state)
    assert "Page 1 (Total results: 23)" in engine.observation(state)
    page2 = _click(engine, state, "Next >")
    assert page2.page_num == 2 and len(shown(page2)) == 10
    assert not set(shown(page2)) & set(shown(state))
    page3 = _click(engine, page2, "next >")
    assert len(shown(page3)) == 3 and "click[Next >]" not in engine.valid_actions(page3)
    assert "no button" in engine.step(page3, "click[Next >]").message
    assert _click(engine, page3, "< Prev") == page2
    # An asin of another page is not clickable here.
    assert "no button" in engine.step(page3, f"click[{state.results[0]}]").message
    # Back from an item returns to the same results page.
    item = _click(engine, page2, page2.results[12])
    assert _click(engine, item, "< Prev") == page2


def test_search_without_matches_shows_empty_results(engine: WebShopEngine) -> None:
    state = engine.step(engine.new_session(0), "search[zzzz qqqq]")
    assert state.page == "results" and state.results == ()
    assert "No products match" in engine.observation(state)
    assert engine.valid_actions(state) == ["click[Back to Search]"]


# -- bad input ----------------------------------------------------------------


BAD_ACTIONS = [
    ("", "expected search[query] or click[button]"),
    ("buy the shirt", "expected search[query] or click[button]"),
    ("click[", "expected search[query] or click[button]"),
    ("search[]", "empty"),
    ("search[   ]", "empty"),
    ("x" * 10_000, "longer than 512"),
    ("search[" + "shirt " * 200 + "]", "longer than 512"),
    ("click[Buy Now]", "nothing to click on the search page"),
    ("click[]", "nothing to click"),
    ("\x00\x1b[31mclick[\u00e9]", "expected search[query]"),
]


@pytest.mark.parametrize(("action", "why"), BAD_ACTIONS)
def test_bad_actions_on_search_page_change_nothing(
    engine: WebShopEngine, action: str, why: str
) -> None:
    state = engine.new_session(0)
    new = engine.step(state, action)
    assert new.message.startswith("Invalid action:") and why in new.message
    assert dataclasses.replace(new, message="") == state
    assert new.message in engine.observation(new)
    assert engine.observation(new).startswith("Instruction: [SEP] ")


def test_bad_actions_on_other_pages(engine: WebShopEngine) -> None:
    results = engine.step(engine.new_session(0), "search[shirt]")
    item = _click(engine, results, SHIRT.asin)
    for state, action, why in [
        (results, "search[mug]", "only possible on the search page"),
        (results, "click[Buy Now]", "no button 'Buy Now'"),
        (item, "click[xx-large]", "no button"),
        (item, "click[B0MUG00001]", "no button"),
        (item, "search[shirt]", "only possible on the search page"),
        (item, "click[Next >]", "no button"),
    ]:
        new = engine.step(state, action)
        assert why in new.message, (action, new.message)
        assert dataclasses.replace(new, message="") == state
    # The message is gone after the next valid action.
    assert engine.step(engine.step(item, "click[nope]"), "click[large]").message == ""
    assert engine.step(results, 42).message.startswith("Invalid action")  # type: ignore[arg-type]


def test_invalid_actions_count_toward_the_step_limit() -> None:
    env = WebShopEnv(max_steps=4, catalogue=CATALOGUE)
    obs, info = env.reset(options={"task_id": 0})
    for i, action in enumerate(["garbage", "click[nothing]", "search[]", "search[shirt]"], start=1):
        obs, reward, terminated, truncated, info = env.step(action)
        assert reward == 0.0 and not terminated
        assert truncated == (i == 4)
    assert obs.startswith("Instruction:") and env.observation_space.contains(obs)
    # After the end nothing changes.
    again = env.step("click[Back to Search]")
    assert again[0] == obs and again[3] is True


# -- env ------------------------------------------------------------------------


def test_env_episode_info_and_reward(env: WebShopEnv) -> None:
    obs, info = env.reset(options={"task_id": 0})
    assert info == {
        "task_id": 0,
        "success": False,
        "score": 0.0,
        "has_search_bar": True,
        "valid_actions": ["search[...]"],
    }
    for action in [
        "search[navy cotton t-shirt]",
        f"click[{SHIRT.asin}]",
        "click[large]",
        "click[navy blue]",
    ]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert reward == 0.0 and not (terminated or truncated)
        assert not info["has_search_bar"] and info["valid_actions"]
    obs, reward, terminated, truncated, info = env.step("click[Buy Now]")
    assert (reward, terminated, truncated, info["success"], info["score"]) == (
        1.0,
        True,
        False,
        True,
        1.0,
    )
    assert (
        info["reward_breakdown"]["option_matches"] == 2 and info["reward_breakdown"]["total"] == 1.0
    )
    assert env.step("click[Buy Now]")[1:4] == (0.0, True, False)


def test_partial_purchase_scores_but_fails(env: WebShopEnv) -> None:
    env.reset(options={"task_id": 0})
    for action in ["search[shirt]", f"click[{SHIRT.asin}]", "click[small]"]:
        env.step(action)
    _, reward, terminated, _, info = env.step("click[buy now]")
    assert terminated and reward == pytest.approx(3 / 5) == info["score"] and not info["success"]


def test_snapshot_restore_is_exact(env: WebShopEnv) -> None:
    env.reset(options={"task_id": 1})
    env.step("search[lamp]")
    env.step("click[Next >]")
    snap = env.snapshot()
    obs_before = env._observe()
    info_before = env._info()
    env.step(f"click[{snap.session.results[10]}]")
    env.step("click[white]")
    _, reward, terminated, *_ = env.step("click[Buy Now]")
    assert terminated and reward == 1.0
    env.restore(snap)
    assert env.snapshot() == snap and env._observe() == obs_before and env._info() == info_before
    # The same snapshot replays to the same outcome any number of times.
    for _ in range(2):
        env.restore(snap)
        env.step("click[Back to Search]")
        assert env.snapshot().steps == snap.steps + 1 and env.snapshot().session.page == "search"


def test_task_ids_and_reset_defaults(env: WebShopEnv) -> None:
    assert env.task_ids("train") == [0] and env.task_ids("test") == [1]
    with pytest.raises(ValueError):
        env.task_ids("dev")
    with pytest.raises(ValueError):
        env.reset(options={"task_id": 99})
    _, info = env.reset(seed=3)
    assert info["task_id"] == 0  # the only train goal


def test_observations_are_printable_and_clipped() -> None:
    odd = dataclasses.replace(
        SHIRT, asin="B0ODD00001", description="caf\u00e9\nline\t" + "x" * 20_000
    )
    catalogue = dataclasses.replace(
        CATALOGUE, products=(odd,), goals=(dataclasses.replace(GOAL, asin=odd.asin),)
    )
    env = WebShopEnv(catalogue=catalogue)
    env.reset(options={"task_id": 0})
    env.step("search[shirt]")
    env.step(f"click[{odd.asin}]")
    obs = env.step("click[Description]")[0]
    assert env.observation_space.contains(obs) and "caf? line " in obs


def test_check_env_unwrapped_and_made() -> None:
    check_env(WebShopEnv(catalogue=CATALOGUE), skip_render_check=True)
    made = gymnasium.make(f"envs.webshop:{ENV_ID}", max_steps=7, catalogue=CATALOGUE)
    assert isinstance(made.unwrapped, WebShopEnv) and made.unwrapped.max_steps == 7
    assert made.spec is not None and made.spec.max_episode_steps is None
    check_env(made.unwrapped)


# -- web UI ----------------------------------------------------------------------


def test_ui_serves_pages_and_takes_actions() -> None:
    from envs.webshop.ui import make_server

    server = make_server(WebShopEnv(catalogue=CATALOGUE), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        html = urllib.request.urlopen(f"{base}/?task_id=0", timeout=10).read().decode()
        assert "navy blue cotton t-shirt" in html and "<form" in html
        data = urllib.parse.urlencode({"action": "search[cotton shirt]"}).encode()
        html = urllib.request.urlopen(f"{base}/act", data=data, timeout=10).read().decode()
        assert SHIRT.asin in html and "Total results" in html
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- solvability of the default catalogue ---------------------------------------------


def test_oracle_solves_default_catalogue() -> None:
    start = time.perf_counter()
    env = WebShopEnv(max_steps=30)
    build = time.perf_counter() - start
    catalogue = env.engine.catalogue
    assert len(catalogue.products) >= 1000 and len(catalogue.goals) >= 1500
    assert build < 10.0, f"catalogue + index took {build:.1f}s"
    check_env(WebShopEnv(), skip_render_check=True)
    test_ids = env.task_ids("test")[:100]
    assert len(test_ids) == 100
    results = [play(env, i, 30) for i in test_ids]
    rewards = [r.score for r in results]
    solved = sum(r.success and r.score == 1.0 for r in results)
    assert solved >= 95, f"oracle solved {solved}/100; rewards {sorted(rewards)[:10]}"
    # ... and within WebShop's 15-step budget, which the oracle's shortest path fits (<= 6).
    assert sum(play(WebShopEnv(max_steps=15), i, 15).success for i in test_ids) == solved
    assert max(r.steps for r in results) <= 6
    # A budget too short to reach Buy Now fails: search, click, options, buy need >= 3.
    assert play(env, test_ids[0], 2) == OracleResult(success=False, score=0.0, steps=2)
