"""Booking tasks, the simulated user who knows the guest's details, and the judge.

A task is "Book <restaurant> for <n> people on <date> at <time>". About a third
of the tasks ask for a time that is sold out; their instruction, like every
other, says to take the next later available time, and the judge expects that
time (it is always within the slots the restaurant page shows). The guest's
name, phone and email are not in the instruction: the agent gets them with
``ASK USER HELP``, as in Agent Q's OpenTable setting.

Task ``i`` is generated from its own seeded stream, so it does not depend on
how many tasks are made.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from envs.opentable.catalog import (
    SLOT_WINDOW,
    TIMES,
    Catalog,
    date_label,
    dates,
    party_label,
    time_label,
)

FIELDS = ("restaurant", "date", "time", "party_size", "name", "phone", "email")
# How far an episode got towards the task's booking, in the order the oracle passes them;
# the env reports the furthest one reached (``info["milestone"]``, an index into this).
# A 135M policy that never books still differs in how far it gets (docs/environments.md).
MILESTONES = (
    "start",
    "restaurant page",  # the task's restaurant's page
    "times shown",  # that page with the task's party size, date and time applied
    "booking form",  # the form for the table the judge expects (restaurant, date, time, party)
    "reservation made",  # any reservation, right or wrong
    "booked right",  # the judge's success
)
_AT = {name: i for i, name in enumerate(MILESTONES)}
SOLD_OUT_FRACTION = 0.35

_FIRST = ("Jane", "Omar", "Mei", "Lucas", "Amara", "Diego", "Hannah", "Ravi", "Sofia", "Kenji",
          "Chloe", "Mateo", "Leila", "Noah", "Ines", "Felix", "Zoe", "Arjun", "Nadia", "Owen")  # fmt: skip
_LAST = ("Doe", "Haddad", "Chen", "Moreau", "Okafor", "Ramirez", "Schmidt", "Patel", "Rossi",
         "Tanaka", "Dubois", "Silva", "Nasser", "Walker", "Costa", "Berg", "Kim", "Mehta",
         "Novak", "Reyes")  # fmt: skip
_AREAS = ("415", "628", "510", "650")
_DOMAINS = ("example.com", "example.org", "example.net")


@dataclass(frozen=True)
class Guest:
    first_name: str
    last_name: str
    phone: str
    email: str

    @property
    def name(self) -> str:
        return f"{self.first_name} {self.last_name}"

    def answer(self) -> str:
        """What the simulated user says when asked."""
        return (
            f"Please book it for {self.first_name} {self.last_name}, "
            f"phone {self.phone}, email {self.email}."
        )


@dataclass(frozen=True)
class Task:
    id: int
    restaurant_id: int
    restaurant: str
    day: dt.date
    requested_time: int  # minutes after midnight
    party: int
    guest: Guest
    expected_time: int  # requested_time, or the next later available time when it is sold out

    @property
    def sold_out(self) -> bool:
        return self.expected_time != self.requested_time

    @property
    def instruction(self) -> str:
        return (
            f"Book {self.restaurant} for {party_label(self.party)} on {date_label(self.day)} "
            f"at {time_label(self.requested_time)}. If that time is sold out, book the next later "
            "time that is available. The guest's name, phone and email are known only to the "
            "user: ask the user for them."
        )


@dataclass(frozen=True)
class Verdict:
    """The judge's reading of the reservation store.

    ``score`` is the fraction of :data:`FIELDS` right in the best-matching
    reservation, divided by the number of reservations (booking twice halves
    it); ``success`` needs exactly one reservation with every field right.
    """

    success: bool
    score: float
    reservations: int
    fields: Mapping[str, bool]  # of the best-matching reservation; all False when there is none


def make_task(catalog: Catalog, task_id: int) -> Task:
    rng = random.Random(f"opentable-task-{catalog.seed}-{task_id}")
    sold_out = rng.random() < SOLD_OUT_FRACTION
    days = dates()
    while True:  # a handful of draws at most: a third of slots are sold out
        restaurant = catalog.restaurants[rng.randrange(len(catalog.restaurants))]
        day = days[rng.randrange(len(days))]
        party = rng.choice((1, 2, 2, 2, 3, 4, 4, 5, 6, 8))
        party = min(party, restaurant.max_party)
        options = []
        for t in TIMES:
            expected = _first_available(catalog, restaurant.id, day, t, party)
            if expected is not None and (expected != t) == sold_out:
                options.append((t, expected))
        if options:
            requested, expected = options[rng.randrange(len(options))]
            break
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    number = rng.randrange(100)
    email = (
        rng.choice((f"{first}.{last}", f"{first[0]}{last}{number}", f"{first}{number}")).lower()
        + "@"
        + rng.choice(_DOMAINS)
    )
    guest = Guest(first, last, f"({rng.choice(_AREAS)}) 555-01{number:02d}", email)
    return Task(task_id, restaurant.id, restaurant.name, day, requested, party, guest, expected)


def milestone(task: Task, slug: str, path: str, verdict: Verdict) -> int:
    """The furthest of :data:`MILESTONES` that being on ``path`` (with its query) shows,
    given the judge's ``verdict`` so far; ``slug`` is the task's restaurant's."""
    if verdict.success:
        return _AT["booked right"]
    if verdict.reservations:
        return _AT["reservation made"]
    route, query = split_path(path)
    booking = times_query(task) | {"r": slug, "time": str(task.expected_time)}
    if route == "/book" and booking.items() <= query.items():
        return _AT["booking form"]
    if route == f"/r/{slug}":
        applied = times_query(task).items() <= query.items()
        return _AT["times shown" if applied else "restaurant page"]
    return _AT["start"]


def split_path(path: str) -> tuple[str, dict[str, str]]:
    """A site path's route and its query's (first) values."""
    url = urlsplit(path)
    return url.path, {k: v[0] for k, v in parse_qs(url.query).items()}


def times_query(task: Task) -> dict[str, str]:
    """The query a restaurant page has once the task's party size, date and time are applied."""
    day, party, at = task.day.isoformat(), str(task.party), str(task.requested_time)
    return {"party": party, "date": day, "time": at}


def _first_available(
    catalog: Catalog, restaurant_id: int, day: dt.date, t: int, party: int
) -> int | None:
    """The requested time if free, else the next later free time the page shows."""
    for later in TIMES:
        if t <= later <= t + SLOT_WINDOW and catalog.is_available(restaurant_id, day, later, party):
            return later
    return None


def judge(task: Task, reservations: Sequence[Mapping]) -> Verdict:
    """Compare the store's reservations (rows of :mod:`envs.opentable.site`) with the task."""
    if not reservations:
        return Verdict(False, 0.0, 0, dict.fromkeys(FIELDS, False))
    best = max((_fields(task, r) for r in reservations), key=lambda f: sum(f.values()))
    right = sum(best.values()) / len(FIELDS)
    success = len(reservations) == 1 and all(best.values())
    return Verdict(success, right / len(reservations), len(reservations), best)


def _fields(task: Task, r: Mapping) -> dict[str, bool]:
    guest = task.guest
    return {
        "restaurant": r["restaurant_id"] == task.restaurant_id,
        "date": r["date"] == task.day.isoformat(),
        "time": r["time"] == task.expected_time,
        "party_size": r["party"] == task.party,
        "name": _words(f"{r['first_name']} {r['last_name']}") == _words(guest.name),
        "phone": _digits(r["phone"]) == _digits(guest.phone),
        "email": r["email"].strip().casefold() == guest.email.casefold(),
    }


def _words(text: str) -> str:
    return " ".join(text.split()).casefold()


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)
