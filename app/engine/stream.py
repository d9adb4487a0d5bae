"""``Stream``: the events of one streaming request (``Model.infer``, ``continue_session``,
``read_ahead``), iterated or delivered to a callback on the scheduler thread."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from app.engine.errors import EngineError
from app.engine.events import Done, Error, Event, Stats

log = logging.getLogger(__name__)


class Stream:
    """Events of one streaming request; iterate it, or pass ``on_event`` to get a callback.

    With a callback, events are delivered on the scheduler thread (keep the callback short;
    the GUI bridge re-emits them as queued signals).
    """

    def __init__(self, ref: int, canceller: Callable[[int], None], on_event: Callable[[Event], None] | None = None) -> None:
        self.ref = ref
        self._cancel = canceller
        self._callback = on_event
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._finished = threading.Event()
        self._stats: Stats | None = None
        self._error: Error | None = None

    def _push(self, event: Event) -> None:
        if isinstance(event, Done):
            self._stats = event.stats
        elif isinstance(event, Error):
            self._error = event
        if self._callback is not None:
            try:
                self._callback(event)
            except Exception:
                log.exception("stream callback raised")
        else:
            self._events.put(event)
        if isinstance(event, Done | Error):
            self._finished.set()

    def __iter__(self) -> Iterator[Event]:
        if self._callback is not None:
            raise TypeError("this stream delivers its events to a callback")
        while True:
            event = self._events.get()
            yield event
            if isinstance(event, Done | Error):
                return

    def cancel(self) -> None:
        self._cancel(self.ref)

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def result(self, timeout: float | None = None) -> Stats:
        """Block until the request ends; returns its Stats or raises its EngineError."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"stream {self.ref} did not finish within {timeout} s")
        if self._error is not None:
            raise EngineError(self._error.reason, code=self._error.code)
        assert self._stats is not None
        return self._stats


def refused_read(stream: Stream, fut: Future[Any]) -> None:
    """A ``read_ahead`` admission refused on the scheduler thread ends its stream with ``Error``."""
    exc = fut.exception()
    if exc is None:
        return
    if not isinstance(exc, EngineError):
        log.error("a read-ahead admission failed", exc_info=exc)
    stream._push(Error(str(exc), exc.code if isinstance(exc, EngineError) else "bug"))
