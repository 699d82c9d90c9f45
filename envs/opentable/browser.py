"""Chromium driven by Playwright: the page as numbered text, and the web actions.

The system Chromium is launched (``/usr/bin/chromium``; Playwright never
downloads a browser here), one per :class:`Browser`, with a fresh context per
episode so cookies and dialogs start over. Every request that is not to the
site's own origin is aborted by a context route and recorded in
:attr:`Browser.blocked`; host names do not resolve at all
(``--host-resolver-rules``), which also covers the browser's own requests that
context routes never see.

The observation is a simplified DOM computed in the page by :data:`_OBSERVE`:
interactive elements (links, buttons, text fields, drop-downs, check boxes) get
ids ``[1]``, ``[2]``, ... in document order, stored in a ``data-aq`` attribute
so actions find them again; other text becomes plain lines; an ``inert``
subtree (the page behind a modal dialog) is left out. Only what lies in the
viewport is shown, with a note when there is more above or below, so
``SCROLL`` matters as it does for a person.

Playwright's sync API binds its driver, and every object made through it, to the
thread that started it, while agentq calls an env from whichever thread runs a
lane or a phase (agentq/parallel.py). So one thread of this process, the
*driver thread*, makes every Playwright call: all browsers share its driver
(started on first use, stopped at exit), and :class:`Browser`'s methods hand
their work to it. Browser steps are short beside a model call, so lanes that
share the thread lose little.
"""

from __future__ import annotations

import atexit
import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from playwright.sync_api import Browser as PlaywrightBrowser
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, Playwright, Route, sync_playwright

from envs.opentable.actions import match_option

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)
MAX_LISTED_OPTIONS = 12

T = TypeVar("T")


class _DriverThread:
    """The one thread that runs this process's Playwright calls (see the module docstring)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the driver thread (directly when already on it); its exception is raised here."""
        if threading.current_thread() is self._thread:
            return fn(*args)
        with self._lock:
            if self._thread is None:  # a daemon: it never keeps the interpreter alive
                self._thread = threading.Thread(target=self._serve, name="playwright driver", daemon=True)
                self._thread.start()
        done: Future = Future()
        self._jobs.put((done, fn, args))
        return done.result()

    def _serve(self) -> None:
        while True:
            done, fn, args = self._jobs.get()
            try:
                done.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001  (raised again in the caller's thread)
                done.set_exception(e)


_DRIVER_THREAD = _DriverThread()
_driver: Playwright | None = None


def on_driver_thread(method: Callable[..., T]) -> Callable[..., T]:
    """Run a :class:`Browser` method on the driver thread."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        return _DRIVER_THREAD.run(functools.partial(method, *args, **kwargs))

    return wrapper


def _playwright() -> Playwright:
    global _driver
    if _driver is None:
        _driver = sync_playwright().start()
        atexit.register(_DRIVER_THREAD.run, _stop_driver)
    return _driver


def _stop_driver() -> None:
    global _driver
    if _driver is not None:
        try:
            _driver.stop()
        except Exception:  # the interpreter is exiting; the driver may be gone already
            pass
        _driver = None


class BrowserCrashed(RuntimeError):
    """The browser process or the page's renderer died."""


@dataclass(frozen=True)
class Element:
    id: int
    role: str  # link, button, textbox, combobox, checkbox
    name: str
    where: int  # -1 above the viewport, 0 in it, 1 below
    disabled: bool = False
    navigates: bool = False  # a link, or a button that submits a form
    in_form: bool = False
    options: tuple[tuple[str, str], ...] = ()  # (value, label) of a drop-down


@dataclass(frozen=True)
class View:
    """The page as the agent sees it, plus the elements its ids refer to."""

    title: str
    path: str  # path and query: the site's origin (a random port) is never shown
    dialog: bool
    lines: tuple[str, ...]  # in-viewport lines, ids included
    more_above: bool
    more_below: bool
    elements: dict[int, Element] = field(repr=False)

    def text(self) -> str:
        head = f"Page: {self.title} ({self.path})"
        if self.dialog:
            head += "\nA dialog is open; the page behind it cannot be used until it is closed."
        body = list(self.lines)
        if self.more_above:
            body.insert(0, "(more above: SCROLL [UP])")
        if self.more_below:
            body.append("(more below: SCROLL [DOWN])")
        return "\n".join([head, *body])


# Runs in the page: numbers the interactive elements and renders the page as
# lines [text, where], one per block (an inline link stays in its sentence);
# returns them with the elements' descriptions.
_OBSERVE = r"""
() => {
  const vh = window.innerHeight;
  const lines = [], elements = [];
  let next = 1, buffer = [], rects = [];
  for (const el of document.querySelectorAll('[data-aq]')) el.removeAttribute('data-aq');
  const clean = s => (s || '').replace(/\s+/g, ' ').trim();
  const where = r => (r.bottom <= 0 ? -1 : r.top >= vh ? 1 : 0);
  const role = el => {
    const tag = el.tagName;
    if (tag === 'A') return el.hasAttribute('href') ? 'link' : null;
    if (tag === 'BUTTON') return 'button';
    if (tag === 'SELECT') return 'combobox';
    if (tag === 'TEXTAREA') return 'textbox';
    if (tag !== 'INPUT') return null;
    if (el.type === 'hidden') return null;
    if (el.type === 'checkbox' || el.type === 'radio') return el.type;
    if (['submit', 'button', 'reset', 'image'].includes(el.type)) return 'button';
    return 'textbox';
  };
  const nameOf = el => {
    const aria = el.getAttribute('aria-label');
    if (aria) return clean(aria);
    if (el.labels && el.labels.length) return clean(el.labels[0].innerText);
    if (el.tagName === 'INPUT' && ['submit', 'button'].includes(el.type)) return clean(el.value);
    return clean(el.innerText || el.getAttribute('placeholder') || el.title || '');
  };
  const flush = heading => {
    const text = clean(buffer.join(' '));
    if (text) {
      const w = rects.some(r => where(r) === 0) ? 0 : rects.every(r => where(r) < 0) ? -1 : 1;
      lines.push([heading ? `heading "${text}"` : text, w]);
    }
    buffer = []; rects = [];
  };
  const describe = (el, r) => {
    const id = next++;
    el.setAttribute('data-aq', String(id));
    const name = nameOf(el);
    const rect = el.getBoundingClientRect();
    const info = {id, role: r, name, where: where(rect),
                  disabled: !!el.disabled, in_form: !!el.form, navigates: false, options: []};
    elements.push(info);
    rects.push(rect);
    let line = `[${id}] ${r} "${name}"`;
    if (r === 'link') info.navigates = !/^(#|javascript:)/.test(el.getAttribute('href'));
    if (r === 'button') info.navigates = !!el.form && (el.type || 'submit') === 'submit';
    if (r === 'textbox') {
      const value = el.type === 'password' ? '*'.repeat(el.value.length) : el.value;
      line += ` value="${clean(value)}"`;
    }
    if (r === 'checkbox' || r === 'radio') line += el.checked ? ' (checked)' : ' (not checked)';
    if (r === 'combobox') {
      info.options = [...el.options].map(o => [o.value, clean(o.text)]);
      const chosen = el.selectedIndex >= 0 ? clean(el.options[el.selectedIndex].text) : '';
      line += ` selected="${chosen}"`;
      const labels = info.options.map(o => o[1]);
      line += labels.length <= MAX_OPTIONS
        ? ` options: ${labels.join(' | ')}`
        : ` options: ${labels.length} from ${labels[0]} to ${labels[labels.length - 1]}`;
    }
    if (info.disabled) line += ' (disabled)';
    return line;
  };
  const walk = node => {
    for (const child of node.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) {
        if (child.textContent.trim()) {
          const range = document.createRange();
          range.selectNodeContents(child);
          buffer.push(child.textContent);
          rects.push(range.getBoundingClientRect());
        }
        continue;
      }
      if (child.nodeType !== Node.ELEMENT_NODE) continue;
      const el = child;
      if (['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE'].includes(el.tagName)) continue;
      if (el.hasAttribute('inert') || el.getAttribute('aria-hidden') === 'true') continue;
      if (!el.checkVisibility({visibilityProperty: true})) continue;
      if (el.tagName === 'LABEL' && el.htmlFor) continue;  // it names its field
      const r = role(el);
      if (r) { buffer.push(describe(el, r)); continue; }  // stays on its block's line
      const block = !getComputedStyle(el).display.startsWith('inline');
      if (block) flush(false);
      walk(el);
      if (block) flush(/^H[1-6]$/.test(el.tagName));
    }
  };
  walk(document.body);
  flush(false);
  const dialog = !!document.querySelector('[role=dialog][aria-modal=true]');
  return {title: document.title, path: location.pathname + location.search, dialog, lines, elements};
}
""".replace("MAX_OPTIONS", str(MAX_LISTED_OPTIONS))

# Submits the element's form, with the element as the submitter when it is a
# submit button (so its name=value is sent, as a click would).
_SUBMIT = """
el => {
  const submitter = (el.tagName === 'BUTTON' || el.tagName === 'INPUT') && el.type === 'submit' ? el : undefined;
  el.form.requestSubmit(submitter);
}
"""

_SCROLL = """
direction => {
  const before = window.scrollY;
  window.scrollBy(0, direction * Math.round(window.innerHeight * 0.8));
  return window.scrollY !== before;
}
"""


class Browser:
    """One Chromium process; one context and page per episode.

    Args:
        origin: ``http://127.0.0.1:<port>``, the only origin requests may go to.
        executable: the Chromium binary.
        headless: run without a window.
        viewport: (width, height) of the page in CSS pixels.
        timeout: seconds any one browser operation may take.
    """

    def __init__(
        self,
        origin: str,
        *,
        executable: str = CHROMIUM,
        headless: bool = True,
        viewport: tuple[int, int] = (1280, 720),
        timeout: float = 10.0,
    ) -> None:
        self.origin = origin.rstrip("/")
        self.executable = executable
        self.headless = headless
        self.viewport = viewport
        self.timeout_ms = timeout * 1000
        self.blocked: list[str] = []  # every request aborted for leaving the site
        self._browser: PlaywrightBrowser | None = None
        self._page: Page | None = None
        self._crashed = False
        self.view: View | None = None

    # -- lifecycle --------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return _DRIVER_THREAD.run(lambda: self._browser is not None and self._browser.is_connected())

    def on_page(self, fn: Callable[[Page], T]) -> T:
        """``fn(page)`` with the episode's page, on the driver thread (Playwright objects work
        only there): for a caller that drives the page itself (tests); the env acts through
        the methods below."""
        return _DRIVER_THREAD.run(fn, self._page)

    @on_driver_thread
    def launch(self) -> None:
        self.close()
        self._browser = _playwright().chromium.launch(
            executable_path=self.executable, headless=self.headless, args=list(CHROMIUM_ARGS)
        )

    @on_driver_thread
    def new_episode(self, path: str = "/") -> View:
        """A fresh context (no cookies) at ``path``; relaunches a dead browser."""
        if not self.alive:
            self.launch()
        self._close_page()
        assert self._browser is not None
        width, height = self.viewport
        context = self._browser.new_context(
            viewport={"width": width, "height": height},
            locale="en-US",
            timezone_id="America/Los_Angeles",
            service_workers="block",
        )
        context.set_default_timeout(self.timeout_ms)
        context.route("**/*", self._route)
        self._page = context.new_page()
        self._crashed = False
        self._page.on("crash", self._on_crash)
        self._page.on("dialog", lambda dialog: dialog.dismiss())
        self._guard(lambda: self._page.goto(self.origin + path, wait_until="load"))
        return self.observe()

    @on_driver_thread
    def close(self) -> None:
        self._close_page()
        if self._browser is not None:
            try:
                self._browser.close()
            except PlaywrightError:  # already dead
                pass
        self._browser = None

    def _close_page(self) -> None:
        if self._page is not None:
            try:
                self._page.context.close()
            except PlaywrightError:
                pass
        self._page = None
        self.view = None

    def _route(self, route: Route) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" == self.origin:
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort("blockedbyclient")

    def _on_crash(self, _page: Page) -> None:
        self._crashed = True

    def _guard(self, operation: Callable[[], Any]) -> Any:
        """Run a Playwright call; a dead browser or renderer becomes BrowserCrashed,
        any other Playwright error propagates (the caller reports it as feedback)."""
        try:
            return operation()
        except PlaywrightError as e:
            if self._crashed or not self.alive or self._page is None or self._page.is_closed():
                raise BrowserCrashed(f"the browser stopped responding ({_first_line(e)})") from e
            raise

    # -- observation ------------------------------------------------------------------
    @on_driver_thread
    def observe(self) -> View:
        page = self._page
        if page is None:
            raise BrowserCrashed("no page is open")
        for attempt in range(3):
            try:
                raw = self._guard(lambda: page.evaluate(_OBSERVE))
                break
            except BrowserCrashed:
                raise
            except PlaywrightError:
                # A navigation replaced the document mid-evaluation: wait for it.
                if attempt == 2:
                    raise
                self._guard(lambda: page.wait_for_load_state("load"))
        elements = {
            e["id"]: Element(
                id=e["id"],
                role=e["role"],
                name=e["name"],
                where=e["where"],
                disabled=e["disabled"],
                navigates=e["navigates"],
                in_form=e["in_form"],
                options=tuple((v, label) for v, label in e["options"]),
            )  # fmt: skip
            for e in raw["elements"]
        }
        self.view = View(
            title=raw["title"],
            path=raw["path"],
            dialog=raw["dialog"],
            lines=tuple(text for text, where in raw["lines"] if where == 0),
            more_above=any(where < 0 for _, where in raw["lines"]),
            more_below=any(where > 0 for _, where in raw["lines"]),
            elements=elements,
        )
        return self.view

    # -- actions: each returns a one-line feedback; the caller observes afterwards ------
    @on_driver_thread
    def click(self, element: Element) -> str:
        if element.role == "combobox":
            return f"[{element.id}] is a drop-down: choose an option with TYPE [{element.id}] [option]."
        self._interact(lambda loc: loc.click(), element)
        if element.role in ("checkbox", "radio"):
            return f"Toggled {element.role} [{element.id}] {element.name!r}."
        if element.role == "textbox":
            return f"Focused textbox [{element.id}] {element.name!r}; use TYPE [{element.id}] [text] to fill it."
        return f"Clicked {element.role} [{element.id}] {element.name!r}."

    @on_driver_thread
    def type(self, element: Element, text: str) -> str:
        if element.role == "textbox":
            self._interact(lambda loc: loc.fill(text), element)
            return f"Typed {text!r} into [{element.id}] {element.name!r}."
        if element.role == "combobox":
            value = match_option(text, element.options)
            if value is None:
                labels = ", ".join(label for _, label in element.options[:MAX_LISTED_OPTIONS])
                return f"No option of [{element.id}] {element.name!r} matches {text!r}. Options: {labels}."
            if isinstance(value, list):
                return f"{text!r} matches several options of [{element.id}]: {', '.join(value)}. Be more specific."
            self._interact(lambda loc: loc.select_option(value), element)
            label = dict(element.options)[value]
            return f"Selected {label!r} in [{element.id}] {element.name!r}."
        return f"Cannot type into {element.role} [{element.id}] {element.name!r}: only text fields and drop-downs take text."

    @on_driver_thread
    def clear(self, element: Element) -> str:
        if element.role != "textbox":
            return f"Cannot clear {element.role} [{element.id}]: only text fields can be cleared."
        self._interact(lambda loc: loc.fill(""), element)
        return f"Cleared [{element.id}] {element.name!r}."

    @on_driver_thread
    def submit(self, element: Element) -> str:
        if not element.in_form:
            return (
                f"[{element.id}] {element.name!r} is not part of a form; use CLICK [{element.id}]."
            )
        self._interact(lambda loc: loc.evaluate(_SUBMIT), element, navigates=True)
        return f"Submitted the form of [{element.id}] {element.name!r}."

    @on_driver_thread
    def scroll(self, direction: str) -> str:
        assert self._page is not None
        moved = self._guard(lambda: self._page.evaluate(_SCROLL, 1 if direction == "DOWN" else -1))
        if not moved:
            return f"Cannot scroll {direction.lower()}: already at the {'bottom' if direction == 'DOWN' else 'top'}."
        return f"Scrolled {direction.lower()}."

    @on_driver_thread
    def goto(self, url: str) -> str:
        assert self._page is not None
        parts = urlsplit(url)
        if parts.scheme or parts.netloc:
            if f"{parts.scheme}://{parts.netloc}" != self.origin:
                return f"GOTO only opens pages of this site; give a path such as /search?q=sushi, not {url!r}."
            url = parts.path or "/"
            url += f"?{parts.query}" if parts.query else ""
        if not url.startswith("/"):
            url = "/" + url
        self._guard(lambda: self._page.goto(self.origin + url, wait_until="load"))
        return f"Opened {url}."

    def _interact(
        self, operation: Callable, element: Element, navigates: bool | None = None
    ) -> None:
        """Act on the element with id ``element.id``; when the action leads to a
        new page, return once it has loaded."""
        page = self._page
        assert page is not None
        locator = page.locator(f'[data-aq="{element.id}"]')
        if navigates if navigates is not None else element.navigates:

            def act() -> None:
                with page.expect_navigation(wait_until="load"):
                    operation(locator)

            self._guard(act)
        else:
            self._guard(lambda: operation(locator))

    @on_driver_thread
    def screenshot(self, path: str) -> None:
        assert self._page is not None
        self._guard(lambda: self._page.screenshot(path=path))


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
