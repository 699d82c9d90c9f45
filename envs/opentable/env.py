"""OpenTable-style restaurant booking in a real browser, as a Gymnasium environment.

Agent Q's real-world evaluation books restaurants on OpenTable (Putta et al.
2024, §5.2). The live site cannot be used here, so the env serves a booking
site of its own (:mod:`envs.opentable.site`, SQLite store, loopback only) and
drives it with Playwright and the system Chromium (:mod:`envs.opentable.browser`).
Success is read from the site's reservation store (:func:`envs.opentable.tasks.judge`):
no LLM judge.

Departures from the paper: Agent Q's OpenTable agent also sees a screenshot;
this env is text only. Agent Q keeps only the current observation in the
history, so each observation repeats the task and, once asked, the user's
answer. There is no snapshot: a browser session cannot be copied, so search
returns to a node by reset and replay (the site's state is reset on
``reset``, and the same actions give the same pages).
"""

from __future__ import annotations

import string
from functools import cached_property
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from playwright.sync_api import Error as PlaywrightError

from envs.contract import choose_task, task_index
from envs.opentable.actions import Action, parse_action
from envs.opentable.browser import CHROMIUM, Browser, BrowserCrashed, Element, View
from envs.opentable.catalog import Catalog, build_catalog
from envs.opentable.server import SiteServer
from envs.opentable.tasks import MILESTONES, Task, Verdict, judge, make_task, milestone

OBSERVATION_MAX_LENGTH = 8192
ACTION_MAX_LENGTH = 512
FEEDBACK_MAX_LENGTH = 400
_ELLIPSIS = "..."
_CHARSET = string.printable
_FLATTEN = str.maketrans({c: " " for c in string.whitespace if c != " "})


class OpenTableEnv(gym.Env[str, str]):
    """Book a table on a restaurant booking site through a real browser.

    The site ("TableTime") has a home page with a search box, search results,
    restaurant pages with party-size, date and time drop-downs and the
    available times around the chosen one, a booking form (first and last
    name, phone, email) and a confirmation page. On the way: a cookie dialog,
    a promotion dialog, a "sign in or continue as guest" dialog, and for about
    a third of the tasks a sold-out time. A task reads "Book <restaurant> for
    <n> people on <date> at <time>. If that time is sold out, book the next
    later time that is available." The guest's details are known only to the
    simulated user.

    ## Action Space

    ``Text(max_length=512, charset=string.printable)``. One of ``CLICK [id]``,
    ``TYPE [id] [text]`` (replaces a text field's content; in a drop-down
    selects the option the text names), ``SUBMIT [id]`` (submits the form the
    element is in), ``CLEAR [id]``, ``SCROLL [UP]``, ``SCROLL [DOWN]``,
    ``GOTO [url]`` (a path on the site, such as ``/search?q=sushi``) and
    ``ASK USER HELP`` (the user answers with the guest's name, phone and
    email). Verbs are case insensitive. Any other text, an unknown id or an
    action the element does not take yields feedback saying so and still
    uses a step. ``info["valid_actions"]`` lists ``CLICK [id]`` for each
    enabled link, button and check box in view, ``TYPE [id] [...]`` templates
    for text fields and drop-downs, ``SUBMIT [id]`` for text fields in a form,
    the possible ``SCROLL`` directions, ``ASK USER HELP`` and ``GOTO [...]``.

    ## Observation Space

    ``Text(max_length=8192, charset=string.printable)``::

        Task: Book Trattoria Sole for 4 people on Saturday, June 14 at 7:00 PM. ...
        User: (not asked yet)
        Last action: Clicked link [3] 'Trattoria Sole'.
        Page: Trattoria Sole | TableTime (/r/trattoria-sole)
        heading "Trattoria Sole"
        [4] combobox "Party size" selected="2 people" options: 1 person | 2 people | ...
        ...
        (more below: SCROLL [DOWN])

    Only the page's content inside the viewport is listed; ids are assigned
    in document order on every observation.

    ## Rewards

    1.0 on the step that creates a reservation that is right in every field
    (restaurant, date, time, party size, name, phone, email), else 0.0.

    ## Episode End

    * Termination: a reservation is made (right or wrong: the judge reads the
      store), or the browser crashed (``info["error"]`` says so; the browser is
      restarted on the next ``reset``).
    * Truncation: ``max_steps`` steps without a reservation.

    Stepping after the end changes nothing and returns the final flags.

    ## Information

    Every ``info`` has ``task_id`` (int), ``success`` (bool), ``score`` (float:
    the fraction of the seven fields right in the reservation, divided by the
    number of reservations; 0.0 before any), ``valid_actions`` (list[str]) and
    ``milestone`` (int: the furthest of ``milestones`` the episode reached, an index
    into :data:`envs.opentable.tasks.MILESTONES`: restaurant page, times shown,
    booking form, reservation made, booked right); ``error`` (str) after a crash.

    ## Arguments

    * ``max_steps``: steps per episode before truncation (default 30; the
      scripted oracle needs 17 to 20).
    * ``seed``: of the generated restaurants, availability and tasks (default 0).
    * ``num_tasks``: task ids ``0 .. num_tasks - 1`` (default 500).
    * ``split_test_size``: the first ``split_test_size`` ids are the test
      split, the rest the train split (default 100).
    * ``chromium``: the Chromium binary (default ``/usr/bin/chromium``).
    * ``headless``, ``viewport``: of the browser (default True, (1280, 720)).

    ``reset(options={"task_id": i})`` plays task ``i``; without it a train
    task is drawn with ``self.np_random``. The site and the browser start on
    the first ``reset``; ``close()`` stops both.
    """

    metadata = {"render_modes": []}
    milestones = MILESTONES
    forkable = False  # it drives a browser in another process, which forked workers cannot share

    def __init__(
        self,
        max_steps: int = 30,
        seed: int = 0,
        num_tasks: int = 500,
        split_test_size: int = 100,
        chromium: str = CHROMIUM,
        headless: bool = True,
        viewport: tuple[int, int] = (1280, 720),
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if not 0 <= split_test_size <= num_tasks:
            raise ValueError(f"split_test_size must be in [0, {num_tasks}], got {split_test_size}")
        self.max_steps = max_steps
        self.seed = seed
        self.num_tasks = num_tasks
        self.split_test_size = split_test_size
        self.chromium = chromium
        self.headless = headless
        self.viewport = tuple(viewport)
        self.observation_space = spaces.Text(max_length=OBSERVATION_MAX_LENGTH, charset=_CHARSET)
        self.action_space = spaces.Text(max_length=ACTION_MAX_LENGTH, charset=_CHARSET)
        self._site: SiteServer | None = None
        self._browser: Browser | None = None
        self._tasks: dict[int, Task] = {}
        self._task: Task | None = None
        self._view: View | None = None
        self._steps = 0
        self._feedback = "none"
        self._asked = False
        self._verdict = Verdict(False, 0.0, 0, {})
        self._milestone = 0
        self._error: str | None = None
        self._terminated = False
        self._truncated = False

    @cached_property
    def catalog(self) -> Catalog:
        return build_catalog(self.seed)

    def task(self, task_id: int) -> Task:
        if task_id not in self._tasks:
            self._tasks[task_id] = make_task(self.catalog, task_id)
        return self._tasks[task_id]

    def task_ids(self, split: str) -> list[int]:
        """Task ids of ``"train"`` or ``"test"``."""
        if split == "test":
            return list(range(self.split_test_size))
        if split == "train":
            return list(range(self.split_test_size, self.num_tasks))
        raise ValueError(f"unknown split {split!r}; expected 'train' or 'test'")

    @property
    def site(self) -> SiteServer:
        """The site this env books on (started on first use)."""
        if self._site is None:
            self._site = SiteServer(self.catalog).start()
        return self._site

    @property
    def browser(self) -> Browser:
        if self._browser is None:
            self._browser = Browser(
                self.site.url,
                executable=self.chromium,
                headless=self.headless,
                viewport=self.viewport,
            )
        return self._browser

    # -- Gymnasium API ------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task_id = choose_task(self, options, task_index(self.num_tasks))
        self._task = self.task(task_id)
        self.site.store.reset()
        try:
            self._view = self.browser.new_episode("/")
        except (BrowserCrashed, PlaywrightError):
            # A browser that died between episodes: one fresh start, then give up loudly.
            self.browser.launch()
            self._view = self.browser.new_episode("/")
        self._steps = 0
        self._feedback = "none"
        self._asked = False
        self._verdict = Verdict(False, 0.0, 0, {})
        self._milestone = 0
        self._error = None
        self._terminated = False
        self._truncated = False
        return self._render(), self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        if self._terminated or self._truncated:
            return self._render(), 0.0, self._terminated, self._truncated, self._info()
        self._steps += 1
        try:
            feedback = self._act(action)
            self._view = self.browser.observe()
        except BrowserCrashed as e:
            self._crashed(str(e))
            return self._render(), 0.0, True, False, self._info()
        self._feedback = _clean(feedback, FEEDBACK_MAX_LENGTH)
        reservations = self.site.store.reservations()
        if reservations:
            self._verdict = judge(self._task, reservations)
            self._terminated = True
        slug = self.catalog.restaurants[self._task.restaurant_id].slug
        self._milestone = max(self._milestone, milestone(self._task, slug, self._view.path, self._verdict))
        self._truncated = not self._terminated and self._steps >= self.max_steps
        reward = 1.0 if self._verdict.success else 0.0
        return self._render(), reward, self._terminated, self._truncated, self._info()

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
            self._browser = None
        if self._site is not None:
            self._site.close()
            self._site = None

    # -- internals --------------------------------------------------------------------
    def _act(self, command: str) -> str:
        if len(command) > ACTION_MAX_LENGTH:
            return f"The command is longer than {ACTION_MAX_LENGTH} characters."
        parsed = parse_action(command)
        if isinstance(parsed, str):
            return parsed
        if parsed.verb == "ASK":
            self._asked = True
            assert self._task is not None
            return f"The user answered: {self._task.guest.answer()}"
        browser = self.browser
        try:
            if parsed.verb == "SCROLL":
                return browser.scroll(parsed.text)
            if parsed.verb == "GOTO":
                return browser.goto(parsed.text)
            element = self._element(parsed)
            if isinstance(element, str):
                return element
            if element.disabled:
                return f"{element.role} [{element.id}] {element.name!r} is disabled."
            if parsed.verb == "CLICK":
                return browser.click(element)
            if parsed.verb == "TYPE":
                return browser.type(element, parsed.text)
            if parsed.verb == "CLEAR":
                return browser.clear(element)
            return browser.submit(element)
        except BrowserCrashed:
            raise
        except PlaywrightError as e:
            # A timeout or an element that went away: the page stays as it is.
            return f"{parsed.verb} failed: {str(e).strip().splitlines()[0] if str(e).strip() else 'error'}"

    def _element(self, action: Action) -> Element | str:
        assert self._view is not None and action.target is not None
        element = self._view.elements.get(action.target)
        if element is None:
            return f"There is no element [{action.target}] on this page."
        return element

    def _crashed(self, reason: str) -> None:
        self._error = f"browser crashed: {reason}; the episode counts as failed"
        self._feedback = _clean(self._error, FEEDBACK_MAX_LENGTH)
        self._terminated = True
        self._verdict = Verdict(False, 0.0, 0, {})
        self._view = None
        assert self._browser is not None
        self._browser.close()  # the next reset launches a new one

    def _valid_actions(self) -> list[str]:
        if self._terminated or self._truncated or self._view is None:
            return []
        actions = []
        for e in self._view.elements.values():
            if e.where != 0 or e.disabled:
                continue
            if e.role in ("textbox", "combobox"):
                actions.append(f"TYPE [{e.id}] [...]")
                if e.role == "textbox" and e.in_form:
                    actions.append(f"SUBMIT [{e.id}]")
            else:
                actions.append(f"CLICK [{e.id}]")
        if self._view.more_above:
            actions.append("SCROLL [UP]")
        if self._view.more_below:
            actions.append("SCROLL [DOWN]")
        actions += ["ASK USER HELP", "GOTO [...]"]
        return actions

    def _info(self) -> dict[str, Any]:
        info = {
            "task_id": -1 if self._task is None else self._task.id,
            "success": self._verdict.success,
            "score": self._verdict.score,
            "valid_actions": self._valid_actions(),
            "milestone": self._milestone,
        }
        if self._error is not None:
            info["error"] = self._error
        return info

    def _render(self) -> str:
        assert self._task is not None
        user = self._task.guest.answer() if self._asked else "(not asked yet: ASK USER HELP)"
        head = f"Task: {self._task.instruction}\nUser: {user}\nLast action: {self._feedback}"
        page = self._view.text() if self._view is not None else "Page: (none: the browser crashed)"
        page = _clean_page(page)
        return head + "\n" + _clip(page, OBSERVATION_MAX_LENGTH - len(head) - 1)


def _clean(text: str, max_length: int) -> str:
    """Feedback echoes the action: one printable line."""
    flat = text.translate(_FLATTEN)
    return _clip("".join(c if c in _CHARSET else "?" for c in flat), max_length)


def _clean_page(text: str) -> str:
    return "".join(c if c in _CHARSET else "?" for c in text)


def _clip(text: str, max_length: int) -> str:
    if len(text) <= max_length:
        return text
    return text[: max_length - len(_ELLIPSIS)] + _ELLIPSIS
