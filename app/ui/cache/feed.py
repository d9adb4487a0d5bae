"""Carries the store's change notifications to the GUI thread, coalesced.

``CacheStore.subscribe`` calls back on whichever thread made the change (often the writer
thread). The callback only appends to a buffer and, the first time, emits a queued signal;
on the GUI thread a 100 ms single-shot timer then hands the whole batch to
``CacheRowState.apply`` — so a burst of saves or an eviction sweep costs one model update.
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, QTimer, Signal

from app.cache.contents.rows import Row
from app.cache.store import CacheStore
from app.ui.state.row_state import CacheRowState

log = logging.getLogger(__name__)

BATCH_MS = 100


class CacheFeed(QObject):
    """Subscribes to a store and keeps a ``CacheRowState`` in step with it."""

    changes_arrived = Signal()  # emitted from any thread; queued to the GUI thread
    rows_changed = Signal(int)  # after a batch was applied: how many notifications it held

    def __init__(self, store: CacheStore, state: CacheRowState, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._store = store
        self._state = state
        self._lock = threading.Lock()
        self._buffer: list[tuple[str, Row | bytes]] = []
        self._scheduled = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(BATCH_MS)
        self._timer.timeout.connect(self.flush)
        self.changes_arrived.connect(self._on_changes_arrived)
        self._unsubscribe = store.subscribe(self._on_store_change)
        # NOTE: a deleted feed must never be called back from the writer thread.
        self.destroyed.connect(self._unsubscribe)
        self.reload()

    def reload(self) -> None:
        """Read every row afresh (at start, or on demand)."""
        with self._lock:
            self._buffer.clear()
        # NOTE: only published rows: an in-flight save that ends up rejected is never
        # announced as removed, so listing it would leave a ghost row.
        self._state.reset(r for r in self._store.rows() if r.status == "available")
        self.rows_changed.emit(len(self._state))

    def close(self) -> None:
        """Stop listening to the store. Idempotent."""
        self._unsubscribe()
        self._timer.stop()

    # -- any thread ---------------------------------------------------------------------------

    def _on_store_change(self, kind: str, obj: Row | bytes) -> None:
        with self._lock:
            self._buffer.append((kind, obj))
            if self._scheduled:
                return
            self._scheduled = True
        self.changes_arrived.emit()

    # -- GUI thread ---------------------------------------------------------------------------

    def _on_changes_arrived(self) -> None:
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        """Apply everything buffered so far (the timer calls this; tests may too)."""
        with self._lock:
            batch, self._buffer = self._buffer, []
            self._scheduled = False
        if batch:
            self._state.apply(batch)
            self.rows_changed.emit(len(batch))
