"""A Streamable-HTTP MCP server that misbehaves on ``tools/call``, for the tool tests:
``python tests/helpers/hostile_http.py KIND`` listens on 127.0.0.1 (a free port) and prints
``http://127.0.0.1:PORT/mcp`` on its first line of stdout.

It is not written with the ``mcp`` SDK on purpose: the SDK's server cannot be made to break the
protocol. It speaks just enough of it (JSON replies, no session id, no GET stream) for the
SDK's client to connect and list one tool; the tool's call is where each kind misbehaves:

- ``sleepy``: ``wait`` is never answered (the connection stays open);
- ``flood``: ``dump`` is answered with a valid result of 10 MB of text (``application/json``);
- ``flood-sse``: the same 10 MB as one server-sent event (``text/event-stream``);
- ``endless``: ``dump`` is answered with a body that never ends (as fast as it goes);
- ``crash``: ``boom`` gets the headers of a reply and part of its body, then the process exits;
- ``badjson``: ``garble`` is answered with ``200 application/json`` that is not JSON-RPC;
- ``big`` (not hostile): ``dump`` returns 600,000 characters, a reply under the app's bound.

Only the standard library: it starts fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TOOLS = {"sleepy": "wait", "flood": "dump", "flood-sse": "dump", "endless": "dump", "crash": "boom",
         "badjson": "garble", "big": "dump"}  # fmt: skip
FLOOD_CHARS = 10_000_000
BIG_CHARS = 600_000


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    kind = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _reply(self, status: int, body: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def do_GET(self) -> None:  # noqa: N802 - no stream of the server's own
        self._reply(405)

    def do_DELETE(self) -> None:  # noqa: N802
        self._reply(405)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            msg = json.loads(self.rfile.read(length))
        except ValueError:
            self._reply(400)
            return
        if not isinstance(msg, dict) or "id" not in msg:  # a notification
            self._reply(202)
            return
        method, rid = msg.get("method"), msg["id"]
        if method == "tools/call":
            self._misbehave(rid)
            return
        if method == "initialize":
            params = msg.get("params") or {}
            result: Any = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                           "capabilities": {"tools": {}},
                           "serverInfo": {"name": f"hostile-{self.kind}", "version": "1"}}  # fmt: skip
        elif method == "tools/list":
            result = {"tools": [{"name": TOOLS[self.kind], "description": f"Misbehave ({self.kind}).",
                                 "inputSchema": {"type": "object", "properties": {}}}]}  # fmt: skip
        elif method == "ping":
            result = {}
        else:
            error = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}}
            self._reply(200, json.dumps(error).encode())
            return
        self._reply(200, json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode())

    def _misbehave(self, rid: Any) -> None:
        kind = self.kind
        if kind == "sleepy":
            while True:
                time.sleep(3600)
        text = "0123456789" * ((BIG_CHARS if kind == "big" else FLOOD_CHARS) // 10)
        flood = {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}}
        if kind in ("flood", "big"):
            self._reply(200, json.dumps(flood).encode())
        elif kind == "flood-sse":
            self._reply(200, b"event: message\ndata: " + json.dumps(flood).encode() + b"\n\n", "text/event-stream")
        elif kind == "endless":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            head = json.dumps({"jsonrpc": "2.0", "id": rid}).encode()[:-1] + b', "result": {"content": [{"text": "'
            frame = _chunk(b"0123456789" * 6553)
            try:
                self.wfile.write(_chunk(head))
                while True:
                    self.wfile.write(frame)
            except OSError:
                return
        elif kind == "crash":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"jsonrpc": "2.0", "id": ')
            self.wfile.flush()
            print("crash: exiting mid-call", file=sys.stderr, flush=True)
            os._exit(3)
        elif kind == "badjson":
            self._reply(200, b"this is not JSON-RPC {{{")


@contextmanager
def serve(kind: str) -> Iterator[str]:
    """Runs a server of ``kind`` for the ``with`` block; its URL."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), kind], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield url
    finally:
        proc.kill()
        proc.wait(10)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def main() -> None:
    kind = sys.argv[1]
    if kind not in TOOLS:
        raise SystemExit(f"unknown kind {kind}")
    _Handler.kind = kind
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    print(f"http://127.0.0.1:{server.server_address[1]}/mcp", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
