"""The server's connection guard (``app.server.connections``) on a real uvicorn socket: a
request's headers and body have deadlines, the connection cap makes room by closing the
oldest half-sent request, and the log of a flood stays short.

The deadlines are shortened for the test; the model provider is a stub (no model is needed
to answer ``/health``).
"""

from __future__ import annotations

import logging
import socket
import time
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


# --------------------------------------------------------------------------- slow bodies (issue 51)

BODY_HEAD = (b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n{")


def test_a_body_below_the_minimum_rate_is_cut_long_before_the_deadline(
    server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte every 0.2 s: cut once the grace is over, not at the body deadline (60 s here)."""
    monkeypatch.setattr(connections, "BODY_TIMEOUT_S", 60.0)
    monkeypatch.setattr(connections, "BODY_GRACE_S", 0.5)
    monkeypatch.setattr(connections, "RATE_CHECK_S", 0.1)
    with _connect(server) as s:
        s.sendall(BODY_HEAD)
        t0 = time.monotonic()
        closed = False
        while not closed and time.monotonic() - t0 < 30:
            try:
                s.sendall(b" ")
            except OSError:
                closed = True
                break
            time.sleep(0.2)
            closed = not _still_open(s)
        assert closed and time.monotonic() - t0 < 30  # a deadline well below 60 s, not a timing check


def test_a_body_at_a_modest_rate_is_read_whole(server: ServerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    """4 KiB a second for ~1.5 s (above the 1 KiB/s minimum): the request is answered."""
    monkeypatch.setattr(connections, "BODY_TIMEOUT_S", 60.0)
    monkeypatch.setattr(connections, "BODY_GRACE_S", 0.5)
    monkeypatch.setattr(connections, "RATE_CHECK_S", 0.1)
    body = b"x" * 6144  # not JSON: the route reads it all, then answers 400
    with _connect(server) as s:
        s.sendall(BODY_HEAD.replace(b"100000", str(len(body)).encode())[:-1])
        for i in range(0, len(body), 512):
            s.sendall(body[i:i + 512])
            time.sleep(0.125)
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = s.recv(65536)
            assert chunk, "closed before answering"
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 400"), reply[:200]


def test_the_cap_closes_the_oldest_slow_body_to_serve_a_new_client(
    server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight connections (the cap) sending bodies: a ninth client is served, the oldest body
    sender goes. Before, the cap closed only connections still sending headers, so every
    new client was refused until the body deadline."""
    monkeypatch.setattr(connections, "BODY_TIMEOUT_S", 60.0)
    monkeypatch.setattr(connections, "BODY_GRACE_S", 60.0)  # only the cap may close one here
    held = []
    try:
        for _ in range(8):
            s = _connect(server)
            s.sendall(BODY_HEAD)
            held.append(s)
            time.sleep(0.05)  # in order: the first is the oldest
        assert _health(server) == 200
        assert _closed_by_server(held[0])
        assert all(_still_open(s) for s in held[1:])
    finally:
        for s in held:
            s.close()


def test_one_address_holds_at_most_its_share_of_half_sent_requests(
    server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "BODY_TIMEOUT_S", 60.0)
    monkeypatch.setattr(connections, "BODY_GRACE_S", 60.0)
    monkeypatch.setattr(connections, "PEER_SENDING", 3)
    held = []
    try:
        for _ in range(5):
            s = _connect(server)
            s.sendall(BODY_HEAD)
            held.append(s)
            time.sleep(0.05)
        assert _closed_by_server(held[0]) and _closed_by_server(held[1])
        assert all(_still_open(s) for s in held[2:])
        assert _health(server) == 200
    finally:
        for s in held:
            s.close()


# --------------------------------------------------------------------------- a client that never reads


@pytest.mark.parametrize("slowly", [False, True], ids=["never reads", "reads slowly, then stops"])
def test_a_reply_nobody_reads_is_closed_and_the_route_hears_it(monkeypatch: pytest.MonkeyPatch,
                                                                slowly: bool) -> None:
    """A stream whose client reads nothing: once the socket buffer has stayed full for
    ``WRITE_STALL_S`` with nothing read, the connection is closed and the route gets
    ``http.disconnect`` (the chat route then cancels its generation and frees the sequence).
    Before, such a client held its slot until the reply ended, as in llama-server."""
    import threading

    monkeypatch.setattr(connections, "WRITE_STALL_S", 0.5)
    heard = threading.Event()

    async def endless(scope: dict[str, object], receive: object, send: object) -> None:
        import asyncio

        assert callable(receive) and callable(send)
        if scope["type"] != "http":
            return

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            heard.set()

        watcher = asyncio.create_task(watch())
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        chunk = b"x" * 65536
        try:
            while not heard.is_set():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except OSError:
            pass  # uvicorn's ClientDisconnected once the connection is gone
        await watcher

    config = ServerConfig(port=0, max_connections=8)
    thread = ServerThread(endless, config)
    thread.start()
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect(("127.0.0.1", thread.port))
        with s:
            s.sendall(b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            if slowly:  # 4 KiB every 0.1 s for 3 s, six stall periods: a slow reader is not cut
                t0 = time.monotonic()
                while time.monotonic() - t0 < 3:
                    assert s.recv(4096)
                    time.sleep(0.1)
                assert not heard.is_set(), "a client that reads, slowly, was cut"
            assert heard.wait(30), "the route never heard that its client was gone"  # a deadline
        assert _health(thread) == 200
    finally:
        thread.stop()
