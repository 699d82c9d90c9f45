"""A tiny web UI over :class:`envs.webshop.env.WebShopEnv`, for people to try the tasks.

``python -m envs.webshop.ui --port 8000`` serves on 127.0.0.1 only. Pick a goal,
then click through the shop; every button sends the same text action the agent
would (``search[...]`` / ``click[...]``), and the agent's text observation is
shown beside the page. One session per server (it is a debugging tool); the
standard library's ``http.server`` is enough.
"""

from __future__ import annotations

import argparse
import html
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from envs.webshop.env import WebShopEnv

_STYLE = """
body { font-family: sans-serif; margin: 1em; }
.cols { display: flex; gap: 2em; } .cols > div { flex: 1; }
pre { white-space: pre-wrap; background: #f4f4f4; padding: .5em; }
form.inline { display: inline; } button { margin: 2px; }
"""


class _Session:
    def __init__(self, env: WebShopEnv) -> None:
        self.env = env
        self.lock = threading.Lock()
        self.observation, self.info = env.reset(options={"task_id": env.task_ids("test")[0]})
        self.log: list[str] = []
        self.status = ""

    def reset(self, task_id: int) -> None:
        self.observation, self.info = self.env.reset(options={"task_id": task_id})
        self.log, self.status = [], ""

    def act(self, action: str) -> None:
        self.observation, reward, terminated, truncated, self.info = self.env.step(action)
        self.log.append(action)
        if terminated or truncated:
            self.status = f"Episode over: reward {reward:.3f}, success {self.info['success']}"

    def render(self) -> str:
        esc = html.escape
        env, info = self.env, self.info
        goal = env.engine.goals[info["task_id"]]
        ids = env.task_ids("test")[:200] + env.task_ids("train")[:200]
        options = "".join(
            f'<option value="{i}"{" selected" if i == info["task_id"] else ""}>{i}</option>'
            for i in ids
        )
        controls = []
        if info["has_search_bar"]:
            controls.append(
                '<form method="post" action="/act"><input name="q" size="60">'
                "<button>Search</button></form>"
            )
        for action in info["valid_actions"]:
            controls.append(
                f'<form class="inline" method="post" action="/act"><input type="hidden" name="action" '
                f'value="{esc(action)}"><button>{esc(action[6:-1])}</button></form>'
            )
        return f"""<!doctype html><html><head><meta charset="utf-8"><title>WebShop</title>
<style>{_STYLE}</style></head><body>
<form method="get" action="/">Goal <select name="task_id">{options}</select> <button>Start</button></form>
<p><b>Instruction:</b> {esc(goal.instruction_text)}</p>
<p>Page: <b>{esc(env.snapshot().session.page)}</b>, step {env.snapshot().steps}/{env.max_steps}.
<b>{esc(self.status)}</b></p>
<div class="cols"><div>{"".join(controls)}
<form method="post" action="/act"><input name="action" size="60" placeholder="any text action">
<button>Send</button></form>
<p>Actions so far:</p><pre>{esc(chr(10).join(self.log)) or "none"}</pre></div>
<div><p>What the agent sees:</p><pre>{esc(self.observation.replace(" [SEP] ", chr(10)))}</pre></div></div>
</body></html>"""


def make_server(env: WebShopEnv, port: int = 8000, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """A server for ``env`` (``port=0`` picks a free port); call ``serve_forever``."""
    session = _Session(env)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            url = urllib.parse.urlsplit(self.path)
            if url.path != "/":
                self.send_error(404)
                return
            query = urllib.parse.parse_qs(url.query)
            with session.lock:
                if "task_id" in query:
                    try:
                        session.reset(int(query["task_id"][0]))
                    except ValueError as error:
                        session.status = str(error)
                self._send(session.render())

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/act":
                self.send_error(404)
                return
            length = min(int(self.headers.get("Content-Length") or 0), 1 << 16)
            form = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
            with session.lock:
                # The search box sends its text; the page turns it into search[...].
                if "q" in form:
                    session.act(f"search[{form['q'][0]}]")
                else:
                    session.act(form.get("action", [""])[0])
                self._send(session.render())

        def _send(self, body: str) -> None:
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # quiet in tests
            pass

    return ThreadingHTTPServer((host, port), Handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--data-dir", default=None, help="folder with WebShop's official files")
    parser.add_argument("--seed", type=int, default=0, help="catalogue seed")
    args = parser.parse_args()
    server = make_server(
        WebShopEnv(max_steps=50, data_dir=args.data_dir, seed=args.seed), port=args.port
    )
    print(f"WebShop UI on http://127.0.0.1:{server.server_address[1]}/")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
