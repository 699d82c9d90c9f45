"""The booking site over real HTTP: search, availability, dialogs, booking, the
store and its judge, determinism of the generated world. No browser here."""

from __future__ import annotations

import hashlib
import http.cookiejar
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from envs.opentable.catalog import (
    DAYS,
    SLOT_WINDOW,
    TIMES,
    TODAY,
    build_catalog,
    date_label,
    time_label,
)
from envs.opentable.server import SiteServer
from envs.opentable.tasks import FIELDS, MILESTONES, judge, make_task, milestone

REPO = Path(__file__).resolve().parents[1]


class Client:
    """A browser without a browser: a cookie jar, redirects followed."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def get(self, path: str) -> tuple[int, str, str]:
        return self._open(urllib.request.Request(self.base + path))

    def post(self, path: str, data: dict) -> tuple[int, str, str]:
        body = urllib.parse.urlencode(data).encode()
        return self._open(urllib.request.Request(self.base + path, data=body))

    def _open(self, request) -> tuple[int, str, str]:
        try:
            with self.opener.open(request, timeout=10) as response:
                path = urllib.parse.urlsplit(response.url).path
                return response.status, path, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, urllib.parse.urlsplit(e.url).path, e.read().decode()

    def past_dialogs(self) -> Client:
        """Accept cookies, dismiss the promotion, continue as a guest."""
        self.post("/consent", {"choice": "accept", "next": "/"})
        self.post("/promo", {"choice": "dismiss", "next": "/"})
        self.post("/guest", {"next": "/"})
        return self


@pytest.fixture(scope="module")
def catalog():
    return build_catalog(0)


@pytest.fixture(scope="module")
def site(catalog):
    server = SiteServer(catalog).start()
    yield server
    server.close()


@pytest.fixture
def client(site) -> Client:
    site.store.reset()
    return Client(site.url)


def _book(client: Client, catalog, task, **changes) -> tuple[int, str, str]:
    form = {
        "r": catalog.restaurants[task.restaurant_id].slug,
        "date": task.day.isoformat(),
        "time": task.expected_time,
        "party": task.party,
        "first_name": task.guest.first_name,
        "last_name": task.guest.last_name,
        "phone": task.guest.phone,
        "email": task.guest.email,
    }
    form.update(changes)
    return client.post("/book", form)


def _digest(catalog) -> str:
    """The generated world in a canonical form (a frozenset's repr follows string hashing)."""
    world = (
        catalog.restaurants,
        sorted(catalog.sold_out),
        [make_task(catalog, i) for i in (0, 7, 99, 450)],
    )
    return hashlib.sha256(repr(world).encode()).hexdigest()


def test_catalog_and_tasks_are_deterministic_across_processes(catalog) -> None:
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from envs.opentable.catalog import build_catalog;"
        "from tests.test_opentable_site import _digest; print(_digest(build_catalog(0)))"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", script, str(REPO)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()  # fmt: skip
        for seed in ("0", "4242")
    }
    assert digests == {_digest(catalog)}
    assert _digest(build_catalog(1)) != _digest(catalog)  # the seed matters


def test_catalog_shape(catalog) -> None:
    assert len(catalog.restaurants) == 80
    assert len({r.name for r in catalog.restaurants}) == 80
    assert len({r.slug for r in catalog.restaurants}) == 80
    fraction = len(catalog.sold_out) / (80 * DAYS * len(TIMES))
    assert 0.15 < fraction < 0.45
    text = json.dumps([r.__dict__ for r in catalog.restaurants])
    assert text.isascii()


def test_tasks_cover_sold_out_times_and_are_feasible(catalog) -> None:
    tasks = [make_task(catalog, i) for i in range(100)]
    sold_out = [t for t in tasks if t.sold_out]
    assert 20 <= len(sold_out) <= 50
    for task in tasks:
        assert catalog.is_available(task.restaurant_id, task.day, task.expected_time, task.party)
        assert task.requested_time <= task.expected_time <= task.requested_time + SLOT_WINDOW
        between = [t for t in TIMES if task.requested_time <= t < task.expected_time]
        assert not any(
            catalog.is_available(task.restaurant_id, task.day, t, task.party) for t in between
        )
        assert (
            task.guest.email not in task.instruction
            and task.guest.last_name not in task.instruction
        )
        assert task.instruction.startswith(f"Book {task.restaurant} for ")
        assert task.instruction.isascii()
    assert make_task(catalog, 3) == tasks[3]


def test_first_visit_asks_about_cookies_and_the_answer_sticks(client) -> None:
    status, _, html = client.get("/")
    assert status == 200
    assert '<div id="site" inert>' in html and "Accept all cookies" in html
    status, path, html = client.post("/consent", {"choice": "accept", "next": "/search?q=thai"})
    assert (status, path) == (200, "/search")
    assert "Accept all cookies" not in html and 'id="site" inert' not in html
    # An open redirect is refused: next must be a path on the site.
    _, path, _ = client.post("/consent", {"choice": "accept", "next": "//evil.example/x"})
    assert path == "/"


def test_search_puts_the_exact_name_first(client, catalog) -> None:
    client.past_dialogs()
    for restaurant in catalog.restaurants[:10]:
        query = urllib.parse.urlencode({"q": restaurant.name})
        _, _, html = client.get(f"/search?{query}")
        first = html.index('<div class="result">')
        assert html[first:].startswith(f'<div class="result"><a href="/r/{restaurant.slug}">')
    _, _, html = client.get("/search?q=zzzz")
    assert "No restaurants match 'zzzz'" in html
    # A cuisine lists several pages of 8.
    _, _, html = client.get("/search?q=italian")
    assert html.count('class="result"') <= 8


def test_restaurant_page_shows_sold_out_and_available_slots(client, catalog) -> None:
    client.past_dialogs()
    task = next(t for t in (make_task(catalog, i) for i in range(100)) if t.sold_out)
    r = catalog.restaurants[task.restaurant_id]
    query = urllib.parse.urlencode(
        {"party": task.party, "date": task.day.isoformat(), "time": task.requested_time}
    )
    _, _, html = client.get(f"/r/{r.slug}?{query}")
    assert f"{time_label(task.requested_time)} is sold out" in html
    assert (
        f'<button class="slot" disabled>{time_label(task.requested_time)} sold out</button>' in html
    )
    assert f">{time_label(task.expected_time)}</a>" in html
    assert (
        f'<option value="{task.day.isoformat()}" selected>{date_label(task.day)}</option>' in html
    )
    # Defaults without a query: today, 7:00 PM, 2 people.
    _, _, html = client.get(f"/r/{r.slug}")
    assert f"selected>{date_label(TODAY)}</option>" in html and '"1140" selected>7:00 PM' in html


def test_promotion_and_sign_in_dialogs(client, site, catalog) -> None:
    client.post("/consent", {"choice": "accept", "next": "/"})
    task = make_task(catalog, 0)
    slug = catalog.restaurants[task.restaurant_id].slug
    _, _, html = client.get(f"/r/{slug}")
    assert "Join DinerPass" in html and 'id="site" inert' in html
    client.post(
        "/promo", {"choice": "subscribe", "promo_email": "x@example.com", "next": f"/r/{slug}"}
    )
    _, _, html = client.get(f"/r/{slug}")
    assert "Join DinerPass" not in html
    book = "/book?" + urllib.parse.urlencode(
        {"r": slug, "date": task.day.isoformat(), "time": task.expected_time, "party": task.party}
    )
    _, _, html = client.get(book)
    assert "Sign in or continue as guest" in html and 'id="site" inert' in html
    _, _, html = client.post(
        "/signin", {"signin_email": "a@b.co", "signin_password": "pw", "next": book}
    )
    assert "could not find an account" in html
    # Booking before choosing "guest" goes back to the dialog, and books nothing.
    status, path, _ = _book(client, catalog, task)
    assert path == "/book" and site.store.count_reservations() == 0
    _, path, html = client.post("/guest", {"next": book})
    assert path == "/book" and "Complete reservation" in html and "inert" not in html


def test_booking_is_stored_confirmed_and_judged(client, site, catalog) -> None:
    client.past_dialogs()
    task = make_task(catalog, 5)
    status, path, html = _book(client, catalog, task)
    assert status == 200 and path.startswith("/confirmation/TT01")
    assert "Your table is booked" in html and task.guest.email in html
    rows = site.store.reservations()
    assert len(rows) == 1
    verdict = judge(task, rows)
    assert verdict.success and verdict.score == 1.0 and all(verdict.fields.values())
    # Formatting that means the same details is still right.
    site.store.reset()
    _book(client, catalog, task, first_name=f" {task.guest.first_name.upper()}", phone=task.guest.phone.replace(" ", ""),
          email=task.guest.email.upper())  # fmt: skip
    assert judge(task, site.store.reservations()).success
    site.store.reset()
    assert site.store.reservations() == []
    assert client.get(path)[0] == 404  # the reset forgot the confirmation too


def test_confirmation_codes_are_deterministic(client, site, catalog) -> None:
    client.past_dialogs()
    codes = []
    for _ in range(2):
        site.store.reset()
        _book(client, catalog, make_task(catalog, 5))
        _book(client, catalog, make_task(catalog, 6))
        codes.append([r["code"] for r in site.store.reservations()])
    assert codes[0] == codes[1] and codes[0][0] != codes[0][1]


def test_invalid_details_and_sold_out_times_book_nothing(client, site, catalog) -> None:
    client.past_dialogs()
    task = make_task(catalog, 5)
    _, _, html = _book(client, catalog, task, email="not-an-email", phone="call me", last_name="")
    assert "Please enter a valid email address." in html
    assert "Please enter a valid phone number." in html
    assert "Please enter a last name." in html
    assert f'value="{task.guest.first_name}"' in html  # what was typed stays
    sold = next(t for t in (make_task(catalog, i) for i in range(100)) if t.sold_out)
    _, _, html = _book(client, catalog, sold, time=sold.requested_time)
    assert "That time is not available" in html
    small = next(t for t in (make_task(catalog, i) for i in range(100))
                 if catalog.restaurants[t.restaurant_id].max_party < 12)  # fmt: skip
    limit = catalog.restaurants[small.restaurant_id].max_party
    _, _, html = _book(client, catalog, small, party=limit + 1)
    assert f"takes online bookings for up to {limit} people" in html
    assert site.store.count_reservations() == 0


def test_unknown_pages_and_bad_parameters_are_404(client) -> None:
    client.past_dialogs()
    assert client.get("/r/no-such-place")[0] == 404
    assert client.get("/nowhere")[0] == 404
    assert client.get("/book?r=x&date=2025-06-03&time=1140&party=2")[0] == 404
    status, _, html = client.get("/confirmation/NOPE")
    assert status == 404 and "Page not found" in html
    # A picker value outside the calendar falls back to the defaults.
    slug = build_catalog(0).restaurants[0].slug
    status, _, html = client.get(f"/r/{slug}?date=1999-01-01&time=5&party=99")
    assert status == 200 and f"selected>{date_label(TODAY)}</option>" in html


def test_judge_gives_partial_credit_per_field(catalog) -> None:
    task = make_task(catalog, 9)
    right = {
        "restaurant_id": task.restaurant_id, "date": task.day.isoformat(), "time": task.expected_time,
        "party": task.party, "first_name": task.guest.first_name, "last_name": task.guest.last_name,
        "phone": task.guest.phone, "email": task.guest.email,
    }  # fmt: skip
    assert judge(task, []).score == 0.0 and not judge(task, []).success
    wrong_time = {**right, "time": task.expected_time + 30}
    verdict = judge(task, [wrong_time])
    assert not verdict.success and verdict.score == pytest.approx(6 / 7)
    assert [f for f, ok in verdict.fields.items() if not ok] == ["time"]
    wrong_guest = {**right, "email": "someone@example.com", "phone": "(415) 555-0000"}
    assert judge(task, [wrong_guest]).score == pytest.approx(5 / 7)
    # Two bookings: not a success even if one is right, and the score halves.
    verdict = judge(task, [right, wrong_time])
    assert not verdict.success and verdict.score == pytest.approx(0.5)
    assert len(FIELDS) == 7


def test_milestones_need_the_tasks_own_restaurant_table_and_outcome(catalog) -> None:
    task = next(make_task(catalog, i) for i in range(50) if make_task(catalog, i).sold_out)
    slug = catalog.restaurants[task.restaurant_id].slug
    other = next(r.slug for r in catalog.restaurants if r.slug != slug)
    day, party = task.day.isoformat(), task.party
    none = judge(task, [])

    def at(path: str, verdict=none) -> str:
        return MILESTONES[milestone(task, slug, path, verdict)]

    assert at("/") == at("/search?q=x") == at(f"/r/{other}") == "start"
    assert at(f"/r/{slug}") == at(f"/r/{slug}?party={party}&date={day}&time=1") == "restaurant page"
    # The page with the task's own choice applied: the requested time, which is sold out here.
    assert at(f"/r/{slug}?party={party}&date={day}&time={task.requested_time}") == "times shown"
    form = f"/book?r={slug}&date={day}&party={party}&time="
    assert at(form + str(task.expected_time)) == "booking form"
    assert at(form + str(task.requested_time)) == "start"  # the sold-out time's form is not the task's
    assert at(f"/book?r={other}&date={day}&party={party}&time={task.expected_time}") == "start"
    wrong = {"restaurant_id": task.restaurant_id, "date": day, "time": 0, "party": party,
             "first_name": "", "last_name": "", "phone": "", "email": ""}  # fmt: skip
    assert at("/", judge(task, [wrong])) == "reservation made"
    right = {**wrong, "time": task.expected_time, "first_name": task.guest.first_name,
             "last_name": task.guest.last_name, "phone": task.guest.phone, "email": task.guest.email}  # fmt: skip
    assert at("/", judge(task, [right])) == "booked right"


def test_server_stops_and_frees_its_port(catalog) -> None:
    server = SiteServer(catalog).start()
    assert Client(server.url).get("/")[0] == 200
    server.close()
    assert not server.running
    with pytest.raises(urllib.error.URLError):
        Client(server.url).get("/")
