"""HTML of the booking site "TableTime": plain server-rendered pages and forms.

No JavaScript: every control is a link or a form, so a page is fully drawn
when its load event fires and the browser driver needs no waits for scripts.
A dialog (cookie consent, promotion, sign-in prompt) makes the rest of the
page ``inert``, as a modal does for assistive technology: behind it nothing
can be clicked, and the env's observation does not list it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from envs.opentable.catalog import (
    MAX_PARTY,
    TIMES,
    date_label,
    dates,
    party_label,
    price_label,
    time_label,
)

SITE_NAME = "TableTime"

_CSS = """
body{font-family:sans-serif;margin:0;color:#222;font-size:15px}
header{display:flex;gap:16px;align-items:center;padding:8px 24px;background:#b3261e}
header a{color:#fff;text-decoration:none} header .logo{font-weight:bold;font-size:20px}
main{max-width:760px;margin:0 auto;padding:8px 24px}
h1{font-size:24px;margin:10px 0} h2{font-size:18px;margin:14px 0 6px} p{margin:6px 0}
form.inline{display:flex;gap:8px;flex-wrap:wrap;align-items:end}
label{display:block;font-size:13px;color:#555}
input,select,textarea{font-size:15px;padding:4px}
.result{padding:6px 0;border-bottom:1px solid #ddd}
.slots{display:flex;gap:8px;flex-wrap:wrap;margin:8px 0}
.slot{background:#b3261e;color:#fff;padding:6px 12px;border-radius:4px;text-decoration:none}
button.slot[disabled]{background:#ccc;color:#666;border:0}
.field{margin:6px 0} .error{color:#b3261e}
.backdrop{position:fixed;inset:0;background:rgba(0,0,0,.45);display:flex;align-items:center;justify-content:center}
.dialog{background:#fff;padding:16px 24px;border-radius:8px;max-width:420px}
footer{max-width:760px;margin:16px auto;padding:0 24px;font-size:13px}
"""


def page(title: str, body: str, *, dialog: str | None = None) -> str:
    inert = " inert" if dialog else ""
    overlay = (
        f'<div class="backdrop"><div class="dialog" role="dialog" aria-modal="true">{dialog}</div></div>'
        if dialog
        else ""
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)} | {SITE_NAME}</title>"
        # An empty icon: Chromium would otherwise request /favicon.ico.
        f"<link rel='icon' href='data:,'><style>{_CSS}</style></head><body>"
        f'<div id="site"{inert}><header><a class="logo" href="/">{SITE_NAME}</a>'
        '<a href="/signin">Sign in</a></header>'
        f"<main>{body}</main>"
        '<footer><a href="/help">Help</a> | <a href="/about">About</a></footer></div>'
        f"{overlay}</body></html>"
    )


def _form(
    action: str, fields: Mapping[str, Any], inner: str, method: str = "post", cls: str = ""
) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{escape(k)}" value="{escape(str(v))}">'
        for k, v in fields.items()
    )
    klass = f' class="{cls}"' if cls else ""
    # novalidate: the server validates; a browser-blocked submit would leave a
    # click that should navigate doing nothing, which the driver cannot tell apart.
    return f'<form method="{method}" action="{escape(action)}"{klass} novalidate>{hidden}{inner}</form>'


def _textbox(name: str, label: str, value: str = "", kind: str = "text", error: str = "") -> str:
    message = f'<div class="error">{escape(error)}</div>' if error else ""
    return (
        f'<div class="field"><label for="{name}">{escape(label)}</label>'
        f'<input id="{name}" name="{name}" type="{kind}" value="{escape(value)}">{message}</div>'
    )


def _select(name: str, label: str, options: Sequence[tuple[str, str]], selected: str) -> str:
    opts = "".join(
        f'<option value="{escape(v)}"{" selected" if v == selected else ""}>{escape(text)}</option>'
        for v, text in options
    )
    return f'<div><label for="{name}">{escape(label)}</label><select id="{name}" name="{name}">{opts}</select></div>'


# -- dialogs ----------------------------------------------------------------------
def consent_dialog(next_path: str) -> str:
    buttons = (
        '<button name="choice" value="accept">Accept all cookies</button> '
        '<button name="choice" value="reject">Reject non-essential</button>'
    )
    return (
        "<h2>We value your privacy</h2><p>We use cookies to remember your choices and to "
        "measure our traffic.</p>" + _form("/consent", {"next": next_path}, buttons)
    )


def promo_dialog(next_path: str) -> str:
    inner = (
        _textbox("promo_email", "Email for DinerPass offers", kind="email")
        + '<button name="choice" value="subscribe">Join DinerPass</button> '
        '<button name="choice" value="dismiss">No thanks</button>'
    )
    return (
        "<h2>Get $20 off your next dinner</h2><p>Join DinerPass for members-only tables "
        "and offers.</p>" + _form("/promo", {"next": next_path}, inner)
    )


def signin_dialog(next_path: str, error: str = "") -> str:
    message = f'<p class="error">{escape(error)}</p>' if error else ""
    signin = _form(
        "/signin",
        {"next": next_path},
        _textbox("signin_email", "Email", kind="email")
        + _textbox("signin_password", "Password", kind="password")
        + "<button>Sign in</button>",
    )
    guest = _form("/guest", {"next": next_path}, "<button>Continue as guest</button>")
    return (
        f"<h2>Sign in or continue as guest</h2>{message}<p>Sign in to earn dining points, "
        f"or book as a guest.</p>{signin}<p>or</p>{guest}"
    )


# -- pages ------------------------------------------------------------------------
def home(featured: Sequence[Mapping[str, Any]], cuisines: Sequence[str]) -> str:
    search = _form(
        "/search",
        {},
        '<div><label for="q">Restaurant, cuisine or neighbourhood</label>'
        '<input id="q" name="q" type="search" value=""></div><button>Search</button>',
        method="get",
        cls="inline",
    )
    cuisine_links = " | ".join(
        f'<a href="/search?{urlencode({"q": c})}">{escape(c)}</a>' for c in cuisines
    )
    items = "".join(
        f'<li><a href="/r/{r["slug"]}">{escape(r["name"])}</a> {escape(r["cuisine"])} | '
        f"{escape(r['neighbourhood'])}</li>"
        for r in featured
    )
    return (
        f"<h1>Find your table for any occasion</h1>{search}"
        f"<h2>Browse by cuisine</h2><p>{cuisine_links}</p>"
        f"<h2>Top rated this week</h2><ul>{items}</ul>"
    )


def results(query: str, rows: Sequence[Mapping[str, Any]], page_no: int, pages: int) -> str:
    search = _form(
        "/search",
        {},
        '<div><label for="q">Restaurant, cuisine or neighbourhood</label>'
        f'<input id="q" name="q" type="search" value="{escape(query)}"></div>'
        "<button>Search</button>",
        method="get",
        cls="inline",
    )
    if not rows:
        listing = f"<p>No restaurants match '{escape(query)}'. Try a name or a cuisine.</p>"
    else:
        listing = f"<p>Page {page_no} of {pages}</p>" + "".join(
            f'<div class="result"><a href="/r/{r["slug"]}">{escape(r["name"])}</a>'
            f"<p>{escape(r['cuisine'])} | {escape(r['neighbourhood'])} | {price_label(r['price'])}"
            f" | {r['rating']} stars ({r['reviews']} reviews)</p></div>"
            for r in rows
        )
    nav = []
    if page_no > 1:
        nav.append(
            f'<a href="/search?{urlencode({"q": query, "page": page_no - 1})}">Previous page</a>'
        )
    if page_no < pages:
        nav.append(
            f'<a href="/search?{urlencode({"q": query, "page": page_no + 1})}">Next page</a>'
        )
    return f"<h1>Search results</h1>{search}{listing}<p>{' '.join(nav)}</p>"


def restaurant(r: Mapping[str, Any], day: dt.date, minutes: int, party: int,
               slots: Sequence[tuple[int, bool]]) -> str:  # fmt: skip
    pickers = _form(
        f"/r/{r['slug']}",
        {},
        _select(
            "party",
            "Party size",
            [(str(n), party_label(n)) for n in range(1, MAX_PARTY + 1)],
            str(party),
        )
        + _select(
            "date", "Date", [(d.isoformat(), date_label(d)) for d in dates()], day.isoformat()
        )
        + _select("time", "Time", [(str(t), time_label(t)) for t in TIMES], str(minutes))
        + "<button>Find a table</button>",
        method="get",
        cls="inline",
    )
    when = f"{party_label(party)} on {date_label(day)}"
    if party > r["max_party"]:
        availability = (
            f"<p>{escape(r['name'])} takes online bookings for up to {r['max_party']} people. "
            "For larger parties, please call the restaurant.</p>"
        )
    else:
        free = dict(slots).get(minutes)
        if free:
            status = f"Available times for {when}:"
        elif any(ok for _, ok in slots):
            status = f"{time_label(minutes)} is sold out for {when}. Other times nearby:"
        else:
            status = (
                f"No tables within an hour of {time_label(minutes)} for {when}. Try another date."
            )
        buttons = "".join(
            f'<a class="slot" href="/book?{urlencode({"r": r["slug"], "date": day.isoformat(), "time": t, "party": party})}">{time_label(t)}</a>'
            if ok
            else f'<button class="slot" disabled>{time_label(t)} sold out</button>'
            for t, ok in slots
        )
        availability = f'<p>{escape(status)}</p><div class="slots">{buttons}</div>'
    dishes = "".join(f"<li>{escape(d)}</li>" for d in r["dishes"])
    reviews = "".join(f"<li>{escape(who)}: {escape(text)}</li>" for who, text in r["review_texts"])
    return (
        f"<h1>{escape(r['name'])}</h1>"
        f"<p>{escape(r['cuisine'])} | {escape(r['neighbourhood'])} | {price_label(r['price'])} | "
        f"{r['rating']} stars ({r['reviews']} reviews)</p><p>{escape(r['address'])}</p>"
        f"<h2>Make a reservation</h2>{pickers}{availability}"
        f"<h2>About</h2><p>{escape(r['description'])}</p>"
        f"<h2>Popular dishes</h2><ul>{dishes}</ul><h2>Reviews</h2><ul>{reviews}</ul>"
    )


def booking(r: Mapping[str, Any], day: dt.date, minutes: int, party: int,
            values: Mapping[str, str], errors: Mapping[str, str]) -> str:  # fmt: skip
    summary = f"{r['name']} | {date_label(day)} | {time_label(minutes)} | {party_label(party)}"
    checked = " checked" if values.get("newsletter") else ""
    inner = (
        _textbox(
            "first_name",
            "First name",
            values.get("first_name", ""),
            error=errors.get("first_name", ""),
        )
        + _textbox(
            "last_name", "Last name", values.get("last_name", ""), error=errors.get("last_name", "")
        )
        + _textbox("phone", "Phone number", values.get("phone", ""), "tel", errors.get("phone", ""))
        + _textbox("email", "Email", values.get("email", ""), "email", errors.get("email", ""))
        + '<div class="field"><label for="requests">Special requests (optional)</label>'
        f'<textarea id="requests" name="requests" rows="2">{escape(values.get("requests", ""))}</textarea></div>'
        f'<div class="field"><input id="newsletter" name="newsletter" type="checkbox" value="1"{checked}>'
        '<label for="newsletter" style="display:inline">Send me TableTime news</label></div>'
        "<button>Complete reservation</button>"
    )
    form = _form(
        "/book", {"r": r["slug"], "date": day.isoformat(), "time": minutes, "party": party}, inner
    )
    back = f"/r/{r['slug']}?{urlencode({'party': party, 'date': day.isoformat(), 'time': minutes})}"
    return (
        f"<h1>Complete your reservation</h1><p>{escape(summary)}</p>"
        f'<p><a href="{escape(back)}">Change date or time</a></p>'
        f"<p>Booking as a guest. We hold this table for 5 minutes.</p>{form}"
    )


def unavailable(r: Mapping[str, Any], message: str) -> str:
    return (
        f"<h1>That time is not available</h1><p>{escape(message)}</p>"
        f'<p><a href="/r/{r["slug"]}">Back to {escape(r["name"])}</a></p>'
    )


def confirmation(v: Mapping[str, Any]) -> str:
    day = dt.date.fromisoformat(v["date"])
    return (
        "<h1>Your table is booked</h1>"
        f"<p>Confirmation number {escape(v['code'])}</p>"
        f"<p>{escape(v['restaurant'])} | {date_label(day)} | {time_label(v['time'])} | "
        f"{party_label(v['party'])}</p>"
        f"<p>Guest: {escape(v['first_name'])} {escape(v['last_name'])} | {escape(v['phone'])} | "
        f"{escape(v['email'])}</p>"
        '<p><a href="/">Back to home</a></p>'
    )


def signin_page(error: str = "") -> str:
    return "<h1>Sign in</h1>" + signin_dialog("/", error)


def text_page(title: str, paragraphs: Sequence[str]) -> str:
    return f"<h1>{escape(title)}</h1>" + "".join(f"<p>{escape(p)}</p>" for p in paragraphs)
