"""The server's connection guard (``app.server.connections``) on a real uvicorn socket: a
request's headers and body have deadlines, the connection cap makes room by closing the
oldest half-sent request, and the log of a flood stays short.

The deadlines are shortened for the test; the model provider is a stub (no model is needed
to answer ``/health``).
"""

from __future__ import annotations

import logging
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.server import connections
from app.server.app import create_app
from app.server.config import ServerConfig
from app.server.connections import RateLimit
from app.server.thread import ServerThread
from tests.helpers.fake_engine import FakeEngine

HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerThread]:
    monkeypatch.setattr(connections, "HEADER_TIMEOUT_S", 0.5)
    monkeypatch.setattr(connections, "BODY_TIMEOUT_S", 0.5)
    config = ServerConfig(port=0, max_connections=8)
    thread = ServerThread(create_app(FakeEngine(tmp_path), config), config)
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


def _connect(server: ServerThread) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def _closed_by_server(s: socket.socket) -> bool:
    """Waits (up to the socket's 30 s timeout) for the server to close the connection."""
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True


def _health(server: ServerThread) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=30) as resp:
        return int(resp.status)


def test_headers_that_never_end_are_cut_at_the_deadline(server: ServerThread) -> None:
    with _connect(server) as s:
        s.sendall(HEAD)  # no blank line: the headers never end
        assert _closed_by_server(s)


def test_a_body_that_trickles_is_cut_at_the_deadline(server: ServerThread) -> None:
    with _connect(server) as s:
        s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{")
        assert _closed_by_server(s)


def test_a_kept_alive_connection_gets_the_deadline_again(server: ServerThread) -> None:
    with _connect(server) as s:
        s.sendall(HEAD + b"\r\n")
        reply = b""
        while b'{"status":"ok"}' not in reply:
            reply += s.recv(65536)
        assert reply.startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /health HTTP/1.1\r\n")  # the next request, half sent
        assert _closed_by_server(s)


def _still_open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(65536) != b""  # data: open (nothing is sent to a half-sent request, though)
    except BlockingIOError:
        return True  # nothing to read and not closed
    except ConnectionResetError:
        return False
    finally:
        s.setblocking(True)


def test_the_cap_closes_the_oldest_half_sent_request_to_serve_a_new_client(
    server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the cap may close a connection here: with the 0.5 s header deadline a loaded
    # machine could close the oldest one before the ninth client came, and the test would
    # pass without the cap. The server accepts in connection order, so the ninth is the ninth.
    monkeypatch.setattr(connections, "HEADER_TIMEOUT_S", 60.0)
    held = [_connect(server) for _ in range(8)]
    try:
        for s in held:
            s.sendall(HEAD)
        assert _health(server) == 200  # a ninth client: the oldest half-sent one made room
        assert _closed_by_server(held[0])
        assert all(_still_open(s) for s in held[1:])  # the oldest only
    finally:
        for s in held:
            s.close()


def test_a_flood_of_log_records_is_cut_to_a_burst_per_window(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.flood")
    limit = RateLimit(burst=5, window_s=3600)
    logger.addFilter(limit)
    try:
        with caplog.at_level(logging.WARNING, logger="test.flood"):
            for i in range(10_000):
                logger.warning("accept failed %d", i)
        assert len([r for r in caplog.records if r.name == "test.flood"]) == 5
    finally:
        logger.removeFilter(limit)
