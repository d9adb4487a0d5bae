"""The request log and the live requests: what the app's "Local server" panel shows.

Records are frozen and replaced whole on every change (they cross from the server's thread
to the GUI's). Listeners are called on the server's thread and must be quick: the GUI's
adapter only re-emits them as queued Qt signals.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from app.listeners import Listeners

RequestState = Literal["running", "done", "cancelled", "error"]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    id: str
    endpoint: str
    model: str
    client: str
    started_at: float
    """Wall-clock seconds (``time.time()``)."""
    stream: bool = False
    state: RequestState = "running"
    status: int = 200
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    """Speculative decoding: draft tokens pushed for the reply, and those the model kept."""
    ttft_ms: float | None = None
    duration_ms: float | None = None
    error: str | None = None


Listener = Callable[[RequestRecord], None]


class Activity:
    """Live requests by id, plus the last ``capacity`` finished ones (newest last)."""

    def __init__(self, capacity: int = 200) -> None:
        self._live: OrderedDict[str, RequestRecord] = OrderedDict()
        self._done: deque[RequestRecord] = deque(maxlen=capacity)
        self._listeners: Listeners[RequestRecord] = Listeners()
        self._lock = threading.Lock()
        self._t0: dict[str, float] = {}

    def start(self, record: RequestRecord) -> RequestRecord:
        with self._lock:
            self._live[record.id] = record
            self._t0[record.id] = time.perf_counter()
        self._notify(record)
        return record

    def update(self, request_id: str, **changes: Any) -> None:
        with self._lock:
            record = self._live.get(request_id)
            if record is None:
                return
            record = self._live[request_id] = dataclasses.replace(record, **changes)
        self._notify(record)

    def finish(self, request_id: str, state: RequestState, **changes: Any) -> None:
        with self._lock:
            record = self._live.pop(request_id, None)
            t0 = self._t0.pop(request_id, None)
            if record is None:
                return
            elapsed = (time.perf_counter() - t0) * 1000 if t0 is not None else None
            record = dataclasses.replace(record, state=state, duration_ms=elapsed, **changes)
            self._done.append(record)
        self._notify(record)

    def live(self) -> tuple[RequestRecord, ...]:
        with self._lock:
            return tuple(self._live.values())

    def recent(self) -> tuple[RequestRecord, ...]:
        with self._lock:
            return tuple(self._done)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return self._listeners.subscribe(listener)

    def _notify(self, record: RequestRecord) -> None:
        self._listeners.notify(record)
