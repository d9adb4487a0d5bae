"""Slow request bodies against a server: connections that send complete headers announcing a
100,000-byte body and then one byte a second, each opened again as the server closes it
(used by the server's hostile-request tests and tools/reliability_issue51.py)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n{")


@contextmanager
def slow_bodies(host: str, port: int, n: int = 260) -> Iterator[list[int]]:
    """Hold ``n`` slow bodies while the block runs; yields ``[connections opened so far]``."""
    stop = threading.Event()
    opened = [0]

    def attack() -> None:
        held: list[socket.socket | None] = [None] * n
        while not stop.is_set():
            for i, s in enumerate(held):
                try:
                    if s is None:
                        s = held[i] = socket.create_connection((host, port), timeout=5)
                        s.sendall(HEAD)
                        opened[0] += 1
                    else:
                        s.sendall(b" ")
                except OSError:
                    if s is not None:
                        s.close()
                    held[i] = None
            stop.wait(1.0)
        for s in held:
            if s is not None:
                s.close()

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    try:
        yield opened
    finally:
        stop.set()
        attacker.join(30)
