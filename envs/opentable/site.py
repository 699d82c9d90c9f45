"""The booking site as a Starlette app over a :class:`~envs.opentable.store.Store`.

Pages: home (search box, cuisines, top rated), search results (8 a page),
restaurant (party / date / time pickers and the slots around the chosen time,
sold-out ones disabled), booking form, confirmation. Obstacles: a cookie
dialog on the first page of a browser session, a promotion dialog on the first
restaurant page, and a "sign in or continue as guest" dialog before the
booking form (signing in always fails: the user has no account).

Each dialog is dismissed by a form post that sets a cookie, so a fresh browser
context meets all three again.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from urllib.parse import parse_qsl, urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from envs.opentable import pages
from envs.opentable.catalog import (
    DEFAULT_PARTY,
    DEFAULT_TIME,
    MAX_PARTY,
    SLOT_WINDOW,
    TIMES,
    TODAY,
    dates,
)
from envs.opentable.store import Store

PAGE_SIZE = 8
CONSENT, PROMO, GUEST = "tt_consent", "tt_promo", "tt_guest"
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_PHONE = re.compile(r"^[0-9 ()+.\-]+$")


def create_app(store: Store) -> Starlette:
    """The site over ``store``: the routes of :class:`_Site`, and an error page for
    every HTTP error."""
    return Starlette(routes=_Site(store).routes(), exception_handlers={HTTPException: _error_page})


class _Site:
    """The site's pages over one store; each ``async`` method is a route's endpoint."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def routes(self) -> list[Route]:
        return [
            Route("/", self.home),
            Route("/search", self.search),
            Route("/r/{slug}", self.restaurant),
            Route("/book", self.book_form, methods=["GET"]),
            Route("/book", self.book, methods=["POST"]),
            Route("/confirmation/{code}", self.confirmation),
            Route("/consent", self.consent, methods=["POST"]),
            Route("/promo", self.promo, methods=["POST"]),
            Route("/guest", self.guest, methods=["POST"]),
            Route("/signin", self.signin, methods=["GET", "POST"]),
            Route("/help", _help_page),
            Route("/about", _about),
        ]

    # -- finding and booking ------------------------------------------------------

    async def home(self, request: Request) -> Response:
        body = pages.home(self.store.featured(5), self.store.cuisines())
        return _render(request, "Home", body)

    async def search(self, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        rows = self.store.search(query)
        num_pages = math.ceil(len(rows) / PAGE_SIZE)
        page_no = min(max(_int(request.query_params.get("page"), 1), 1), max(num_pages, 1))
        shown = rows[(page_no - 1) * PAGE_SIZE : page_no * PAGE_SIZE]
        return _render(request, f"Search: {query}", pages.results(query, shown, page_no, num_pages))

    async def restaurant(self, request: Request) -> Response:
        r = self._restaurant(request.path_params["slug"])
        q = request.query_params
        party = _int(q.get("party"), DEFAULT_PARTY)
        party = party if 1 <= party <= MAX_PARTY else DEFAULT_PARTY
        day = _date(q.get("date")) or TODAY
        minutes = _int(q.get("time"), DEFAULT_TIME)
        minutes = minutes if minutes in TIMES else DEFAULT_TIME
        slots = [
            (t, self.store.is_available(r, day, t, party))
            for t in TIMES
            if abs(t - minutes) <= SLOT_WINDOW
        ]
        dialog = None if PROMO in request.cookies else pages.promo_dialog(_here(request))
        return _render(request, r["name"], pages.restaurant(r, day, minutes, party, slots), dialog)

    async def book_form(self, request: Request) -> Response:
        r, day, minutes, party = self._booking_params(request.query_params)
        if not self.store.is_available(r, day, minutes, party):
            return _render(request, "Not available", pages.unavailable(r, _why(r, party)))
        dialog = None if GUEST in request.cookies else pages.signin_dialog(_here(request))
        body = pages.booking(r, day, minutes, party, {}, {})
        return _render(request, "Complete your reservation", body, dialog)

    async def book(self, request: Request) -> Response:
        form = await _form(request)
        r, day, minutes, party = self._booking_params(form)
        back = "/book?" + urlencode(
            {"r": r["slug"], "date": day.isoformat(), "time": minutes, "party": party}
        )
        if GUEST not in request.cookies:
            return RedirectResponse(back, status_code=303)
        if not self.store.is_available(r, day, minutes, party):
            return _render(request, "Not available", pages.unavailable(r, _why(r, party)))
        values = {
            k: str(form.get(k, "")).strip()
            for k in ("first_name", "last_name", "phone", "email", "requests")
        }
        values["newsletter"] = "1" if form.get("newsletter") else ""
        errors = _validate(values)
        if errors:
            body = pages.booking(r, day, minutes, party, values, errors)
            return _render(request, "Complete your reservation", body)
        code = self.store.book(r["id"], day, minutes, party, values)
        return RedirectResponse(f"/confirmation/{code}", status_code=303)

    async def confirmation(self, request: Request) -> Response:
        v = self.store.reservation(request.path_params["code"])
        if v is None:
            raise HTTPException(404)
        return _render(request, "Reservation confirmed", pages.confirmation(v))

    # -- the dialogs --------------------------------------------------------------

    async def consent(self, request: Request) -> Response:
        form = await _form(request)
        return _dismiss(form.get("next"), CONSENT, str(form.get("choice", "reject")))

    async def promo(self, request: Request) -> Response:
        form = await _form(request)
        email = str(form.get("promo_email", "")).strip()
        if form.get("choice") == "subscribe" and _EMAIL.match(email):
            self.store.subscribe(email)
        return _dismiss(form.get("next"), PROMO, "seen")

    async def guest(self, request: Request) -> Response:
        form = await _form(request)
        return _dismiss(form.get("next"), GUEST, "1")

    async def signin(self, request: Request) -> Response:
        if request.method == "GET":
            return _render(request, "Sign in", pages.signin_page())
        form = await _form(request)
        error = "We could not find an account with that email and password. You can continue as a guest."
        dialog = pages.signin_dialog(_safe_next(form.get("next")), error)
        return _render(request, "Sign in", "<h1>Sign in</h1>", dialog)

    # -- parameters ---------------------------------------------------------------

    def _restaurant(self, slug: str) -> dict:
        r = self.store.restaurant(slug)
        if r is None:
            raise HTTPException(404)
        return r

    def _booking_params(self, params) -> tuple[dict, dt.date, int, int]:
        r = self._restaurant(str(params.get("r", "")))
        day = _date(params.get("date"))
        minutes = _int(params.get("time"), -1)
        party = _int(params.get("party"), -1)
        if day is None or minutes not in TIMES or not 1 <= party <= MAX_PARTY:
            raise HTTPException(404)
        return r, day, minutes, party


async def _help_page(request: Request) -> Response:
    return _render(request, "Help", pages.text_page("Help", [
        "Search for a restaurant, choose a party size, date and time, then pick an available time.",
        "Sold-out times are shown in grey. You can book as a guest without an account.",
    ]))  # fmt: skip


async def _about(request: Request) -> Response:
    return _render(request, "About", pages.text_page("About", [
        "TableTime helps you find and book tables at restaurants in San Francisco.",
    ]))  # fmt: skip


async def _error_page(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 500)
    title = "Page not found" if status == 404 else "Something went wrong"
    body = pages.text_page(title, ["Go back to the home page to search for a restaurant."])
    return _render(request, title, body + '<p><a href="/">Home</a></p>', status=status)


async def _form(request: Request) -> dict[str, str]:
    """The posted form: every form here is urlencoded (no python-multipart needed)."""
    body = (await request.body()).decode("utf-8", "replace")
    return dict(parse_qsl(body, keep_blank_values=True))


def _render(
    request: Request, title: str, body: str, dialog: str | None = None, status: int = 200
) -> Response:
    if CONSENT not in request.cookies:  # the cookie question comes before anything else
        dialog = pages.consent_dialog(_here(request))
    return HTMLResponse(pages.page(title, body, dialog=dialog), status_code=status)


def _dismiss(next_path, cookie: str, value: str) -> Response:
    response = RedirectResponse(_safe_next(next_path), status_code=303)
    response.set_cookie(cookie, value, path="/", samesite="lax")
    return response


def _here(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def _safe_next(value) -> str:
    """Only paths on this site: ``next`` comes from the browser."""
    value = str(value or "/")
    return value if value.startswith("/") and not value.startswith("//") else "/"


def _int(value, default: int) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def _date(value) -> dt.date | None:
    try:
        day = dt.date.fromisoformat(str(value))
    except ValueError:
        return None
    return day if day in dates() else None


def _why(r: dict, party: int) -> str:
    if party > r["max_party"]:
        return f"{r['name']} takes online bookings for up to {r['max_party']} people."
    return "That time is sold out. Please choose another time."


def _validate(values: dict[str, str]) -> dict[str, str]:
    errors = {}
    if not values["first_name"]:
        errors["first_name"] = "Please enter a first name."
    if not values["last_name"]:
        errors["last_name"] = "Please enter a last name."
    digits = re.sub(r"\D", "", values["phone"])
    if not _PHONE.match(values["phone"]) or not 7 <= len(digits) <= 15:
        errors["phone"] = "Please enter a valid phone number."
    if not _EMAIL.match(values["email"]):
        errors["email"] = "Please enter a valid email address."
    return errors
