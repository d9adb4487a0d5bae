"""The server's connections under attack: deadlines, a cap, a bounded log, errors as JSON.

uvicorn's HTTP/1.1 protocol (``H11Protocol``) has a keep-alive timeout but no deadline for a
request's headers or body, no cap on connections, and answers a request it cannot parse with
plain text. ``GuardedH11Protocol`` adds:

- **deadlines**: a connection must finish its request's headers within ``HEADER_TIMEOUT_S``
  (from when it opened, or from the end of its previous response) and its body within
  ``BODY_TIMEOUT_S`` of the headers, else it is closed. A reply being generated is not
  affected (the client has sent everything by then).
- **a minimum rate for bodies**: once its headers are in, a request's body must arrive at
  ``MIN_BODY_RATE`` bytes a second on average, counted from ``BODY_GRACE_S`` on (not while
  the server itself has paused reading), else the connection is closed.
- **a cap**: at most ``max_connections`` open at once (256, and always 128 below the
  process's file limit). When a new connection would pass it, the connection that has been
  sending its request (headers or body) the longest is closed to make room — one with
  nothing waiting in its socket first (``FIONREAD``: a request the loop has not read yet
  is not a slow one); if none is sending, the new one is closed. So half-sent requests can hold at most the cap, never every file
  descriptor: new clients keep being served.
- **a cap per peer**: one address has at most ``PEER_SENDING`` connections still sending
  their request; when a new one passes it, that address's connections that have been
  sending the longest are closed ``PEER_TRIM_S`` later (once the requests already waiting
  in their sockets have been read).
- **a reader that stops reading**: a reply whose socket buffer has stayed full for
  ``WRITE_STALL_S`` with nothing of it read meanwhile (the client reads none of its stream;
  a slow reader gets another period each time it reads) is closed; the route sees the
  disconnect and cancels the generation, which frees its sequence for the requests that
  wait (llama-server keeps such a slot until the reply ends).
- **a bounded log**: ``RateLimit`` lets each logger of the server write at most
  ``LOG_BURST`` records per ``LOG_WINDOW_S``, then one line saying how many it dropped.
- **JSON errors**: a request that is not valid HTTP (``Content-Length: abc``) gets a 400 in
  OpenAI's error shape instead of uvicorn's plain text.

NOTE: before, 1,100 half-sent headers at ``ulimit -n 1024`` locked every other client out
for as long as they were held (accept() failed with EMFILE), and the log grew by 408 MB of
``Too many open files`` tracebacks. And 260 connections sending a body a byte a second
locked everyone out until the 60 s body deadline: the cap closed only connections still
sending headers, and counted connections it had already closed (they leave the set a loop
turn later), so it refused every new client ("394 connections are open").
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import resource
import struct
import termios
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.server.errors import error_body

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 60.0
MIN_BODY_RATE = 1024
"""Bytes a second a body must average (a slow link sends a hundred times that)."""
BODY_GRACE_S = 3.0
"""How long a body may take before its rate is checked (a client waiting for ``100 Continue``)."""
RATE_CHECK_S = 1.0
WRITE_STALL_S = 20.0
"""How long a reply's socket buffer may stay full before the connection is closed."""
PEER_SENDING = 32
"""Connections one address may have still sending their request."""
PEER_TRIM_S = 0.25
"""How soon after one address passes ``PEER_SENDING`` its slowest connections are closed."""
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
        self._rate: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None
        self._unsent = 0
        self.opened_at = self.waiting_since = time.monotonic()
        """``waiting_since``: when the request now being sent began (its first byte was due)."""
        self._body_since = 0.0
        self._body_bytes = 0
        super().connection_made(transport)
        self.peer = self.client[0] if self.client else None
        self._make_room()
        self._arm(HEADER_TIMEOUT_S)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._stop_rate()
        self._stop_stall()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        """The socket buffer is full: the client has this long to read some of it."""
        super().pause_writing()
        if self._stall is None:
            self._unsent = self._unsent_bytes()
            self._stall = self.loop.call_later(WRITE_STALL_S, self._on_stall)

    def resume_writing(self) -> None:
        self._stop_stall()
        super().resume_writing()

    def _unsent_bytes(self) -> int:
        """Bytes of the reply not yet taken by the client: this process's buffer and the
        kernel's send queue (``TIOCOUTQ``; the kernel's buffer holds megabytes, so a slow
        reader shows its progress there long before this process's buffer moves)."""
        unsent = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        try:
            queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
        except (AttributeError, OSError, ValueError):
            return unsent
        return unsent + int(struct.unpack("i", queued)[0])

    def _stop_stall(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _on_stall(self) -> None:
        self._stall = None
        if self.transport.is_closing():
            return
        unsent = self._unsent_bytes()
        if unsent < self._unsent:  # it reads, slowly: another period
            self._unsent = unsent
            self._stall = self.loop.call_later(WRITE_STALL_S, self._on_stall)
            return
        self.logger.info("closing a connection whose client read nothing for %.0f s", WRITE_STALL_S)
        self.transport.abort()  # the route hears http.disconnect and cancels its generation

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.SEND_BODY:
            self._body_bytes += len(data)
        super().data_received(data)

    def handle_events(self) -> None:
        waiting = self.conn.their_state is h11.IDLE
        super().handle_events()
        state = self.conn.their_state
        if waiting and state is h11.SEND_BODY:  # headers in: now the body's deadline and rate
            self._arm(BODY_TIMEOUT_S)
            self._body_since, self._body_bytes = time.monotonic(), 0
            self._stop_rate()
            self._rate = self.loop.call_later(BODY_GRACE_S, self._check_rate)
        elif state is not h11.IDLE and state is not h11.SEND_BODY:  # the whole request is in
            self._disarm()
            self._stop_rate()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.waiting_since = time.monotonic()
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

    def _stop_rate(self) -> None:
        if self._rate is not None:
            self._rate.cancel()
            self._rate = None

    def _check_rate(self) -> None:
        """While the body comes in: close the connection once it averages below the rate."""
        self._rate = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        now = time.monotonic()
        if self.flow.read_paused:  # the server is not reading: the client cannot send, start again
            self._body_since, self._body_bytes = now, 0
        elif self._body_bytes < MIN_BODY_RATE * (now - self._body_since):
            self.transport.abort()
            return
        self._rate = self.loop.call_later(RATE_CHECK_S, self._check_rate)

    def _make_room(self) -> None:
        """Close what the caps say must go for this new connection (module docstring)."""
        others = [c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol)
                  and not c.transport.is_closing()]  # closed ones leave the set a loop turn later
        sending = [c for c in others if c.is_sending_request]
        if self.peer is not None and sum(c.peer == self.peer for c in sending) >= PEER_SENDING:
            # Judged a moment later, when the requests already in the sockets have been read
            # (NOTE: judged here, in a burst from one address a client's request could be cut
            # before the loop had read it; it is not sending any more by then).
            self.loop.call_later(PEER_TRIM_S, self._trim_peer)
        if len(others) < self.max_connections:
            return
        if not sending:
            self.logger.warning("connection refused: %d connections are open", len(others))
            self.transport.abort()
            return
        _close(_slowest(sending), others, sending)

    def _trim_peer(self) -> None:
        """Close this address's connections that have been sending their request the longest,
        down to ``PEER_SENDING``."""
        mine = [c for c in self.connections if isinstance(c, GuardedH11Protocol) and c.peer == self.peer
                and not c.transport.is_closing() and c.is_sending_request]
        while len(mine) > PEER_SENDING:
            victim = _slowest(mine)
            victim.transport.abort()
            mine.remove(victim)

    def unread_bytes(self) -> int:
        """Bytes the client sent that the kernel holds and this process has not read yet."""
        sock = self.transport.get_extra_info("socket")
        try:
            return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0])
        except (AttributeError, OSError, ValueError):
            return 0


def _slowest(among: list[GuardedH11Protocol]) -> GuardedH11Protocol:
    """The connection of ``among`` that has been sending its request the longest — among those
    with nothing waiting to be read, if any: one whose request sits in the socket (the loop has
    not read it yet) is not slow. NOTE: in a burst of connections from one address, a client's
    whole request could be cut before the loop had read it."""
    idle = [c for c in among if not c.unread_bytes()]
    return min(idle or among, key=lambda c: c.waiting_since)


def _close(victim: GuardedH11Protocol, others: list[GuardedH11Protocol], sending: list[GuardedH11Protocol]) -> None:
    victim.transport.abort()
    others.remove(victim)
    sending.remove(victim)


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
