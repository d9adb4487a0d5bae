"""The MCP client side against real SDK servers (tests/helpers/mcp_servers.py): tools listed,
calls answered, a file reader confined to its folder, and every hostile server failing one
call within its timeout while the host stays usable — over stdio, and over Streamable HTTP
(tests/helpers/hostile_http.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.tools.config import ServerConfig
from app.tools.guard import ORIGINAL_KEY, _too_long, bounded_line
from app.tools.host import GUARD_CHARS, ToolError, ToolHost
from app.tools.http_client import MAX_REPLY_BYTES
from app.tools.loop import result_message
from tests.helpers import hostile_http
from tests.helpers.mcp_servers import HERE, command

TIMEOUT = 3.0


@pytest.fixture
def host() -> Iterator[ToolHost]:
    h = ToolHost()
    yield h
    h.shutdown()


def _server(kind: str, *args: str) -> ServerConfig:
    return ServerConfig.stdio(kind, command(kind, *args))


def test_calculator_lists_and_answers(host: ToolHost) -> None:
    calc = _server("calc")
    tools = host.start(calc).result(30)
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"add", "multiply", "delete_file"}
    assert by_name["add"].input_schema["properties"]["a"]["type"] == "integer"
    assert host.status(calc.id).state == "running"
    assert host.call(calc, "add", {"a": 2, "b": 40}, TIMEOUT).result(30).text == "42"
    assert host.call(calc, "multiply", {"a": 6, "b": 7}, TIMEOUT).result(30).text == "42"


def test_file_reader_is_confined_to_its_folder(host: ToolHost, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "note.txt").write_text("the shared note", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("outside", encoding="utf-8")
    files = _server("files", str(shared))
    assert host.call(files, "read_file", {"path": "note.txt"}, TIMEOUT).result(30).text == "the shared note"
    outside = host.call(files, "read_file", {"path": "../secret.txt"}, TIMEOUT).result(30)
    assert outside.is_error and "outside the shared folder" in outside.text
    assert outside.text != "outside"


@pytest.mark.parametrize(
    ("kind", "tool", "says"),
    [
        ("sleepy", "wait", f"did not answer the call to wait within {TIMEOUT:g} s"),
        ("crash", "boom", "failed the call to boom"),
        ("badjson", "garble", "wrote something that is not JSON-RPC"),
    ],
)
def test_hostile_server_fails_one_call_within_its_timeout(host: ToolHost, kind: str, tool: str, says: str) -> None:
    server = _server(kind)
    host.start(server).result(30)
    t0 = time.monotonic()
    with pytest.raises(ToolError, match=says):
        host.call(server, tool, {}, TIMEOUT).result(30)
    assert time.monotonic() - t0 < TIMEOUT + 1.0
    assert host.status(server.id).state == "failed"
    # the host is still usable: another server answers, and this one starts again
    calc = _server("calc")
    assert host.call(calc, "add", {"a": 1, "b": 1}, TIMEOUT).result(30).text == "2"
    assert host.start(server).result(30)


def test_crash_keeps_the_servers_stderr(host: ToolHost) -> None:
    server = _server("crash")
    with pytest.raises(ToolError):
        host.call(server, "boom", {}, TIMEOUT).result(30)
    assert "exiting mid-call" in host.status(server.id).stderr


def test_flood_is_cut_in_the_guards_process_and_its_length_said(host: ToolHost) -> None:
    server = _server("flood")
    result = host.call(server, "dump", {}, 60).result(90)
    assert len(result.text) == GUARD_CHARS and result.total_chars == 10_000_000
    assert result.text == ("0123456789" * 1_000_000)[:GUARD_CHARS]
    told = result_message(result.text, result.is_error, 1000, result.total_chars)
    assert told.endswith("[… cut: the tool returned 10,000,000 characters; the first 1,000 are shown]")


def test_guard_leaves_small_lines_alone_and_refuses_a_huge_one() -> None:
    small = b'{"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "42"}]}}\n'
    assert bounded_line(small, 1000) == small
    huge = b'{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "' + b"x" * 9000 + b'"}]}}\n'
    cut = json.loads(bounded_line(huge, 1000))
    assert cut["id"] == 7 and cut["result"]["content"][0]["text"] == "x" * 1000
    assert cut["result"]["_meta"][ORIGINAL_KEY] == 9000
    error = json.loads(_too_long(huge[:4096], 100 << 20))
    assert error["id"] == 7 and "over the" in error["error"]["message"]


def test_a_command_that_does_not_exist_fails_to_start(host: ToolHost) -> None:
    missing = ServerConfig.stdio("nothing", "/nonexistent/mcp-server --flag")
    with pytest.raises(ToolError):
        host.start(missing).result(30)
    assert host.status(missing.id).state == "failed"


def test_streamable_http_server_on_this_machine(host: ToolHost) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(HERE), "http", str(port)], stderr=subprocess.DEVNULL)
    try:
        server = ServerConfig.http("calc over http", f"http://127.0.0.1:{port}/mcp")
        deadline = time.monotonic() + 30
        while True:
            try:
                host.start(server, timeout_s=5).result(30)
                break
            except ToolError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        assert host.call(server, "add", {"a": 20, "b": 22}, TIMEOUT).result(30).text == "42"
    finally:
        proc.terminate()
        proc.wait(10)


def test_only_local_urls_are_accepted() -> None:
    with pytest.raises(ValueError):
        ServerConfig.http("remote", "http://example.com/mcp")
    assert ServerConfig.http("local", "http://localhost:8000/mcp").kind == "http"


OVER = f"answered the call to dump with over {MAX_REPLY_BYTES:,} bytes, the most the app reads"


@pytest.mark.parametrize(
    ("kind", "tool", "says"),
    [
        ("sleepy", "wait", f"did not answer the call to wait within {TIMEOUT:g} s"),
        ("crash", "boom", "failed the call to boom"),
        ("badjson", "garble", "wrote something that is not JSON-RPC during the call to garble"),
        ("flood", "dump", OVER),  # 10 MB of JSON
        ("endless", "dump", OVER),  # a reply that never ends: unbounded, ~400 MB a second
        ("flood-sse", "dump", "byte limit"),  # the SDK's own limit per event
    ],
)
def test_hostile_http_server_fails_one_call_within_its_timeout(host: ToolHost, kind: str, tool: str,
                                                                 says: str) -> None:
    with hostile_http.serve(kind) as url:
        server = ServerConfig.http(kind, url)
        assert [t.name for t in host.start(server, timeout_s=10).result(30)] == [tool]
        t0 = time.monotonic()
        with pytest.raises(ToolError, match=says):
            host.call(server, tool, {}, TIMEOUT).result(30)
        took = time.monotonic() - t0
        assert took < TIMEOUT + 1.0
        if kind != "sleepy":  # it says so at once, not at the timeout
            assert took < TIMEOUT / 2, took
        assert host.status(server.id).state == "failed"
        # the host is still usable: another server answers, and this one starts again
        calc = _server("calc")
        assert host.call(calc, "add", {"a": 1, "b": 1}, TIMEOUT).result(30).text == "2"
        if kind != "crash":  # (its process has exited)
            assert host.start(server, timeout_s=10).result(30)


def test_a_long_http_result_under_the_bound_is_cut_like_a_stdio_one(host: ToolHost) -> None:
    with hostile_http.serve("big") as url:
        server = ServerConfig.http("big", url)
        result = host.call(server, "dump", {}, 30).result(60)
    assert len(result.text) == GUARD_CHARS and result.total_chars == hostile_http.BIG_CHARS
    assert result.text == ("0123456789" * (hostile_http.BIG_CHARS // 10))[:GUARD_CHARS]
    assert host.status(server.id).state == "running"
