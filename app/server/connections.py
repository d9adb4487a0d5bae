"""The server's connections under attack: deadlines, a cap, a bounded log, errors as JSON.

uvicorn's HTTP/1.1 protocol (``H11Protocol``) has a keep-alive timeout but no deadline for a
request's headers or body, no cap on connections, and answers a request it cannot parse with
plain text. ``GuardedH11Protocol`` adds:

- **deadlines**: a connection must finish its request's headers within ``HEADER_TIMEOUT_S``
  (from when it opened, or from the end of its previous response) and its body within
  ``BODY_TIMEOUT_S`` of the headers, else it is closed. A reply being generated is not
  affected (the client has sent everything by then).
- **a cap**: at most ``max_connections`` open at once (256, and always 128 below the
  process's file limit). When a new connection would pass it, the oldest connection that is
  still sending its headers is closed to make room; if none is, the new one is closed. So
  half-sent headers can hold at most the cap, never every file descriptor: new clients keep
  being served.
- **a bounded log**: ``RateLimit`` lets each logger of the server write at most
  ``LOG_BURST`` records per ``LOG_WINDOW_S``, then one line saying how many it dropped.
- **JSON errors**: a request that is not valid HTTP (``Content-Length: abc``) gets a 400 in
  OpenAI's error shape instead of uvicorn's plain text.

NOTE: before, 1,100 half-sent headers at ``ulimit -n 1024`` locked every other client out
for as long as they were held (accept() failed with EMFILE), and the log grew by 408 MB of
``Too many open files`` tracebacks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.server.errors import error_body

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 256
FD_RESERVE = 128
"""File descriptors kept for everything else the process opens (model, cache, pipes, logs)."""

LOG_BURST = 20
LOG_WINDOW_S = 10.0
SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "asyncio", "app.server")


def connection_cap(wanted: int = MAX_CONNECTIONS) -> int:
    """``wanted``, lowered to stay ``FD_RESERVE`` below the process's file limit."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft - FD_RESERVE))


class GuardedH11Protocol(H11Protocol):
    """``H11Protocol`` with deadlines, a connection cap and JSON 400s (module docstring)."""

    max_connections = MAX_CONNECTIONS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self.opened_at = time.monotonic()
        super().connection_made(transport)
        self._make_room()
        self._arm(HEADER_TIMEOUT_S)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        waiting = self.conn.their_state is h11.IDLE
        super().handle_events()
        state = self.conn.their_state
        if waiting and state is h11.SEND_BODY:  # headers in: now the body's deadline
            self._arm(BODY_TIMEOUT_S)
        elif state is not h11.IDLE and state is not h11.SEND_BODY:  # the whole request is in
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm(HEADER_TIMEOUT_S)  # the next request's headers, on a kept-alive connection

    def send_400_response(self, msg: str) -> None:
        body = json.dumps(error_body(f"The request is not valid HTTP: {msg}", code="invalid_http")).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                      h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()

    # -- deadlines and the cap ------------------------------------------------------------------

    @property
    def is_sending_request(self) -> bool:
        """The client still owes its request's headers or body."""
        return self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and (
            self.cycle is None or self.cycle.response_complete or self.conn.their_state is h11.SEND_BODY
        )

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._on_deadline)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _on_deadline(self) -> None:
        self._deadline = None
        if not self.transport.is_closing() and self.is_sending_request:
            self.transport.abort()

    def _make_room(self) -> None:
        if len(self.connections) <= self.max_connections:
            return
        waiting = [c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol)
                   and c.conn.their_state is h11.IDLE and (c.cycle is None or c.cycle.response_complete)]
        if not waiting:
            self.logger.warning("connection refused: %d connections are open", len(self.connections) - 1)
            self.transport.abort()
            return
        oldest = min(waiting, key=lambda c: c.opened_at)
        oldest.transport.abort()


class RateLimit(logging.Filter):
    """At most ``burst`` records per ``window_s`` through one logger; then one summary line."""

    def __init__(self, burst: int = LOG_BURST, window_s: float = LOG_WINDOW_S) -> None:
        super().__init__()
        self.burst, self.window_s = burst, window_s
        self._start = 0.0
        self._count = 0
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self._start >= self.window_s:
            if self._dropped:
                record.msg = f"[{self._dropped} log messages of the server dropped in {self.window_s:.0f} s] {record.msg}"
            self._start, self._count, self._dropped = now, 0, 0
        self._count += 1
        if self._count > self.burst:
            self._dropped += 1
            return False
        return True


def limit_logs() -> None:
    """Install one ``RateLimit`` on each of the server's loggers (idempotent)."""
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RateLimit) for f in logger.filters):
            logger.addFilter(RateLimit())


def protocol_class(max_connections: int) -> type[Any]:
    """A ``GuardedH11Protocol`` subclass capped at ``max_connections`` (uvicorn's ``http=``)."""
    return type("HearthH11Protocol", (GuardedH11Protocol,), {"max_connections": connection_cap(max_connections)})
