"""A stand-in for llama.cpp's llama-server, for the benchmarks' peer code: the command line
``benchmarks.llama_server.running_server`` starts (``-m M --host H --port P -np N -c C …``),
``/health``, and ``/completion`` with token ids, streamed the way llama-server 0.3.36's
vendored build streams it (``data: {"content", "tokens", "stop"}`` chunks, the last one with
``timings``). One slot: it holds the last prompt and reply, and ``timings.prompt_n`` counts
what it had to compute (``cache_prompt``), the last prompt token at least, as llama-server does.

Each reply is ``n_predict`` tokens of ``[7]``, one every 5 ms, written to the end even when
the client has gone (as the real server goes on to its next check). It appends one JSON line
per event to ``$FAKE_LLAMA_SERVER_LOG``: ``{"argv": …}`` at start, then per request
``{"prompt_n": …, "abandoned": bool}`` (the client closed before the last chunk).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOG = os.environ.get("FAKE_LLAMA_SERVER_LOG", "")
SLOT = threading.Lock()
held: list[int] = []


def _log(entry: dict[str, Any]) -> None:
    if LOG:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        body = b'{"status": "ok"}' if self.path == "/health" else b"{}"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        global held
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = req["prompt"]
        assert isinstance(prompt, list) and all(isinstance(t, int) for t in prompt), "token ids expected"
        assert req.get("cache_prompt") is True and req.get("stream") is True
        with SLOT:  # one slot: a request waits for the one before it to end
            same = 0
            for a, b in zip(held, prompt, strict=False):
                if a != b:
                    break
                same += 1
            prompt_n = len(prompt) - min(same, len(prompt) - 1)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()  # no length: the stream ends with the connection
            abandoned = False
            reply: list[int] = []
            for i in range(int(req.get("n_predict", 8)) + 1):
                last = i == int(req.get("n_predict", 8))
                chunk: dict[str, Any] = {"index": 0, "content": "" if last else " x",
                                         "tokens": [] if last else [7], "stop": last}  # fmt: skip
                if last:
                    chunk["timings"] = {"cache_n": len(prompt) - prompt_n, "prompt_n": prompt_n}
                else:
                    reply.append(7)
                time.sleep(0.005)
                try:
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                except OSError:
                    abandoned = True
            held = [*prompt, *reply]
            _log({"prompt_n": prompt_n, "abandoned": abandoned})
            self.close_connection = True


def main() -> None:
    argv = sys.argv[1:]
    _log({"argv": argv})
    port = int(argv[argv.index("--port") + 1])
    ThreadingHTTPServer(("127.0.0.1", port), _Handler).serve_forever()


if __name__ == "__main__":
    main()
