"""WebShop (Yao et al. 2022) as a Gymnasium environment for Agent Q.

The shop is :mod:`envs.webshop.engine` (pages, actions, BM25 search) and the
reward :mod:`envs.webshop.reward`; this module adds spaces, task splits, the
step limit, ``info`` and snapshot / restore. Products and goals come from our
seeded synthetic catalogue (:mod:`envs.webshop.catalogue`) unless the official
WebShop files are given (:mod:`envs.webshop.official`).
"""

from __future__ import annotations

import string
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from envs.contract import choose_task
from envs.webshop.engine import ACTION_MAX_LENGTH, SessionState, WebShopEngine
from envs.webshop.schema import Catalogue

OBSERVATION_MAX_LENGTH = 8192
_CHARSET = string.printable
_PRINTABLE = frozenset(_CHARSET)
_ELLIPSIS = "..."

# One engine (and so one BM25 index) per catalogue, shared by every env in the
# process: MCTS makes many envs and the index is the expensive part.
_ENGINES: dict[tuple, WebShopEngine] = {}


def get_engine(
    catalogue: str | Catalogue = "synthetic", data_dir: str | None = None, seed: int = 0
) -> WebShopEngine:
    """The cached engine for a catalogue spec (see :class:`WebShopEngine` arguments)."""
    if isinstance(catalogue, Catalogue):
        # The cached engine holds the catalogue, so its id is not reused.
        key: tuple = ("object", id(catalogue))
    elif data_dir is not None:
        key = ("official", str(data_dir), seed)
    elif catalogue == "synthetic":
        key = ("synthetic", seed)
    else:
        raise ValueError(
            f"catalogue must be 'synthetic', a Catalogue, or data_dir must point at the official files; got {catalogue!r}"
        )
    engine = _ENGINES.get(key)
    if engine is None:
        if isinstance(catalogue, Catalogue):
            loaded = catalogue
        elif data_dir is not None:
            from envs.webshop.official import load_official

            loaded = load_official(data_dir, seed=seed)
        else:
            from envs.webshop.catalogue import load_default_catalogue

            loaded = load_default_catalogue(seed=seed)
        engine = _ENGINES[key] = WebShopEngine(loaded)
    return engine


def printable(text: str) -> str:
    """``text`` inside the spaces' charset: whitespace becomes a space, other
    characters outside ``string.printable`` become ``"?"``."""
    if all(c in _PRINTABLE for c in text) and "\n" not in text:
        return text
    return "".join(" " if c.isspace() else (c if c in _PRINTABLE else "?") for c in text)


@dataclass(frozen=True)
class WebShopState:
    """What ``snapshot`` returns: the immutable session plus the env's counters."""

    task_id: int
    session: SessionState
    steps: int
    truncated: bool


class WebShopEnv(gym.Env[str, str]):
    """Buy the product an instruction describes in a simulated web shop.

    Each task is a goal: an instruction ("i need a large navy blue cotton
    t-shirt, and price lower than 30.00 dollars") naming a product type,
    attributes, option values and a price limit. The agent searches, browses
    result pages (10 per page), opens items, selects options and buys.

    ## Action Space

    ``Text(max_length=512, charset=string.printable)``: WebShop's text actions
    ``search[query]`` (on the search page only) and ``click[button]`` (button
    text, case-insensitive; product asins on the results page). Anything else,
    including empty queries, clicks on buttons that are not on the page and
    garbled or over-long text, leaves the page unchanged, puts
    ``"Invalid action: <why>"`` in the observation and still uses a step.

    ## Observation Space

    ``Text(max_length=8192, charset=string.printable)``. Segments joined by
    ``" [SEP] "``: ``"Instruction:"``, the instruction, the feedback on the last
    action if it was invalid, then the page; clickables are written
    ``[button] text [button_]``, a selected option ``[clicked button] text
    [clicked button_]`` (see :mod:`envs.webshop.engine`). Each observation
    repeats the instruction, so it describes the state on its own.

    ## Rewards

    0.0 on every step but Buy Now, which gives WebShop's reward in [0, 1]
    (:mod:`envs.webshop.reward`): the product type factor times the fraction of
    goal attributes, goal options and the price limit that the purchase meets.

    ## Episode End

    * Termination: Buy Now. ``info["success"]`` is True when the reward is 1.
    * Truncation: ``max_steps`` steps without buying. The step counter is the
      env's own and part of the snapshot, so the env is registered with
      ``max_episode_steps=None``.

    Stepping after the end changes nothing and returns the final flags.

    ## Information

    Every ``info`` has ``task_id`` (int), ``success`` (bool), ``score`` (float,
    the Buy Now reward, else 0.0), ``has_search_bar`` (bool) and
    ``valid_actions`` (list[str]): every clickable of the page as
    ``click[text]``, and on the search page the template ``search[...]``
    (the query is free text; agentq's grounding fills the template). After Buy Now ``info`` also has
    ``reward_breakdown`` (a dict of :class:`envs.webshop.reward.RewardBreakdown`).

    ## Arguments

    * ``max_steps``: steps per episode before truncation (default 15).
    * ``catalogue``: ``"synthetic"`` (our seeded catalogue, the default) or a
      :class:`envs.webshop.schema.Catalogue` object.
    * ``data_dir``: a folder with WebShop's official files; when given, they
      are loaded instead of the synthetic catalogue.
    * ``seed``: the catalogue's seed (products, goals, prices), not the
      episode's; episodes are seeded through ``reset(seed=...)``.
    * ``dev_size``: the synthetic catalogue's first ``dev_size`` training goals
      become the ``"dev"`` split (for tuning) and leave ``"train"``; 0 (the
      default): no dev split. The official files bring WebShop's own dev split
      (goals 500-1499), so it must stay 0 with them.

    ``reset(options={"task_id": goal_id})`` plays that goal; without it a train
    goal is drawn with ``self.np_random``.
    """

    metadata = {"render_modes": []}
    forkable = True  # all state lives in this process: parallel workers may fork it (agentq/parallel.py)

    def __init__(
        self,
        max_steps: int = 15,
        catalogue: str | Catalogue = "synthetic",
        data_dir: str | None = None,
        seed: int = 0,
        dev_size: int = 0,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps
        self.engine = get_engine(catalogue, data_dir, seed)
        train = self.engine.catalogue.train_goals
        if not 0 <= dev_size < len(train) or (dev_size and self.engine.catalogue.dev_goals):
            raise ValueError(
                f"dev_size must be in [0, {len(train)}) training goals, and 0 with a catalogue that has "
                f"its own dev split ({len(self.engine.catalogue.dev_goals)} goals here); got {dev_size}"
            )
        self._splits = {
            "train": list(train[dev_size:]),
            "dev": list(self.engine.catalogue.dev_goals or train[:dev_size]),
            "test": list(self.engine.catalogue.test_goals),
        }
        self.observation_space = spaces.Text(max_length=OBSERVATION_MAX_LENGTH, charset=_CHARSET)
        self.action_space = spaces.Text(max_length=ACTION_MAX_LENGTH, charset=_CHARSET)
        first = self.engine.catalogue.goals[0].goal_id
        self._state = WebShopState(first, self.engine.new_session(first), 0, False)

    def task_ids(self, split: str) -> list[int]:
        """Goal ids of ``"train"``, ``"dev"`` (see ``dev_size``) or ``"test"``."""
        if split not in self._splits:
            raise ValueError(f"split must be 'train', 'dev' or 'test', got {split!r}")
        if split == "dev" and not self._splits[split]:
            raise ValueError("this catalogue has no dev goals: set env.make.dev_size > 0 (the synthetic catalogue)")
        return list(self._splits[split])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task_id = choose_task(self, options, self._goal_id)
        self._state = WebShopState(task_id, self.engine.new_session(task_id), 0, False)
        return self._observe(), self._info()

    def _goal_id(self, task_id: Any) -> int:
        """``int(task_id)`` if the catalogue has that goal, else ValueError."""
        task_id = int(task_id)
        if task_id not in self.engine.goals:
            raise ValueError(f"unknown task_id {task_id}")
        return task_id

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        state = self._state
        if state.session.done or state.truncated:
            return self._observe(), 0.0, state.session.done, state.truncated, self._info()
        session = self.engine.step(state.session, action)
        steps = state.steps + 1
        terminated = session.done
        truncated = not terminated and steps >= self.max_steps
        self._state = WebShopState(state.task_id, session, steps, truncated)
        reward = session.reward.total if terminated and session.reward is not None else 0.0
        return self._observe(), float(reward), terminated, truncated, self._info()

    def snapshot(self) -> WebShopState:
        return self._state

    def restore(self, state: WebShopState) -> None:
        self._state = state

    def _observe(self) -> str:
        text = printable(self.engine.observation(self._state.session))
        if len(text) > OBSERVATION_MAX_LENGTH:
            text = text[: OBSERVATION_MAX_LENGTH - len(_ELLIPSIS)] + _ELLIPSIS
        return text

    def _info(self) -> dict[str, Any]:
        session = self._state.session
        breakdown = session.reward
        info: dict[str, Any] = {
            "task_id": self._state.task_id,
            "success": bool(breakdown is not None and breakdown.success),
            "score": float(breakdown.total) if breakdown is not None else 0.0,
            "has_search_bar": self.engine.has_search_bar(session),
            "valid_actions": [printable(a) for a in self.engine.valid_actions(session)],
        }
        if breakdown is not None:
            info["reward_breakdown"] = asdict(breakdown)
        return info
