"""The agent-env contract (envs/contract.py) on all four registered envs, and its checks.

The static checks make each env with ``gymnasium.make`` (cheap: ScienceWorld's JVM
and OpenTable's browser start on first use). The episode checks play one reset
and one step in each env: about 5 s for the JVM and the browser.
"""

from __future__ import annotations

import json
import re

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from envs import choose_task as exported_choose_task
from envs.contract import (
    INFO_KEYS,
    REQUIRED_SPLITS,
    SPLITS,
    AgentEnv,
    ContractError,
    SnapshotEnv,
    can_snapshot,
    check_contract,
    check_info,
    choose_task,
    task_index,
)

# id, cheap make kwargs, forkable, snapshots
ENVS = {
    "textcraft": ("envs.textcraft:agentq/TextCraft-v0", {"max_steps": 5}, True, True),
    "webshop": ("envs.webshop:agentq/WebShop-v0", {"max_steps": 5}, True, True),
    "scienceworld": ("envs.scienceworld:agentq/ScienceWorld-v0", {"max_steps": 5, "tasks": ["find-living-thing"]}, False, False),
    "opentable": ("envs.opentable:agentq/OpenTable-v0", {"max_steps": 5, "num_tasks": 20, "split_test_size": 5}, False, False),
}  # fmt: skip


@pytest.fixture(params=list(ENVS))
def made(request):
    env_id, kwargs, *_ = ENVS[request.param]
    env = gymnasium.make(env_id, **kwargs)
    yield request.param, env
    env.close()


def test_every_registered_env_follows_the_contract(made) -> None:
    name, env = made
    _, _, forkable, snapshots = ENVS[name]
    check_contract(env)  # through the wrappers gymnasium.make adds
    check_contract(env.unwrapped)
    assert isinstance(env.unwrapped, AgentEnv)
    assert "forkable" in vars(type(env.unwrapped)), "forkable is declared by the env class itself"
    assert type(env.unwrapped).forkable is forkable
    assert can_snapshot(env) is snapshots
    assert isinstance(env.unwrapped, SnapshotEnv) is snapshots


def test_every_env_plays_a_task_by_the_contract(made) -> None:
    """task_ids of the required splits, reset to a named task, infos with the contract's keys."""
    name, env = made
    base = env.unwrapped
    ids = {split: list(base.task_ids(split)) for split in REQUIRED_SPLITS}
    assert all(ids.values()) and not set(ids["train"]) & set(ids["test"])
    for split in set(SPLITS) - set(REQUIRED_SPLITS):  # optional: listed or refused with ValueError
        try:
            base.task_ids(split)
        except ValueError:
            pass
    with pytest.raises(ValueError):
        base.task_ids("no such split")
    task_id = ids["test"][0]
    assert json.loads(json.dumps(task_id)) == task_id  # run directories store task ids as JSON
    observation, info = env.reset(options={"task_id": task_id})
    assert isinstance(observation, str) and info["task_id"] == task_id
    check_info(info)
    observation, reward, terminated, truncated, info = env.step("not a command at all")
    assert isinstance(observation, str) and not terminated
    check_info(info)


def test_reset_draws_train_tasks_from_the_assigned_np_random() -> None:
    """What agentq.bookkeeping.seed_everything relies on: assigning np_random fixes the drawn tasks."""
    env = gymnasium.make(ENVS["textcraft"][0]).unwrapped

    def draws() -> list[int]:
        env.np_random = gymnasium.utils.seeding.np_random(7)[0]
        return [env.reset()[1]["task_id"] for _ in range(5)]

    first = draws()
    assert first == draws() and set(first) <= set(env.task_ids("train"))
    generator = gymnasium.utils.seeding.np_random(7)[0]
    train = env.task_ids("train")
    assert first == [train[int(generator.integers(len(train)))] for _ in range(5)]


# -- the checks themselves --------------------------------------------------------------


class _Complete(gymnasium.Env[str, str]):
    forkable = True

    def __init__(self) -> None:
        self.observation_space = spaces.Text(max_length=16)
        self.action_space = spaces.Text(max_length=16)

    def task_ids(self, split: str) -> list[int]:
        return [0, 1] if split == "train" else [2]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task_id = choose_task(self, options, task_index(3))
        return f"task {task_id}", {"task_id": task_id, "success": False, "score": 0.0, "valid_actions": []}

    def step(self, action):
        return "", 0.0, False, False, {"success": False, "score": 0.0, "valid_actions": []}


class _NoTaskIds(gymnasium.Env[str, str]):
    def __init__(self) -> None:
        self.observation_space = spaces.Text(max_length=16)
        self.action_space = spaces.Discrete(3)


class _HalfSnapshot(_Complete):
    def snapshot(self) -> int:
        return 0


def test_check_contract_accepts_a_minimal_env() -> None:
    env = _Complete()
    check_contract(env)
    assert isinstance(env, AgentEnv) and not can_snapshot(env)
    # isinstance only sees names; check_contract also checks kinds:
    assert not isinstance(_NoTaskIds(), AgentEnv)


def test_check_contract_names_what_is_missing() -> None:
    with pytest.raises(ContractError) as caught:
        check_contract(_NoTaskIds())
    message = str(caught.value)
    assert message.startswith("_NoTaskIds does not follow the agent-env contract (envs.contract.AgentEnv)")
    assert "missing forkable (class attribute, bool" in message
    assert "missing task_ids (method task_ids(split: str)" in message
    assert "action_space is Discrete (attribute, gymnasium.spaces.Text" in message
    assert not re.search(r"missing (reset|step|close|np_random|observation_space)", message)  # gymnasium.Env's
    with pytest.raises(ContractError, match=r"missing restore \(method restore\(state\) -> None; optional, with snapshot"):
        check_contract(_HalfSnapshot())


def test_check_contract_wants_forkable_as_a_bool_on_the_class() -> None:
    env = _Complete()
    env.__class__ = type("_Instance", (_Complete,), {"forkable": "yes"})
    with pytest.raises(ContractError, match="forkable must be a bool class attribute"):
        check_contract(env)


def test_check_contract_starts_nothing() -> None:
    env = _Complete()
    check_contract(env)
    assert env._np_random is None  # not even gymnasium's lazily drawn generator


def test_check_info_names_bad_keys() -> None:
    check_info({"success": np.bool_(True), "score": 1, "valid_actions": ("look",)})
    with pytest.raises(ContractError, match=r"missing 'valid_actions'"):
        check_info({"success": False, "score": 0.5})
    with pytest.raises(ContractError, match=r"'score' must be a number in \[0, 1\], got 1.5"):
        check_info({"success": False, "score": 1.5, "valid_actions": []})
    with pytest.raises(ContractError, match=r"'success' must be a bool"):
        check_info({"success": "no", "score": 0.0, "valid_actions": []})
    assert set(INFO_KEYS) == {"success", "score", "valid_actions"}


def test_choose_task_names_or_draws_a_train_task() -> None:
    env = _Complete()
    assert exported_choose_task is choose_task
    assert env.reset(options={"task_id": np.int64(2)})[1]["task_id"] == 2
    assert env.reset(seed=1, options={"task_id": None})[1]["task_id"] in (0, 1)
    for bad, error in (("2", TypeError), (2.0, TypeError), (3, ValueError), (-1, ValueError)):
        with pytest.raises(error):
            env.reset(options={"task_id": bad})
    with pytest.raises(ValueError, match=r"task_id must be in \[0, 3\), got 3"):
        task_index(3)(3)
