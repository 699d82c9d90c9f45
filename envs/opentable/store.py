"""The booking site's data store: one SQLite database per site.

Restaurants and sold-out slots are loaded from a :class:`~envs.opentable.catalog.Catalog`
and never change; reservations are what the agent creates, what the judge
reads and what :meth:`Store.reset` clears between episodes. Reservations do
not use up capacity: availability is the catalogue's, so a reset restores the
site exactly.

The web server's thread writes and the env's thread reads, so one connection
is shared under a lock (SQLite calls here take microseconds).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import sqlite3
import threading
from typing import Any

from envs.opentable.catalog import TIMES, Catalog, dates

_SCHEMA = """
CREATE TABLE restaurants (
    id INTEGER PRIMARY KEY, slug TEXT UNIQUE NOT NULL, name TEXT NOT NULL,
    cuisine TEXT NOT NULL, neighbourhood TEXT NOT NULL, address TEXT NOT NULL,
    price INTEGER NOT NULL, rating REAL NOT NULL, reviews INTEGER NOT NULL,
    max_party INTEGER NOT NULL, description TEXT NOT NULL,
    dishes TEXT NOT NULL, review_texts TEXT NOT NULL
);
CREATE TABLE sold_out (
    restaurant_id INTEGER NOT NULL, date TEXT NOT NULL, time INTEGER NOT NULL,
    PRIMARY KEY (restaurant_id, date, time)
);
CREATE TABLE reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, code TEXT UNIQUE NOT NULL,
    restaurant_id INTEGER NOT NULL REFERENCES restaurants(id),
    date TEXT NOT NULL, time INTEGER NOT NULL, party INTEGER NOT NULL,
    first_name TEXT NOT NULL, last_name TEXT NOT NULL, phone TEXT NOT NULL,
    email TEXT NOT NULL, requests TEXT NOT NULL, newsletter INTEGER NOT NULL
);
CREATE TABLE subscriptions (email TEXT NOT NULL);
"""
_WORD = re.compile(r"[a-z0-9]{2,}")


class Store:
    def __init__(self, catalog: Catalog, path: str = ":memory:") -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._db.executescript(
                "DROP TABLE IF EXISTS restaurants; DROP TABLE IF EXISTS sold_out;"
                "DROP TABLE IF EXISTS reservations; DROP TABLE IF EXISTS subscriptions;" + _SCHEMA
            )
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO restaurants VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.id,
                        r.slug,
                        r.name,
                        r.cuisine,
                        r.neighbourhood,
                        r.address,
                        r.price,
                        r.rating,
                        r.reviews,
                        r.max_party,
                        r.description,
                        json.dumps(r.dishes),
                        json.dumps(r.review_texts),
                    )  # fmt: skip
                    for r in catalog.restaurants
                ],
            )
            self._db.executemany("INSERT INTO sold_out VALUES (?, ?, ?)", sorted(catalog.sold_out))
            self._db.execute("COMMIT")

    def _query(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(row) for row in self._db.execute(sql, params)]

    # -- restaurants ------------------------------------------------------------
    def restaurant(self, slug: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM restaurants WHERE slug = ?", (slug,))
        if not rows:
            return None
        row = rows[0]
        row["dishes"] = json.loads(row["dishes"])
        row["review_texts"] = json.loads(row["review_texts"])
        return row

    def featured(self, n: int) -> list[dict[str, Any]]:
        return self._query("SELECT * FROM restaurants ORDER BY rating DESC, name LIMIT ?", (n,))

    def cuisines(self) -> list[str]:
        return [
            r["cuisine"]
            for r in self._query("SELECT DISTINCT cuisine FROM restaurants ORDER BY cuisine")
        ]

    def search(self, query: str) -> list[dict[str, Any]]:
        """Restaurants matching any query word, best first: a word in the name
        counts 2, in the cuisine or neighbourhood 1, the full name 10 more."""
        words = set(_WORD.findall(query.lower()))
        if not words:
            return []
        phrase = " ".join(_WORD.findall(query.lower()))
        scored = []
        for r in self._query("SELECT * FROM restaurants"):
            name = _WORD.findall(r["name"].lower())
            other = set(_WORD.findall(f"{r['cuisine']} {r['neighbourhood']}".lower()))
            score = 2 * len(words & set(name)) + len(words & other)
            score += 10 * (phrase == " ".join(name))
            if score:
                scored.append((-score, -r["rating"], r["name"], r))
        return [r for *_, r in sorted(scored, key=lambda s: s[:3])]

    # -- availability -------------------------------------------------------------
    def is_available(
        self, restaurant: dict[str, Any], day: dt.date, minutes: int, party: int
    ) -> bool:
        if party > restaurant["max_party"] or minutes not in TIMES or day not in dates():
            return False
        return not self._query(
            "SELECT 1 FROM sold_out WHERE restaurant_id = ? AND date = ? AND time = ?",
            (restaurant["id"], day.isoformat(), minutes),
        )

    # -- reservations ---------------------------------------------------------------
    def book(
        self, restaurant_id: int, day: dt.date, minutes: int, party: int, guest: dict[str, str]
    ) -> str:
        """Insert a reservation; returns its confirmation code (deterministic:
        the same bookings in the same order give the same codes)."""
        with self._lock:
            seq = self._db.execute("SELECT COUNT(*) FROM reservations").fetchone()[0] + 1
            key = f"{seq}|{restaurant_id}|{day}|{minutes}|{party}|{sorted(guest.items())}"
            code = f"TT{seq:02d}" + hashlib.sha256(key.encode()).hexdigest()[:6].upper()
            self._db.execute(
                "INSERT INTO reservations (code, restaurant_id, date, time, party, first_name,"
                " last_name, phone, email, requests, newsletter) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    code,
                    restaurant_id,
                    day.isoformat(),
                    minutes,
                    party,
                    guest["first_name"],
                    guest["last_name"],
                    guest["phone"],
                    guest["email"],
                    guest.get("requests", ""),
                    int(bool(guest.get("newsletter"))),
                ),  # fmt: skip
            )
        return code

    def reservation(self, code: str) -> dict[str, Any] | None:
        rows = self._query(
            "SELECT v.*, r.name AS restaurant, r.slug FROM reservations v"
            " JOIN restaurants r ON r.id = v.restaurant_id WHERE code = ?",
            (code,),
        )
        return rows[0] if rows else None

    def reservations(self) -> list[dict[str, Any]]:
        return self._query("SELECT * FROM reservations ORDER BY id")

    def count_reservations(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM reservations").fetchone()[0]

    def subscribe(self, email: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO subscriptions VALUES (?)", (email,))

    def reset(self) -> None:
        """Forget every reservation and subscription: the state of a new episode."""
        with self._lock:
            self._db.executescript(
                "BEGIN; DELETE FROM reservations; DELETE FROM subscriptions;"
                " DELETE FROM sqlite_sequence WHERE name = 'reservations'; COMMIT;"
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()
