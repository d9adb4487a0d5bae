"""``ServerThread``: uvicorn on its own thread and event loop.

The listening socket is bound on the caller's thread, so "address in use" is an ``OSError``
right there (and port 0 gives a free port, read back from the socket). The GUI starts one of
these and never waits on HTTP: ``start`` returns once uvicorn is accepting, ``stop`` asks it
to finish its open responses and joins the thread.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import uvicorn

from app.server.config import ServerConfig
from app.server.connections import limit_logs, protocol_class

log = logging.getLogger(__name__)

ACCEPT_BATCH = 64
"""The listen backlog, which is also how many connections asyncio accepts in one go before
the connection cap (``app.server.connections``) sees them. NOTE: with uvicorn's 2,048, a
flood of 1,100 connections was accepted at once and ran out of file descriptors at
``ulimit -n 1024`` before the cap could close any."""


class ServerThread:
    def __init__(self, app: Any, config: ServerConfig, *, log_level: str = "warning") -> None:
        self.config = config
        self._app = app
        self._log_level = log_level
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._error: BaseException | None = None
        self.port = config.port

    @property
    def base_url(self) -> str:
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"http://{host}:{self.port}/v1"

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 15.0) -> None:
        family = socket.AF_INET6 if ":" in self.config.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.config.host, self.config.port))
        except OSError:
            sock.close()
            raise
        sock.listen(ACCEPT_BATCH)
        self._socket = sock
        self.port = int(sock.getsockname()[1])
        limit_logs()
        uv_config = uvicorn.Config(
            self._app, log_level=self._log_level, access_log=False, lifespan="off",
            timeout_graceful_shutdown=5, ws="none", timeout_keep_alive=5, backlog=ACCEPT_BATCH,
            http=protocol_class(self.config.max_connections),  # deadlines, cap, JSON 400s
        )
        self._server = uvicorn.Server(uv_config)
        self._thread = threading.Thread(target=self._run, name="hearth-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the server stopped while starting: {self._error!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start within {timeout} s")
            time.sleep(0.01)

    def _run(self) -> None:
        assert self._server is not None and self._socket is not None
        try:
            self._server.run(sockets=[self._socket])
        except BaseException as exc:  # noqa: BLE001 — SystemExit from uvicorn included; start() reports it
            self._error = exc
            log.exception("the HTTP server failed")

    def stop(self, timeout: float = 10.0) -> None:
        """Idempotent. Open streams end (their requests are cancelled) and the port is freed."""
        state = getattr(getattr(self._app, "state", None), "hearth", None)
        if state is not None:
            state.stop_all()  # replies end now instead of holding the shutdown for their length
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive() and self._server is not None:
                self._server.force_exit = True
                self._thread.join(timeout)
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._thread = None
