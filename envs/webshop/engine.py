"""WebShop's shopping session as a pure-Python state machine (no web server).

Follows the page flow of WebShop (Yao et al. 2022, ``web_agent_site``) in its
text mode: ``search`` -> ``results`` (10 per page) -> ``item`` -> the
``description`` / ``features`` / ``reviews`` sub-pages -> ``done`` after Buy
Now. A session is a small frozen :class:`SessionState`; :meth:`WebShopEngine.step`
maps a state and an action to the next state, so snapshot / restore is keeping
a reference (no replay).

Actions are WebShop's: ``search[query]`` (search page only) and
``click[button]`` (the button's text, case-insensitive; on the results page the
product asins are the links). Text that is not a valid action never raises: the
page stays as it was and the observation says what was wrong.

Observation format (ours, close to WebShop's ``text_rich`` mode): segments
joined by ``" [SEP] "``, starting with ``"Instruction: [SEP] <instruction>"``;
every clickable is written ``[button] text [button_]`` and a selected option
``[clicked button] text [clicked button_]``; feedback on the last action, if
any, follows the instruction.

Search is BM25 (``bm25s``) over what WebShop's Lucene index holds: the title,
the description, the bullet points and the option text, lower-cased. WebShop
indexes only the first bullet point; we index all of them because the
synthetic catalogue's bullets are short. Tokens are lower-case alphanumeric
runs minus English stop words, with a plural ``s`` stripped (a crude stand-in
for Lucene's stemming so "shoes" finds "shoe"). Like WebShop, a search returns
at most 50 products.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import bm25s
import numpy as np

from envs.webshop.reward import RewardBreakdown, get_reward
from envs.webshop.schema import Catalogue, Goal, Product

SEARCH_RETURN_N = 50  # WebShop's SEARCH_RETURN_N
RESULTS_PER_PAGE = 10
ACTION_MAX_LENGTH = 512
DESCRIPTION_MAX_LENGTH = 2000  # official descriptions can be pages long

BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BUY_NOW = "Buy Now"
TOTAL_RESULTS = "Total results"  # on a results page only (episodes.py reads it back)
SUB_PAGES = {"Description": "description", "Features": "features", "Reviews": "reviews"}

SEP = " [SEP] "
SEARCH_TEMPLATE = "search[...]"
_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
_TOKEN = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(bm25s.stopwords.STOPWORDS_EN)


def button(text: str) -> str:
    return f"[button] {text} [button_]"


def clicked_button(text: str) -> str:
    return f"[clicked button] {text} [clicked button_]"


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric tokens minus stop words, with a plural ``s`` stripped."""
    tokens = []
    for token in _TOKEN.findall(text.lower()):
        if token in _STOPWORDS:
            continue
        if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
            token = token[:-1]
        tokens.append(token)
    return tokens


def product_document(product: Product) -> str:
    """The text a product is indexed under (see the module docstring)."""
    option_text = ", and ".join(
        f"{name}: {', '.join(values)}" for name, values in product.options.items()
    )
    return " ".join(
        [product.name, product.description, *product.bullet_points, option_text]
    ).lower()


class SearchIndex:
    """BM25 over a catalogue's products; build once per catalogue and share it."""

    def __init__(self, products: Sequence[Product]) -> None:
        self.asins = tuple(p.asin for p in products)
        corpus = [tokenize(product_document(p)) or [""] for p in products]
        self._bm25 = bm25s.BM25()
        self._bm25.index(corpus, show_progress=False)
        self._vocab = self._bm25.vocab_dict

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> tuple[str, ...]:
        """Asins of the (at most ``k``) best-scoring products with a positive score,
        best first; ties keep catalogue order so results are deterministic."""
        tokens = [t for t in tokenize(query) if t in self._vocab]
        if not tokens:
            return ()
        scores = self._bm25.get_scores(tokens)
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        return tuple(self.asins[i] for i in order if scores[i] > 0)


@dataclass(frozen=True)
class SessionState:
    """Everything a session is: what :meth:`WebShopEngine.step` reads and writes.

    Immutable and made of tuples and strings, so a snapshot is the object itself.
    """

    goal_id: int
    page: str = "search"  # search | results | item | description | features | reviews | done
    query: str = ""
    results: tuple[str, ...] = ()  # asins of the last search, best first
    page_num: int = 1  # results page, 1-based
    asin: str | None = None  # the product on the item page and its sub-pages
    selected: tuple[tuple[str, str], ...] = ()  # (option group, value), one per group
    message: str = ""  # feedback on the last action ("" when it was fine)
    reward: RewardBreakdown | None = None  # set by Buy Now

    @property
    def done(self) -> bool:
        return self.page == "done"


Transition = Callable[[SessionState], SessionState]


class WebShopEngine:
    """The shop over one catalogue: pages, actions, search and the Buy Now reward.

    Args:
        catalogue: products and goals.
        index: a prebuilt :class:`SearchIndex` over ``catalogue.products``
            (built here when omitted).
    """

    def __init__(self, catalogue: Catalogue, index: SearchIndex | None = None) -> None:
        self.catalogue = catalogue
        self.products = {p.asin: p for p in catalogue.products}
        self.goals = {g.goal_id: g for g in catalogue.goals}
        self.index = index if index is not None else SearchIndex(catalogue.products)

    # -- sessions -----------------------------------------------------------

    def new_session(self, goal_id: int) -> SessionState:
        if goal_id not in self.goals:
            raise KeyError(f"unknown goal id {goal_id!r}")
        return SessionState(goal_id=goal_id)

    def goal(self, state: SessionState) -> Goal:
        return self.goals[state.goal_id]

    def step(self, state: SessionState, action: str) -> SessionState:
        """The state after ``action``; on bad input the same page with a message."""
        state = replace(state, message="") if state.message else state
        if state.done:
            return replace(state, message="The episode is over: the product was bought.")
        if not isinstance(action, str):
            return self._invalid(state, f"actions are strings, got {type(action).__name__}.")
        if len(action) > ACTION_MAX_LENGTH:
            return self._invalid(
                state, f"the action is longer than {ACTION_MAX_LENGTH} characters."
            )
        match = _ACTION.match(action)
        if match is None:
            return self._invalid(
                state, f"expected search[query] or click[button], got {_quote(action)}."
            )
        kind, argument = match.group(1).lower(), " ".join(match.group(2).split())
        if kind == "search":
            return self._search(state, argument)
        return self._click(state, argument)

    def _invalid(self, state: SessionState, why: str) -> SessionState:
        return replace(state, message=f"Invalid action: {why}")

    def _search(self, state: SessionState, query: str) -> SessionState:
        if state.page != "search":
            return self._invalid(
                state, f"search is only possible on the search page; click[{BACK_TO_SEARCH}] first."
            )
        if not query:
            return self._invalid(state, "the search query is empty.")
        return replace(
            state, page="results", query=query, results=self.index.search(query), page_num=1
        )

    def _click(self, state: SessionState, text: str) -> SessionState:
        key = text.lower()
        for label, target in self.clickables(state).items():
            if label.lower() == key:
                return target(state)
        if state.page == "search":
            return self._invalid(
                state,
                f"there is nothing to click on the search page; use search[query], got click[{_clip(text)}].",
            )
        return self._invalid(state, f"there is no button {_quote(text)} on this page.")

    def clickables(self, state: SessionState) -> dict[str, Transition]:
        """Button text -> the transition it makes, for the current page (in page order)."""
        page = state.page
        buttons: dict[str, Transition] = {}
        if page in ("search", "done"):
            return buttons
        buttons[BACK_TO_SEARCH] = lambda s: SessionState(goal_id=s.goal_id)
        if page == "results":
            if state.page_num > 1:
                buttons[PREV_PAGE] = lambda s: replace(s, page_num=s.page_num - 1)
            if state.page_num < self.num_pages(state):
                buttons[NEXT_PAGE] = lambda s: replace(s, page_num=s.page_num + 1)
            for asin in self.page_results(state):
                buttons[asin] = lambda s, a=asin: replace(s, page="item", asin=a, selected=())
            return buttons
        buttons[PREV_PAGE] = (
            (lambda s: replace(s, page="results", asin=None, selected=()))
            if page == "item"
            else (lambda s: replace(s, page="item"))
        )
        if page != "item":
            return buttons
        product = self.products[state.asin]
        for group, values in product.options.items():
            for value in values:
                # A value listed in two groups selects the first (WebShop keys
                # its clickables by value, so duplicates collapse there too).
                buttons.setdefault(value, lambda s, g=group, v=value: _select(s, g, v))
        for label, sub_page in SUB_PAGES.items():
            buttons[label] = lambda s, p=sub_page: replace(s, page=p)
        buttons[BUY_NOW] = self._buy
        return buttons

    def _buy(self, state: SessionState) -> SessionState:
        product = self.products[state.asin]
        breakdown = get_reward(product, self.goal(state), [v for _, v in state.selected])
        return replace(state, page="done", reward=breakdown)

    # -- what the agent sees --------------------------------------------------

    def num_pages(self, state: SessionState) -> int:
        return max(1, -(-len(state.results) // RESULTS_PER_PAGE))

    def page_results(self, state: SessionState) -> tuple[str, ...]:
        start = (state.page_num - 1) * RESULTS_PER_PAGE
        return state.results[start : start + RESULTS_PER_PAGE]

    def valid_actions(self, state: SessionState) -> list[str]:
        """Every clickable as ``click[text]``; on the search page the template
        ``search[...]`` (a query is free text, not a choice; agentq's grounding
        fills the template rather than matching it)."""
        search = [SEARCH_TEMPLATE] if self.has_search_bar(state) else []
        return search + [f"click[{label}]" for label in self.clickables(state)]

    def has_search_bar(self, state: SessionState) -> bool:
        return state.page == "search"

    def observation(self, state: SessionState) -> str:
        goal = self.goal(state)
        parts = ["Instruction:", goal.instruction_text]
        if state.message:
            parts.append(state.message)
        parts.extend(self._page(state))
        return SEP.join(parts)

    def _page(self, state: SessionState) -> list[str]:
        page = state.page
        if page == "search":
            return ["Search"]
        if page == "done":
            score = state.reward.total if state.reward is not None else 0.0
            return [
                "Thank you for shopping with us!",
                "Your score (min 0.0, max 1.0)",
                f"{score:.4f}",
            ]
        labels = self.clickables(state)
        parts = [button(BACK_TO_SEARCH)]
        if page == "results":
            parts.append(f"Page {state.page_num} ({TOTAL_RESULTS}: {len(state.results)})")
            if PREV_PAGE in labels:
                parts.append(button(PREV_PAGE))
            if NEXT_PAGE in labels:
                parts.append(button(NEXT_PAGE))
            for asin in self.page_results(state):
                product = self.products[asin]
                parts += [button(asin), product.name, f"${product.price:.2f}"]
            if not state.results:
                parts.append(f"No products match {_quote(state.query)}.")
            return parts
        parts.append(button(PREV_PAGE))
        product = self.products[state.asin]
        if page == "item":
            chosen = dict(state.selected)
            for group, values in product.options.items():
                parts.append(group)
                parts += [
                    clicked_button(v) if chosen.get(group) == v else button(v) for v in values
                ]
            rating = "N.A." if product.rating is None else f"{product.rating:g}"
            parts += [product.name, f"Price: ${product.price:.2f}", f"Rating: {rating}"]
            parts += [button(label) for label in SUB_PAGES]
            parts.append(button(BUY_NOW))
        elif page == "description":
            parts.append(_clip(product.description, DESCRIPTION_MAX_LENGTH) or "No description.")
        elif page == "features":
            parts += list(product.bullet_points) or ["No features listed."]
        elif page == "reviews":
            parts += list(product.reviews) or ["No reviews yet."]
        return parts


def _select(state: SessionState, group: str, value: str) -> SessionState:
    selected = tuple((g, v) for g, v in state.selected if g != group) + ((group, value),)
    return replace(state, selected=selected)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quote(text: str) -> str:
    return repr(_clip(" ".join(text.split())))
