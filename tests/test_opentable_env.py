"""OpenTable env through the real browser: Gymnasium contract, the oracle's
success rate, invalid actions, replay, partial credit, crash recovery and the
network fence. Needs the system Chromium (``/usr/bin/chromium``)."""

from __future__ import annotations

import os
import random
import re
import signal
import time

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from agentq.agent.grounding import Grounder
from envs.opentable import ENV_ID, OpenTableEnv
from envs.opentable.catalog import time_label
from envs.opentable.oracle import next_action, play, solve

MAKE_ID = f"envs.opentable:{ENV_ID}"


@pytest.fixture(scope="module")
def env():
    env = OpenTableEnv(max_steps=30)
    yield env
    env.close()


def _browser_pids() -> set[int]:
    """Main Chromium processes below this one (renderers and helpers carry --type=)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (
            argv[0].endswith("chromium")
            and not any(a.startswith("--type=") for a in argv)
            and state != "Z"
        ):
            if _descends_from(int(entry), os.getpid()):
                found.add(int(entry))
    return found


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


def _run_until(env: OpenTableEnv, task_id: int, stop) -> tuple[str, list[str]]:
    """Play the oracle until ``stop(action, observation)``; returns the observation
    the stopping action would have been taken in, and the actions taken."""
    task = env.task(task_id)
    obs, _ = env.reset(options={"task_id": task_id})
    actions = []
    for _ in range(env.max_steps):
        action = next_action(task, obs)
        if stop(action, obs):
            return obs, actions
        actions.append(action)
        obs, *_ = env.step(action)
    raise AssertionError("the oracle never reached the stopping point")


def _element_id(obs: str, role: str, name: str) -> int:
    match = re.search(rf'\[(\d+)\] {role} "{re.escape(name)}"', obs)
    assert match, f"no {role} {name!r} in:\n{obs}"
    return int(match.group(1))


def test_check_env_and_truncation() -> None:
    made = gymnasium.make(MAKE_ID, max_steps=4)
    try:
        assert isinstance(made.unwrapped, OpenTableEnv)
        assert made.spec is not None and made.spec.max_episode_steps is None
        check_env(made.unwrapped)
        made.reset(options={"task_id": 0})
        flags = [made.step("SCROLL [DOWN]")[2:4] for _ in range(4)]
        assert flags == [(False, False)] * 3 + [(False, True)]
        obs, reward, terminated, truncated, info = made.step("CLICK [1]")
        assert (reward, terminated, truncated) == (0.0, False, True) and info["valid_actions"] == []
    finally:
        made.close()


def test_splits_are_disjoint_and_sized() -> None:
    env = OpenTableEnv()  # no browser or server until reset
    test, train = env.task_ids("test"), env.task_ids("train")
    assert len(test) == 100 and len(train) == 400 and not set(test) & set(train)
    with pytest.raises(ValueError, match="split"):
        env.task_ids("dev")
    env.close()


def test_first_observation_and_grounding(env) -> None:
    obs, info = env.reset(options={"task_id": 0})
    task = env.task(0)
    lines = obs.split("\n")
    assert lines[0] == f"Task: {task.instruction}"
    assert lines[1:4] == [
        "User: (not asked yet: ASK USER HELP)",
        "Last action: none",
        "Page: Home | TableTime (/)",
    ]
    assert '[1] button "Accept all cookies" [2] button "Reject non-essential"' in lines
    assert info == {
        "task_id": 0, "success": False, "score": 0.0,
        "valid_actions": ["CLICK [1]", "CLICK [2]", "ASK USER HELP", "GOTO [...]"], "milestone": 0,
    }  # fmt: skip
    assert env.observation_space.contains(obs)
    obs, *_, info = env.step("CLICK [1]")
    assert "TYPE [3] [...]" in info["valid_actions"] and "SUBMIT [3]" in info["valid_actions"]
    # The grounder fills TYPE templates from the policy's free text.
    command = Grounder()(f"type [3] {task.restaurant}", info["valid_actions"]).command
    assert command == f"TYPE [3] [{task.restaurant}]"
    obs, *_ = env.step(command)
    assert f'[3] textbox "Restaurant, cuisine or neighbourhood" value="{task.restaurant}"' in obs


@pytest.mark.slow  # about two minutes on 2 cores: 50 episodes of 16-17 browser steps
def test_oracle_books_at_least_95_percent_of_50_test_tasks(env) -> None:
    started = time.monotonic()
    results = [solve(env, task_id) for task_id in env.task_ids("test")[:50]]
    successes = [info["success"] for _, info in results]
    assert sum(successes) >= 48, [i for i, ok in enumerate(successes) if not ok]
    assert all(info["score"] == 1.0 for _, info in results if info["success"])
    assert sum(env.task(i).sold_out for i in range(50)) >= 10  # the sold-out obstacle is exercised
    steps = [len(actions) for actions, _ in results]
    assert max(steps) <= 22
    assert env.browser.blocked == []  # the site itself never requests anything elsewhere
    print(f"oracle: {sum(successes)}/50 in {time.monotonic() - started:.0f} s, {sum(steps)} steps")


def test_the_oracle_passes_every_milestone_but_a_wrong_booking_in_order(env) -> None:
    task = env.task(3)
    observation, info = env.reset(options={"task_id": 3})
    reached = [info["milestone"]]
    for _ in range(env.max_steps):
        observation, _, terminated, truncated, info = env.step(next_action(task, observation))
        reached.append(info["milestone"])
        if terminated or truncated:
            break
    assert info["success"]
    assert reached == sorted(reached)  # the furthest so far: it never goes back
    named = [env.milestones[m] for m in dict.fromkeys(reached)]
    assert named == ["start", "restaurant page", "times shown", "booking form", "booked right"]
    assert play(env, 3, env.max_steps).milestone == reached[-1]  # the oracle row's record of it


@pytest.mark.parametrize(
    "command, feedback",
    [
        ("", "Unknown command ''"),
        ("book a table please", "Unknown command 'book a table please'"),
        ("CLICK", "Malformed CLICK command"),
        ("CLICK [99]", "There is no element [99] on this page."),
        ("TYPE [1] [Jane]", "Cannot type into button [1]"),
        ("TYPE [1]", "TYPE needs text"),
        ("CLEAR [2]", "Cannot clear button [2]"),
        ("SCROLL [LEFT]", "Malformed SCROLL command"),
        ("SCROLL [DOWN]", "Cannot scroll down: already at the bottom."),
        ("GOTO [https://example.com/]", "GOTO only opens pages of this site"),
        ("CLICK [1] \u2603", "Malformed CLICK command"),
        ("x" * 600, "The command is longer than 512 characters."),
    ],
)
def test_invalid_actions_give_feedback_and_use_a_step(env, command, feedback) -> None:
    before, _ = env.reset(options={"task_id": 1})
    obs, reward, terminated, truncated, info = env.step(command)
    assert obs.split("\n")[2].startswith(f"Last action: {feedback}")
    assert env.observation_space.contains(obs)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert env._steps == 1
    # The page is unchanged: still the cookie dialog.
    assert obs.split("\n", 3)[3] == before.split("\n", 3)[3]


def test_random_listed_actions_never_stall_or_raise(env) -> None:
    """An untrained policy's steps: every listed action is handled without a
    browser timeout (e.g. a click that should navigate but does not)."""
    rng = random.Random(0)
    for task_id in env.task_ids("train")[:2]:
        _, info = env.reset(options={"task_id": task_id})
        for _ in range(env.max_steps):
            action = rng.choice(info["valid_actions"]).replace("GOTO [...]", "GOTO [/help]")
            obs, _, terminated, truncated, info = env.step(action.replace("[...]", "[Saturday]"))
            assert env.observation_space.contains(obs)
            assert " failed: " not in obs.split("\n")[2], obs.split("\n")[2]
            if terminated or truncated:
                break


def test_sold_out_slot_is_disabled(env) -> None:
    task_id = next(i for i in env.task_ids("test") if env.task(i).sold_out)
    task = env.task(task_id)

    def at_slot(action: str, obs: str) -> bool:  # the oracle is about to click a time
        return re.search(rf'{re.escape(action[6:])} link "\d+:\d\d [AP]M"', obs) is not None

    obs, _ = _run_until(env, task_id, at_slot)
    sold = _element_id(obs, "button", f"{time_label(task.requested_time)} sold out")
    obs, *_ = env.step(f"CLICK [{sold}]")
    assert (
        f"Last action: button [{sold}] '{time_label(task.requested_time)} sold out' is disabled."
        in obs
    )
    assert f"CLICK [{sold}]" not in env._info()["valid_actions"]


def test_ask_user_help_answers_and_the_answer_stays(env) -> None:
    task = env.task(2)
    env.reset(options={"task_id": 2})
    obs, *_ = env.step("ASK USER HELP")
    assert f"Last action: The user answered: {task.guest.answer()}" in obs
    obs, *_ = env.step("CLICK [1]")
    assert obs.split("\n")[1] == f"User: {task.guest.answer()}"
    assert task.guest.email not in env.reset(options={"task_id": 2})[0]


def test_replay_reproduces_every_observation(env) -> None:
    task = env.task(3)
    obs, _ = env.reset(options={"task_id": 3})
    actions, first = [], [obs]
    for _ in range(12):
        actions.append(next_action(task, obs))
        obs, *_ = env.step(actions[-1])
        first.append(obs)
    obs, _ = env.reset(options={"task_id": 3})
    replayed = [obs] + [env.step(a)[0] for a in actions]
    assert replayed == first


def test_a_wrong_field_gets_partial_credit(env) -> None:
    def at_complete(action: str, obs: str) -> bool:  # the oracle is about to book
        return f'{action[6:]} button "Complete reservation"' in obs

    obs, _ = _run_until(env, 4, at_complete)
    email = _element_id(obs, "textbox", "Email")
    env.step(f"TYPE [{email}] [someone.else@example.com]")
    obs, reward, terminated, truncated, info = env.step(
        f"CLICK [{_element_id(obs, 'button', 'Complete reservation')}]"
    )
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["success"] is False and info["score"] == pytest.approx(6 / 7)
    assert "Page: Reservation confirmed | TableTime (/confirmation/" in obs
    # Stepping after the end changes nothing.
    assert env.step("GOTO [/]")[1:4] == (0.0, True, False)


def test_browser_crash_fails_the_episode_and_the_next_one_runs() -> None:
    env = OpenTableEnv()
    try:
        before = _browser_pids()
        env.reset(options={"task_id": 5})
        ours = _browser_pids() - before
        assert len(ours) == 1
        os.kill(ours.pop(), signal.SIGKILL)
        obs, reward, terminated, truncated, info = env.step("CLICK [1]")
        assert (reward, terminated, truncated) == (0.0, True, False)
        assert info["error"].startswith("browser crashed:") and info["success"] is False
        assert "Last action: browser crashed" in obs and env.observation_space.contains(obs)
        assert env.step("CLICK [1]")[2] is True
        # The run goes on: the next reset starts a new browser and the task is solvable.
        _, info = solve(env, 5)
        assert info["success"] and "error" not in info
        # A browser that dies between episodes is replaced by reset.
        os.kill((_browser_pids() - before).pop(), signal.SIGKILL)
        time.sleep(0.2)
        obs, info = env.reset(options={"task_id": 6})
        assert "Accept all cookies" in obs and "error" not in info
    finally:
        env.close()
    assert _browser_pids() - before == set()


def test_the_env_can_be_called_from_any_thread(env) -> None:
    # Lanes and the run's phases call one env from different threads (agentq/parallel.py),
    # while Playwright's objects belong to the thread that made them.
    from concurrent.futures import ThreadPoolExecutor

    env.reset(options={"task_id": 2})
    with ThreadPoolExecutor(max_workers=1) as pool:
        observation, *_ = pool.submit(env.step, "CLICK [1]").result()
    with ThreadPoolExecutor(max_workers=1) as pool:
        first, _ = pool.submit(env.reset, options={"task_id": 2}).result()
    again, *_ = env.step("CLICK [1]")
    assert again == observation and "Accept all cookies" in first


def test_requests_outside_the_site_are_blocked(env) -> None:
    env.reset(options={"task_id": 7})
    outside = [
        "http://tracker.example/pixel.gif",
        "https://cdn.example/lib.js",
        "http://127.0.0.1:9/other-port",
    ]
    script = "urls => Promise.all(urls.map(u => fetch(u).then(() => 'ok', () => 'blocked')))"
    results = env.browser.on_page(lambda page: page.evaluate(script, outside + ["/help"]))
    assert results == ["blocked"] * 3 + ["ok"]
    assert env.browser.blocked[-3:] == outside
    obs, *_ = env.step("GOTO [http://example.com/]")
    assert "Page: Home | TableTime (/)" in obs


def test_screenshot_of_the_restaurant_page(env, tmp_path) -> None:
    task = env.task(8)
    _run_until(env, 8, lambda action, obs: f'heading "{task.restaurant}"' in obs)
    path = tmp_path / "restaurant_page.png"
    env.browser.screenshot(str(path))
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000
