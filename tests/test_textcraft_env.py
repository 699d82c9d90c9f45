"""TextCraft env: Gymnasium contract, determinism, splits, limits, snapshots, solvability."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from envs import OracleResult
from envs.textcraft import ENV_ID, TextCraftEnv, commands, game
from envs.textcraft.oracle import play

REPO = Path(__file__).resolve().parents[1]
MAKE_ID = f"envs.textcraft:{ENV_ID}"
AGENT_R_TEST = Path("/work/shared/data/agent_r_splits/textcraft_test.json")


@pytest.fixture(scope="module")
def env() -> TextCraftEnv:
    return TextCraftEnv(max_steps=20)


def _digest(env: TextCraftEnv, task_ids: list[int]) -> str:
    parts = []
    for task_id in task_ids:
        obs, info = env.reset(options={"task_id": task_id})
        parts.append(obs + "\n" + "\n".join(info["valid_actions"]))
    return hashlib.sha256("\n\n".join(parts).encode()).hexdigest()


_DIGEST_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from envs.textcraft import TextCraftEnv, game
from tests.test_textcraft_env import _digest
print(json.dumps([game.goals(game.new_game()), _digest(TextCraftEnv(), [0, 7, 150, 418])]))
"""


def test_check_env_unwrapped_and_made() -> None:
    # Without a spec (not made) there is nothing for the render check to make.
    check_env(TextCraftEnv(), skip_render_check=True)
    made = gymnasium.make(MAKE_ID, max_steps=7)
    assert isinstance(made.unwrapped, TextCraftEnv)
    assert made.unwrapped.max_steps == 7
    assert made.spec is not None and made.spec.max_episode_steps is None
    check_env(made.unwrapped)
    with pytest.warns(UserWarning, match="different from the unwrapped"):
        check_env(made)
    made.close()


def test_reregistering_is_a_no_op() -> None:
    import importlib

    import envs.textcraft

    spec = gymnasium.spec(ENV_ID)
    importlib.reload(envs.textcraft)
    assert gymnasium.spec(ENV_ID) is spec


def test_observation_is_instruction_plus_state(env: TextCraftEnv) -> None:
    obs, info = env.reset(options={"task_id": 5})
    instruction, state = obs.split("\n\n", 1)[0], obs.rsplit("\n\n", 1)[1]
    assert instruction.startswith("Crafting commands:\n")
    assert "\n\nGoal: craft lodestone.\n\n" in obs
    assert state == "Last result: none\nInventory: You are not carrying anything."
    obs, *_ = env.step("get 4 netherite scrap")
    assert obs.endswith("\n\nLast result: Got 4 netherite scrap\nInventory: [netherite scrap] (4)")
    assert obs.startswith(instruction)
    assert env.observation_space.contains(obs)
    assert info["task_id"] == 5 and info["success"] is False and info["score"] == 0.0


def test_valid_actions_cover_listed_commands_and_gets(env: TextCraftEnv) -> None:
    obs, info = env.reset(options={"task_id": 5})
    listed = obs.split("Crafting commands:\n", 1)[1].split("\n\nGoal:", 1)[0].split("\n")
    actions = info["valid_actions"]
    assert actions[0] == "inventory"
    assert actions[1 : 1 + len(listed)] == listed
    gets = [a for a in actions if a.startswith("get ")]
    assert len(gets) == len(set(gets))
    assert actions[1 + len(listed) : 1 + len(listed) + len(gets)] == gets
    # Base items at the count each listed recipe uses; craftable ones are absent.
    assert {"get 4 netherite scrap", "get 9 gold nugget", "get 4 stone", "get 3 stone"} <= set(gets)
    assert not any(a.endswith((" gold ingot", " stone bricks")) for a in gets)
    for action in gets:
        env.reset(options={"task_id": 5})
        assert env.step(action)[0].rsplit("\n\n", 1)[1].startswith("Last result: Got ")


def test_tag_commands_fail_verbatim_and_have_member_variants(env: TextCraftEnv) -> None:
    task_id, tagged = next(
        (t, cmd)
        for t in env.task_ids("test")
        for cmd in env.reset(options={"task_id": t})[1]["valid_actions"]
        if re.fullmatch(r"craft 1 crafting table using 4 planks", cmd)
    )
    actions = env.reset(options={"task_id": task_id})[1]["valid_actions"]
    variants = [a for a in actions if re.fullmatch(r"craft 1 crafting table using 4 \w+ planks", a)]
    assert "craft 1 crafting table using 4 oak planks" in variants
    for action in ["get 1 oak logs", "craft 4 oak planks using 1 oak logs"]:
        assert action in actions
        env.step(action)
    assert env.step(tagged)[0].rsplit("\n\n", 1)[1].startswith("Last result: Could not find enough")
    obs, *_ = env.step("craft 1 crafting table using 4 oak planks")
    assert "Last result: Crafted 1 minecraft:crafting_table" in obs


def test_craftable_now_lists_exactly_the_crafts_that_would_succeed() -> None:
    env = TextCraftEnv(show_craftable=True)
    rng = random.Random(0)
    listed_total = 0
    for task_id in env.task_ids("dev")[:8]:
        obs, info = env.reset(options={"task_id": task_id})
        for _ in range(25):
            listing = obs.split("\nCraftable now:", 1)[1]
            listed = [] if listing == " nothing" else listing.removeprefix("\n").split("\n")
            succeeded = []
            for action in (a for a in info["valid_actions"] if a.startswith("craft ")):
                snap = env.snapshot()
                if "Last result: Crafted" in env.step(action)[0]:
                    succeeded.append(action)
                env.restore(snap)
            assert listed == succeeded, (task_id, obs)
            listed_total += len(listed)
            # Mostly gets, so that the inventory fills and recipes become ready.
            gets = [a for a in info["valid_actions"] if a.startswith("get ")]
            action = rng.choice(gets if rng.random() < 0.7 else info["valid_actions"])
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
    assert listed_total > 20
    # Off by default: ADaPT's text is unchanged.
    assert "Craftable now" not in TextCraftEnv().reset(options={"task_id": 5})[0]
    with pytest.raises(ValueError, match="show_craftable"):
        TextCraftEnv(show_craftable="false")


def test_observation_is_deterministic_for_a_task_id(env: TextCraftEnv) -> None:
    first = _digest(env, [0, 7, 150, 418])
    # The package grows its recipe lists on every reset; ours must not drift.
    for task_id in range(0, 419, 13):
        env.reset(options={"task_id": task_id})
    assert _digest(env, [0, 7, 150, 418]) == first
    assert _digest(TextCraftEnv(), [0, 7, 150, 418]) == first
    # Across processes with different string hashing (the package iterates sets).
    outputs = []
    for hash_seed in ("0", "12345"):
        run = subprocess.run(
            [sys.executable, "-c", _DIGEST_SCRIPT, str(REPO)],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.append(json.loads(run.stdout))
    goals = game.goals(game.new_game())
    assert len(goals) == 419 and goals[5] == "minecraft:lodestone"
    assert outputs[0] == outputs[1] == [goals, first]


def test_reset_keeps_the_recipes_intact(env: TextCraftEnv) -> None:
    # The package's reset appends the sub-recipes to the goal's recipe list,
    # after which this command crafts a gold ingot.
    env.reset(options={"task_id": 5})
    env.step("get 9 gold nugget")
    obs, *_ = env.step("craft 1 lodestone using 9 gold nugget")
    assert "Last result: Could not find a valid recipe" in obs


def test_errors_escaping_the_package_become_feedback() -> None:
    textcraft = game.new_game()
    game.reset_game(textcraft, 5)
    game.step_game(textcraft, "get 2 stone")
    huge = f"get {'9' * 5000} stone"  # int() refuses more than 4300 digits
    assert game.step_game(textcraft, huge) == (f"Could not execute {huge}", False)
    assert textcraft.inventory == {"minecraft:stone": 2}


def test_reset_leaves_global_random_alone(env: TextCraftEnv) -> None:
    random.seed(1234)
    state = random.getstate()
    env.reset(options={"task_id": 3})
    env.reset(seed=9)
    assert random.getstate() == state


def test_reset_draws_train_tasks_from_np_random(env: TextCraftEnv) -> None:
    drawn = [env.reset(seed=s, options={"task_id": None})[1]["task_id"] for s in range(40)]
    assert set(drawn) <= set(env.task_ids("train"))
    assert len(set(drawn)) > 20
    assert [env.reset(seed=s)[1]["task_id"] for s in range(40)] == drawn
    with pytest.raises(ValueError, match="task_id"):
        env.reset(options={"task_id": 419})


def _depth_shares(env: TextCraftEnv, ids: list[int]) -> dict[int, float]:
    counts = Counter(env.depths[i] for i in ids)
    return {d: counts[d] / len(ids) for d in (2, 3, 4)}


def test_splits(env: TextCraftEnv) -> None:
    test, dev, train = env.task_ids("test"), env.task_ids("dev"), env.task_ids("train")
    assert (len(test), len(dev), len(train)) == (100, 50, 269)
    assert sorted(test + dev + train) == list(range(419))  # disjoint, all ADaPT goals (depth >= 2)
    assert Counter(env.depths) == {2: 291, 3: 117, 4: 11}
    # One depth distribution in every split (the old prefix split had test all depth 3-4,
    # train all depth 2): each depth's share within 2 points of the population's.
    population = _depth_shares(env, list(range(419)))
    for ids in (test, dev, train):
        shares = _depth_shares(env, ids)
        assert all(abs(shares[d] - population[d]) <= 0.02 for d in population), shares
    assert Counter(env.depths[i] for i in test) == {2: 69, 3: 28, 4: 3}
    # Any prefix covers the depths: the first 10 test goals are 7-8 of depth 2, the rest 3.
    assert Counter(env.depths[i] for i in test[:10]) in ({2: 7, 3: 3}, {2: 8, 3: 2})
    # Deterministic, and smaller tests are drawn the same way.
    assert TextCraftEnv().task_ids("test") == test
    small = TextCraftEnv(split_test_size=10, split_dev_size=0)
    assert len(small.task_ids("test")) == 10 and small.task_ids("dev") == []
    assert Counter(small.depths[i] for i in small.task_ids("test")) == {2: 7, 3: 3}
    with pytest.raises(ValueError, match="'valid'"):
        env.task_ids("valid")
    with pytest.raises(ValueError, match="split_dev_size"):
        TextCraftEnv(split_test_size=400, split_dev_size=50)


@pytest.mark.skipif(not AGENT_R_TEST.exists(), reason="needs the published Agent-R split files")
def test_agentgym_test_ids_are_depth_bands_of_depth_1_goals() -> None:
    # AgentGym's server indexes item_recipes_min_depth(1) sorted shallowest first, so its
    # published test ids fall in depth bands (what the task_ids docstring says about them).
    tree = game.new_game().crafting_tree
    by_depth = sorted(tree.item_recipes_min_depth(1), key=lambda x: x[1])
    ids = [int(t["item_id"].removeprefix("textcraft_")) for t in json.loads(AGENT_R_TEST.read_text())]
    assert len(by_depth) == 544 and len(ids) == 100
    assert Counter(by_depth[i][1] for i in ids) == {1: 31, 2: 41, 3: 25, 4: 3}


def test_commands_read_the_envs_own_text(env: TextCraftEnv) -> None:
    _, info = env.reset(options={"task_id": 5})
    actions = info["valid_actions"]
    get = next(a for a in actions if a.startswith("get "))
    craft = next(a for a in actions if a.startswith("craft "))
    assert commands.item(get) == ("get", get.split(" ", 2)[2])
    assert commands.item(craft) == ("craft", craft.split(" ", 2)[2].split(" using ")[0])
    assert commands.item("inventory") is None and commands.item("craft 1 stick") is None
    refused, *_ = env.step("craft 1 nothing using 1 nothing")
    played, *_ = env.step(get)
    assert commands.failed(refused) and not commands.failed(played)
    assert commands.longest_run(["a", "b", "b", "a", "b"]) == 2 and commands.most_played(["a", "b", "b", "a", "b"]) == 3
    assert commands.longest_run([]) == commands.most_played([]) == 0


@pytest.mark.parametrize(
    "action",
    [
        "",
        "   ",
        "fly to the moon",
        "gét 1 stöne ☃",
        "craft",
        "craft 1 lodestone using",
        "craft 1 lodestone using , ,",
        "craft 1 lodestone using 8 chiseled stone bricks, 1 netherite ingot",
        "craft one lodestone using eight stones",
        "get -1 stone",
        "get 1 lodestone",
        "get 1 planks",
        "get " + "9" * 5000 + " stone",
        "x" * 100_000,
        "\x00\x1b[31m\r\n",
        "craft 1 stone bricks using 1 stone, 1 stone",
    ],
)
def test_invalid_actions_never_raise_and_use_a_step(env: TextCraftEnv, action: str) -> None:
    env.reset(options={"task_id": 5})
    obs, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(obs)
    assert (reward, terminated, truncated, info["success"]) == (0.0, False, False, False)
    assert env.snapshot().steps == 1
    assert obs.rsplit("\n\n", 1)[1].count("\n") == 1  # echoed text cannot add lines


def test_huge_inventory_still_fits_the_space() -> None:
    env = TextCraftEnv(max_steps=50)
    env.reset(options={"task_id": 5})
    items = ["stone", "netherite scrap", "gold nugget", "redstone", "carrot", "diamond"]
    items += ["iron nugget", "string", "oak logs", "ink sac", "wither rose", "prismarine shard"]
    items += ["coal", "flint", "feather", "bone", "egg", "quartz"]
    for item in items:
        obs, *_ = env.step(f"get {'9' * 490} {item}")
        assert "Last result: Got 999" in obs
    assert env.observation_space.contains(obs)
    assert len(obs) == env.observation_space.max_length and obs.endswith("...")


def test_truncation_at_max_steps() -> None:
    env = TextCraftEnv(max_steps=3)
    env.reset(options={"task_id": 5})
    flags = [env.step("nonsense")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    # Further steps change nothing.
    obs, reward, terminated, truncated, _ = env.step("get 1 carrot")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "carrot" not in obs.rsplit("\n\n", 1)[1]


def test_snapshot_restore_replays_exactly(env: TextCraftEnv) -> None:
    env.reset(options={"task_id": 5})
    for action in ["get 4 netherite scrap", "get 9 gold nugget", "junk"]:
        env.step(action)
    snap = env.snapshot()
    plan = [
        "craft 1 gold ingot using 9 gold nugget",
        "get 9 gold nugget",
        "inventory",
        "craft 1 gold ingot using 9 gold nugget",
        "get 2 stone",
    ]
    original = [env.step(a) for a in plan]
    env.reset(options={"task_id": 300})  # a different goal and instruction
    env.restore(snap)
    assert env.snapshot() == snap
    assert [env.step(a) for a in plan] == original
    # A snapshot is immune to later play and can be restored again, in another env.
    other = TextCraftEnv()
    other.restore(snap)
    assert [other.step(a) for a in plan] == original
    start = time.perf_counter()
    for _ in range(1000):
        env.restore(env.snapshot())
    assert (time.perf_counter() - start) / 1000 < 1e-3


def test_success_sets_reward_terminated_and_score(env: TextCraftEnv) -> None:
    env.reset(options={"task_id": 5})
    plan = ["get 4 netherite scrap"]
    plan += ["get 9 gold nugget", "craft 1 gold ingot using 9 gold nugget"] * 4
    plan += ["craft 1 netherite ingot using 4 netherite scrap, 4 gold ingot"]
    plan += ["get 3 stone", "craft 6 stone slab using 3 stone"]  # a distractor
    plan += ["get 4 stone", "craft 4 stone bricks using 4 stone"] * 3
    plan += ["craft 6 stone brick slab using 3 stone bricks"] * 3
    plan += ["craft 1 chiseled stone bricks using 2 stone brick slab"] * 8
    long_env = TextCraftEnv(max_steps=100)
    long_env.reset(options={"task_id": 5})
    for action in plan:
        _, reward, terminated, truncated, info = long_env.step(action)
        assert (reward, terminated, info["success"], info["score"]) == (0.0, False, False, 0.0)
    action = "craft 1 lodestone using 8 chiseled stone bricks, 1 netherite ingot"
    assert action in info["valid_actions"]
    obs, reward, terminated, truncated, info = long_env.step(action)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info == {**info, "task_id": 5, "success": True, "score": 1.0}
    assert "Last result: Crafted 1 minecraft:lodestone" in obs


def test_oracle_solves_every_split_within_the_budget() -> None:
    # Unbounded, the oracle crafts every goal using the valid actions only.
    env = TextCraftEnv(max_steps=300)
    results = {split: [play(env, t, 300) for t in env.task_ids(split)] for split in ("test", "dev", "train")}
    assert all(r.success for rs in results.values() for r in rs)
    # Within the configured budget (ADaPT's 40 steps): >= 95% of every split.
    for split, rs in results.items():
        solved = sum(r.steps <= 40 for r in rs)
        assert solved >= 0.95 * len(rs), f"{split}: oracle solved {solved}/{len(rs)} in 40 steps"
    # The budget is the oracle's own: the same goals in a 40-step env and play(..., 40).
    budget = TextCraftEnv(max_steps=40)
    assert [play(budget, t, 40).success for t in budget.task_ids("test")] == [
        r.steps <= 40 for r in results["test"]
    ]
    assert play(env, budget.task_ids("test")[1], 12) == OracleResult(success=False, score=0.0, steps=12)  # needs 13
