"""Serve the booking site on 127.0.0.1 from a background thread.

One :class:`SiteServer` per environment instance: its own SQLite store and its
own free port, so two envs in one process never see each other's bookings.
The thread is a daemon and :meth:`SiteServer.stop` also runs at interpreter
exit, so a forgotten server never keeps a process alive.
"""

from __future__ import annotations

import atexit
import socket
import threading
import time

import uvicorn

from envs.opentable.catalog import Catalog
from envs.opentable.site import create_app
from envs.opentable.store import Store

HOST = "127.0.0.1"


class SiteServer:
    def __init__(self, catalog: Catalog, db_path: str = ":memory:") -> None:
        self.store = Store(catalog, db_path)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 10.0) -> SiteServer:
        if self.running:
            return self
        # Bind here, not in uvicorn: the port is known before the thread runs,
        # and port 0 gives a free one without a race.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(self.store), log_level="warning", access_log=False, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"opentable-site-{self.port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the booking site did not start on {self.url}")
            time.sleep(0.01)
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=5)
        self._server = self._thread = None
        atexit.unregister(self.stop)

    def close(self) -> None:
        self.stop()
        self.store.close()
