"""The dashboard's and the CLI's actions on rows: user pins, evict, delete, move between
tiers, clear. Each runs under the store's ``io_lock`` (they change tier contents) and tells
the database and the subscribers through the journal."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from app.cache.blobs.tiers import TIER_DISK, TIERS
from app.cache.contents.catalog import Catalog
from app.cache.counters import Counters
from app.cache.db.journal import Journal
from app.cache.db.meta import STATUS_AVAILABLE
from app.cache.space.eviction import Evictor


class Management:
    def __init__(
        self, catalog: Catalog, evictor: Evictor, journal: Journal, counters: Counters, io_lock: threading.RLock
    ) -> None:
        self._catalog = catalog
        self._evictor = evictor
        self._journal = journal
        self._counters = counters
        self._io_lock = io_lock

    def set_pinned(self, key: bytes, pinned: bool) -> bool:
        """User pin: quotas never evict or demote the row. Persistent."""
        with self._catalog.lock:
            row = self._catalog.get(key)
            if row is None:
                return False
            row = replace(row, pinned=pinned)
            self._catalog.add(row)
        self._journal.update(key, pinned=pinned)
        self._journal.emit("updated", row)
        return True

    def evict(self, key: bytes) -> bool:
        """Demote a ram/ram_file row to disk, or delete a disk row."""
        with self._io_lock:
            row = self._catalog.get(key)
            if row is None:
                return False
            if row.tier == TIER_DISK:
                self._counters.add("evictions")
                self._evictor.remove(row, evicted=True)
                return True
            return self._evictor.demote(row)

    def delete(self, key: bytes) -> bool:
        with self._io_lock:
            row = self._catalog.get(key)
            if row is None:
                return False
            self._evictor.remove(row)
            return True

    def move(self, key: bytes, tier: str) -> bool:
        """Move a row to another tier (making room there under its quota)."""
        if tier not in TIERS:
            raise ValueError(f"unknown cache tier {tier!r}; expected one of {TIERS}")
        with self._io_lock:
            row = self._catalog.get(key)
            if row is None:
                return False
            return self._evictor.relocate(row, tier) is not None

    def clear(self, model_id: str | None, older_than: float | None, include_pinned: bool) -> int:
        """Delete rows (of one model / unused for ``older_than`` seconds); user-pinned rows
        are kept unless ``include_pinned``. Returns how many were deleted."""
        cutoff = None if older_than is None else time.time() - older_than
        n = 0
        with self._io_lock:
            for row in self._catalog.rows():
                if model_id is not None and row.model_id != model_id:
                    continue
                if row.status != STATUS_AVAILABLE or (row.pinned and not include_pinned):
                    continue
                if cutoff is not None and row.last_used >= cutoff:
                    continue
                self._evictor.remove(row)
                n += 1
        return n
