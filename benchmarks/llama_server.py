"""The llama-server peer of B2: llama.cpp's own server with ``-np 4`` parallel slots and
prompt caching, driven by four client threads over its OpenAI-compatible HTTP API."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

from benchmarks.common import N_THREADS


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_server(binary: str, model: str, n_parallel: int = 4, n_ctx_per_slot: int = 2048,
                   extra: Sequence[str] = ()) -> Iterator[str]:  # fmt: skip
    """``extra``: more llama-server flags (B13: ``--cache-ram``)."""
    port = _free_port()
    log = os.environ.get("HEARTH_LLAMA_SERVER_LOG")  # its log appended there (else dropped)
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", str(n_parallel),
         "-c", str(n_ctx_per_slot * n_parallel), "-t", str(N_THREADS), "--temp", "0", *extra],
        stdout=out, stderr=out,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError("llama-server did not become healthy in 120 s")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


def _turn(base: str, messages: list[dict[str, str]], n_new: int) -> tuple[float, str]:
    body = json.dumps({"messages": messages, "max_tokens": n_new, "temperature": 0, "stream": True,
                       "cache_prompt": True}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = None
    parts: list[str] = []
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            delta = json.loads(line[5:])["choices"][0]["delta"].get("content")
            if delta:
                if first is None:
                    first = time.perf_counter() - t0
                parts.append(delta)
    return (first if first is not None else time.perf_counter() - t0) * 1000, "".join(parts)


def llama_server_b2(binary: str, model: str, system: str, questions: list[list[str]], n_turns: int, n_new: int) -> dict[str, Any]:
    with running_server(binary, model) as base:
        ttfts: list[float] = []
        lock = threading.Lock()

        def client(chat: int) -> None:
            history = [{"role": "system", "content": system}]
            for turn in range(n_turns):
                history.append({"role": "user", "content": questions[chat][turn]})
                ttft, reply = _turn(base, history, n_new)
                with lock:
                    ttfts.append(ttft)
                history.append({"role": "assistant", "content": reply})

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(questions))]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "median_ttft_ms": statistics.median(ttfts)}
