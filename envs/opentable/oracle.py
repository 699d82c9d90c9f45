"""A scripted agent that books through the browser with the env's own actions.

It reads only the observation text (and the task's wanted restaurant, date,
time and party size, which the instruction states): it closes dialogs,
searches, sets the pickers, takes the requested time or the next later
available one, asks the user for the guest's details and fills the form.
It exists to show the tasks are solvable (the oracle row of the evaluation,
:mod:`agentq.oracle`, through :func:`play`) and to give tests and benchmarks
realistic action sequences; it is not used for training.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from envs import OracleResult
from envs.contract import INFO_MILESTONE
from envs.opentable.catalog import date_label, party_label, time_label
from envs.opentable.tasks import Task, split_path, times_query

_ELEMENT = re.compile(
    r'\[(?P<id>\d+)\] (?P<role>\w+) "(?P<name>[^"]*)"'
    r'(?: value="(?P<value>[^"]*)")?(?: selected="(?P<selected>[^"]*)")?'
)
_PAGE = re.compile(r"^Page: .*\((?P<path>/[^()]*)\)$", re.MULTILINE)
_USER = re.compile(
    r"^User: Please book it for (?P<first>\S+) (?P<last>\S+), phone (?P<phone>.+?), email (?P<email>\S+)\.$",
    re.MULTILINE,
)
_SLOT = re.compile(r"^(\d{1,2}):(\d{2}) ([AP]M)$")
_DIALOG_BUTTONS = ("Accept all cookies", "No thanks", "Continue as guest")
_GUEST_FIELDS = (
    ("First name", "first"),
    ("Last name", "last"),
    ("Phone number", "phone"),
    ("Email", "email"),
)


@dataclass(frozen=True)
class _Element:
    id: int
    role: str
    name: str
    value: str | None
    selected: str | None


def next_action(task: Task, observation: str) -> str:
    """The oracle's next command for ``observation``."""
    elements = [
        _Element(int(m["id"]), m["role"], m["name"], m["value"], m["selected"])
        for m in _ELEMENT.finditer(observation.split("\nPage: ", 1)[-1])
    ]

    def find(role: str, name: str) -> _Element | None:
        return next((e for e in elements if e.role == role and e.name == name), None)

    more_below = "(more below: SCROLL [DOWN])" in observation
    for label in _DIALOG_BUTTONS:
        button = find("button", label)
        if button is not None:
            return f"CLICK [{button.id}]"
    page = _PAGE.search(observation)
    route, query = split_path(page["path"] if page else "/")

    if route == "/book":
        user = _USER.search(observation)
        if user is None:
            return "ASK USER HELP"
        for label, key in _GUEST_FIELDS:
            box = find("textbox", label)
            if box is None:
                return "SCROLL [DOWN]"
            if box.value != user[key]:
                return f"TYPE [{box.id}] [{user[key]}]"
        done = find("button", "Complete reservation")
        return f"CLICK [{done.id}]" if done else "SCROLL [DOWN]"

    if route.startswith("/r/") and f'heading "{task.restaurant}"' in observation:
        wanted = {
            "Party size": party_label(task.party),
            "Date": date_label(task.day),
            "Time": time_label(task.requested_time),
        }
        for name, label in wanted.items():
            box = find("combobox", name)
            if box is None:
                return "SCROLL [UP]"
            if box.selected != label:
                return f"TYPE [{box.id}] [{label}]"
        if query != times_query(task):
            button = find("button", "Find a table")
            return f"CLICK [{button.id}]" if button else "SCROLL [UP]"
        slots = [
            (_minutes(e.name), e) for e in elements if e.role == "link" and _SLOT.match(e.name)
        ]
        later = sorted((t, e.id) for t, e in slots if t >= task.requested_time)
        if later:
            return f"CLICK [{later[0][1]}]"
        return "SCROLL [DOWN]" if more_below else "GOTO [/]"

    if route in ("/", "/search"):
        link = find("link", task.restaurant)
        if link is not None:
            return f"CLICK [{link.id}]"
        box = find("textbox", "Restaurant, cuisine or neighbourhood")
        if box is not None and box.value != task.restaurant:
            return f"TYPE [{box.id}] [{task.restaurant}]"
        if box is not None and route == "/":
            return f"SUBMIT [{box.id}]"
        following = find("link", "Next page")
        if following is not None:
            return f"CLICK [{following.id}]"
        if more_below:
            return "SCROLL [DOWN]"
        return f"SUBMIT [{box.id}]" if box else "GOTO [/]"
    return "GOTO [/]"


def _minutes(label: str) -> int:
    hour, minute, half = _SLOT.match(label).groups()  # type: ignore[union-attr]
    return (int(hour) % 12 + (12 if half == "PM" else 0)) * 60 + int(minute)


def solve(
    env: gym.Env, task_id: int, max_steps: int | None = None
) -> tuple[list[str], dict[str, Any]]:
    """Play task ``task_id`` with the oracle; returns its actions and the last info."""
    base = env.unwrapped
    task = base.task(task_id)
    observation, info = env.reset(options={"task_id": task_id})
    actions: list[str] = []
    for _ in range(max_steps or base.max_steps):
        action = next_action(task, observation)
        actions.append(action)
        observation, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return actions, info


def play(env: gym.Env, task_id: int, max_steps: int) -> OracleResult:
    """Play task ``task_id`` with at most ``max_steps`` steps (and the env's own limit)."""
    actions, info = solve(env, task_id, max_steps)
    return OracleResult(
        success=bool(info["success"]),
        score=float(info["score"]),
        steps=len(actions),
        milestone=info[INFO_MILESTONE],
    )
