"""Which sends wait for the engine to start reading their prompt, without Qt.

``EngineBridge.submit`` (GUI thread) asks for a ``ReadingStarted`` event before it queues a
request to an idle model, and waits on it for at most ``READING_WAIT_S`` (docs/latency.md,
``reading_wait``); the model's bridge thread sets it once the engine starts reading (from the
scheduler's thread, with the core it reads on: ``on_reading``), or once it is clear it will
not (the request refused, or ended before it was read). Each event is set once and forgotten.
"""

from __future__ import annotations

import threading


class ReadingStarted(threading.Event):
    """Set once the engine starts reading a request's prompt, or once it is clear it will not."""

    cpu: int | None = None
    """The core the engine's thread was on as it started reading (None: it did not, or the
    OS does not say)."""


class ReadingWaits:
    """The events of the sends being waited on, by request id; every method, any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._awaited: dict[str, ReadingStarted] = {}

    def expect(self, request_id: str) -> ReadingStarted:
        """The GUI thread, before it queues the request."""
        event = ReadingStarted()
        with self._lock:
            self._awaited[request_id] = event
        return event

    def forget(self, request_id: str) -> None:
        """The wait is over (set, or at its bound): a later ``started`` finds nothing."""
        with self._lock:
            self._awaited.pop(request_id, None)

    def started(self, request_id: str, cpu: int | None = None) -> None:
        """The engine reads the request on ``cpu`` (the scheduler's thread), or will not read
        it (None; the bridge's thread, or the scheduler's as the request ends)."""
        with self._lock:
            event = self._awaited.pop(request_id, None)
        if event is not None:
            event.cpu = cpu
            event.set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._awaited)
