"""Writes wait for a prefill (``CacheStore.hold_writes``).

While an engine says a request waits for its first token, a queued save is written only
once that token is out (at most ``WRITE_HOLD_MAX_S`` later), and a fresh one
``WRITE_GRACE_S`` after it was queued, so the next turn of a client that sends it right
after a reply finds the writer still waiting. On two cores the writer thread otherwise takes
a core from llama.cpp's prefill threads (B8: the turns whose previous save was still being
written were the ones 10–30 ms above the floor). ``HEARTH_LATENCY_OFF=write_hold`` switches
it off (docs/latency.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from app import latency

WRITE_GRACE_S = 0.05
"""A save waits this long after it was queued before it is written."""
WRITE_HOLD_MAX_S = 1.0
"""The longest a hold keeps one save waiting: a stream of new requests never stops the
writer (a long prefill takes seconds; one save's write costs it a few ms)."""


class WriteHold:
    """Who holds the writer now (any thread), and the writer thread's wait before each job."""

    def __init__(self, closed: Callable[[], bool]) -> None:
        self.holders: set[object] = set()
        self.cond = threading.Condition()
        self._closed = closed

    def hold(self, holder: object, on: bool) -> None:
        if on and latency.off("write_hold"):
            return
        with self.cond:
            if on:
                self.holders.add(holder)
            else:
                self.holders.discard(holder)
                if not self.holders:
                    self.cond.notify_all()

    def wait(self, submitted_at: float, hurry: Callable[[], bool]) -> None:
        """Writer thread, before a job: the grace after its submission, then while held."""
        grace = submitted_at + WRITE_GRACE_S - time.monotonic()
        if grace > 0 and not hurry():
            time.sleep(grace)
        deadline = time.monotonic() + WRITE_HOLD_MAX_S
        with self.cond:
            while self.holders and not hurry() and not self._closed():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self.cond.wait(min(remaining, 0.05))  # hurry() is polled
