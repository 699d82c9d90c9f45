"""ScienceWorld env: Gymnasium contract, gold paths, bad actions, a killed JVM, splits, replay.

Every test shares one env (one JVM, about 2 s to start); the crash test
restarts it, and a second JVM checks that the splits do not depend on it.
"""

from __future__ import annotations

import os
import signal

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env
from omegaconf import OmegaConf

from envs.scienceworld import ENV_ID, TASK_NAMES, ScienceWorldEnv, parse_task_id, task_id
from envs.scienceworld.env import ACTION_MAX_LENGTH
from envs.scienceworld.simulator import Simulator
from tests.conftest import CONF

MAKE_ID = f"envs.scienceworld:{ENV_ID}"
# Short gold paths (4 to 15 steps), three topics, one electrical task.
TASKS = ("lifespan-longest-lived", "find-non-living-thing", "power-component")
# A variation whose rooms the JVM's default identity hashes list in a new
# order on every load (6 orders in 6 loads).
UNSTABLE = "find-non-living-thing:1"


@pytest.fixture(scope="module")
def env():
    made = gymnasium.make(MAKE_ID, tasks=list(TASKS), max_steps=12)
    yield made.unwrapped
    made.close()


def test_check_env(env: ScienceWorldEnv) -> None:
    assert env.spec is not None and env.spec.max_episode_steps is None
    check_env(env)  # its close check makes a second env: closing one that never started is free


@pytest.mark.parametrize("tid", ["lifespan-longest-lived:93", "find-non-living-thing:225", "power-component:15"])
def test_gold_actions_reach_score_100(env: ScienceWorldEnv, tid: str) -> None:
    obs, info = env.reset(options={"task_id": tid, "gold_actions": True})
    gold = info["gold_actions"]
    assert gold and obs == env.reset(options={"task_id": tid})[0]  # building the gold path changes nothing
    start, total = info["score"], 0.0
    for action in gold:  # some gold paths go on after the goal (a last look, a wait)
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        assert info["task_id"] == tid and info["error"] is None
        if terminated or truncated:
            break
    assert (terminated, truncated) == (True, False)
    assert info["success"] and info["score"] == 1.0 and info["raw_score"] == 100
    assert total == pytest.approx(1.0 - start)
    assert info["valid_actions"] == []
    # After the end nothing changes.
    assert env.step("look around") == (obs, 0.0, True, False, info)


def test_observation_is_self_contained(env: ScienceWorldEnv) -> None:
    obs, info = env.reset(options={"task_id": "find-non-living-thing:0"})
    task, last, room, inventory = obs.split("\n\n")
    assert task.startswith("Task: Your task is to find a(n) non-living thing.")
    assert last == "Last result: none"
    assert room.startswith("This room is called") and inventory.startswith("In your inventory")
    assert env.observation_space.contains(obs)
    assert (info["success"], info["score"], info["raw_score"], info["error"]) == (False, 0.0, 0, None)
    valid = info["valid_actions"]
    assert "look around" in valid and "reset task" not in valid
    assert not any(a.startswith(("connect ", "disconnect ")) for a in valid)  # not an electrical task
    assert valid[:5] == sorted(valid[:5]) and valid.index("look around") < valid.index("focus on agent")
    obs, *_ = env.step("look around")
    assert "Last result: (shown below)" in obs and obs.endswith(inventory)


def test_electrical_tasks_keep_connect(env: ScienceWorldEnv) -> None:
    _, info = env.reset(options={"task_id": "power-component:0"})
    assert any(a.startswith("connect ") for a in info["valid_actions"])


def test_bad_actions_are_observations_and_use_steps(env: ScienceWorldEnv) -> None:
    first, info = env.reset(options={"task_id": "find-non-living-thing:0"})
    valid = info["valid_actions"]
    room = first.split("\n\n")[2]
    bad = ["", "   ", "xyzzy plugh", "héllo wörld ✓", "focus on", "0", "x" * (ACTION_MAX_LENGTH + 1)]
    for n, action in enumerate(bad, start=1):
        obs, reward, terminated, truncated, info = env.step(action)
        assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, None), action
        assert obs.split("\n\n")[2] == room and info["valid_actions"] == valid
        assert env.observation_space.contains(obs)
        assert env._steps == n
    assert "a command is at most 512" in obs
    obs, *_ = env.step("open\n door   to\tkitchen")  # whitespace runs become one space
    assert "Last result: The door is now open." in obs
    *_, terminated, truncated, info = env.step("wait1")
    for _ in range(env.max_steps - len(bad) - 3):
        *_, terminated, truncated, info = env.step("nonsense")
        assert not (terminated or truncated)
    *_, terminated, truncated, info = env.step("nonsense")
    assert (terminated, truncated, info["valid_actions"], info["success"]) == (False, True, [], False)


def test_ambiguous_command_takes_a_reading(env: ScienceWorldEnv) -> None:
    env.reset(options={"task_id": "find-non-living-thing:0"})
    env.step("open door to kitchen")
    env.step("go to kitchen")
    obs, _, _, _, info = env.step("pick up orange")
    assert "Ambiguous request" in obs
    readings = info["valid_actions"]
    assert len(readings) == 2 and all(r.startswith("pick up orange (") for r in readings)
    in_bowl = next(r for r in readings if "in bowl" in r)
    obs, _, _, _, info = env.step(in_bowl)  # the reading itself stands for its number
    assert "Last result: You move the orange to the inventory." in obs
    assert obs.split("\n\n")[3].count("an orange") == 2
    assert "look around" in info["valid_actions"]


def test_negative_score_ends_the_episode_as_failure(env: ScienceWorldEnv) -> None:
    env.reset(options={"task_id": "find-living-thing:0"})  # a door is not alive
    obs, reward, terminated, truncated, info = env.step("focus on door to kitchen")
    assert (terminated, truncated, info["success"], info["score"], reward) == (True, False, False, 0.0, 0.0)
    assert info["raw_score"] < 0 and info["valid_actions"] == []


def test_task_ids_and_splits(env: ScienceWorldEnv) -> None:
    ids = {split: env.task_ids(split) for split in ("train", "dev", "test")}
    assert ids["test"][: len(TASKS)] == [task_id(t, v) for t, v in zip(TASKS, (93, 225, 15), strict=True)]
    for split, listed in ids.items():
        assert listed == env.task_ids(split) and len(set(listed)) == len(listed)
        assert {parse_task_id(i)[0] for i in listed} == set(TASKS)
    assert not set(ids["train"]) & set(ids["dev"]) and not set(ids["train"]) & set(ids["test"])
    assert not set(ids["dev"]) & set(ids["test"])
    # Every variation is in one split: lifespan-longest-lived has 125.
    lifespan = sorted(parse_task_id(i)[1] for s in ids.values() for i in s if i.startswith("lifespan"))
    assert lifespan == list(range(125))
    # The splits are the package's, read again from a fresh JVM.
    sim = Simulator()
    try:
        fresh = sim.variations("power-component")
    finally:
        sim.close()
    assert sim.exit_code() is not None
    for split in ("train", "dev", "test"):
        assert [i for i in ids[split] if i.startswith("power")] == [
            task_id("power-component", v) for v in fresh[split]
        ]
    with pytest.raises(ValueError, match="split"):
        env.task_ids("validation")


def test_replay_restores_the_same_observation(env: ScienceWorldEnv) -> None:
    prefix = ["open door to hallway", "go to hallway", "open door to kitchen", "go to kitchen",
              "open fridge", "pick up orange", "pick up orange (in bowl, in counter, in kitchen)"]  # fmt: skip

    def play() -> list[tuple]:
        seen = [env.reset(options={"task_id": UNSTABLE})]
        seen += [env.step(action) for action in prefix]
        return [(step[0], step[-1]["valid_actions"]) for step in seen]

    first = play()
    assert len({obs for obs, _ in first}) == len(first)  # every step changed something
    assert first == play() and first == play()


def test_reset_draws_train_tasks_and_checks_ids(env: ScienceWorldEnv) -> None:
    _, info = env.reset(seed=3)
    assert info["task_id"] in env.task_ids("train")
    assert env.reset(seed=3)[1]["task_id"] == info["task_id"]
    _, info = env.reset(options={"task_id": "boil:0"})  # any of the 30 tasks plays
    assert info["task_id"] == "boil:0"
    for bad in ["boil:30", "boil", "boil:x", "no-such-task:0", 3]:
        with pytest.raises(ValueError):
            env.reset(options={"task_id": bad})


def test_killed_jvm_fails_the_episode_and_is_replaced(env: ScienceWorldEnv) -> None:
    tid = "lifespan-longest-lived:0"
    env.reset(options={"task_id": tid})
    env.step("look around")
    old = env.jvm_pid
    os.kill(old, signal.SIGKILL)
    obs, reward, terminated, truncated, info = env.step("look around")
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)
    assert "JVM exited" in info["error"] and "next reset" in info["error"]
    assert "Last result: The simulator stopped" in obs and env.observation_space.contains(obs)
    assert env.jvm_pid is None
    assert env.step("look around")[2:4] == (True, False)  # the ended episode stays ended
    obs, info = env.reset(options={"task_id": tid})
    assert env.jvm_pid not in (None, old) and info["error"] is None
    assert env.step("look around")[4]["error"] is None
    # A JVM that dies between episodes is replaced by the next reset.
    old = env.jvm_pid
    os.kill(old, signal.SIGKILL)
    assert env.reset(options={"task_id": tid})[0] == obs
    assert env.jvm_pid not in (None, old)


def test_close_is_idempotent_and_stops_the_jvm() -> None:
    env = ScienceWorldEnv(tasks=["lifespan-longest-lived"])
    assert env.jvm_pid is None  # lazy: nothing started yet
    env.close()
    java_options = os.environ.get("JAVA_TOOL_OPTIONS")
    env.reset(options={"task_id": "lifespan-longest-lived:0"})
    assert os.environ.get("JAVA_TOOL_OPTIONS") == java_options  # set for the JVM's launch only
    sim = env._sim
    env.close()
    env.close()
    assert env.jvm_pid is None and sim.exit_code() is not None
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look around")


def test_bad_arguments_fail_fast() -> None:
    with pytest.raises(ValueError, match="max_steps"):
        ScienceWorldEnv(max_steps=0)
    with pytest.raises(ValueError, match="boiling"):
        ScienceWorldEnv(tasks=["boil", "boiling"])
    assert ScienceWorldEnv(tasks=None).tasks == TASK_NAMES and len(TASK_NAMES) == 30
    assert parse_task_id("identify-life-stages-1:3") == ("identify-life-stages-1", 3)


def test_config_demonstration_is_a_real_observation(env: ScienceWorldEnv) -> None:
    example = OmegaConf.load(CONF / "env" / "sciworld.yaml").examples[0]
    obs, info = env.reset(options={"task_id": "find-living-thing:0"})
    assert example.observation.rstrip("\n") == obs
    assert set(example.valid_actions) <= set(info["valid_actions"])
