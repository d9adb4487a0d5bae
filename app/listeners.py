"""``Listeners``: a thread-safe list of callbacks, notified outside the lock.

For plain-Python state owners (the server's request log, the remote-model registry) that
notify observers; a listener that raises is logged and the others still run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class Listeners(Generic[T]):
    def __init__(self) -> None:
        self._items: list[Callable[[T], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: Callable[[T], None]) -> Callable[[], None]:
        """Add ``listener``; returns the function that removes it (idempotent)."""
        with self._lock:
            self._items.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._items:
                    self._items.remove(listener)

        return unsubscribe

    def notify(self, value: T) -> None:
        with self._lock:
            items = list(self._items)
        for listener in items:
            try:
                listener(value)
            except Exception:  # one broken observer must not fail the change it observes
                log.exception("listener %r raised", listener)
