"""What the store tells the outside world about a change: the SQLite metadata (an index of
the files, rebuilt from them when lost) and the change notifications (``subscribe``).

Database calls are serialised by one lock and never raise: the in-memory catalog stays
authoritative and the next start-up reconciles the database with the files. A failure the
environment caused (disk full, read-only, locked: ``app.cache.errors``) is counted as
``db_errors`` and kept as a ``Problem`` to show; any other exception is a bug and is logged
with its traceback and counted as ``internal_errors``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from app.cache.contents.chunk_index import Chunk
from app.cache.contents.rows import Row
from app.cache.counters import Counters
from app.cache.db.meta import MetaDB, chunk_fields, row_fields
from app.cache.errors import Problems, is_environment_error

log = logging.getLogger(__name__)

Subscriber = Callable[[str, Any], None]
T = TypeVar("T")


class Journal:
    def __init__(self, db: MetaDB, counters: Counters, problems: Problems) -> None:
        self.db = db
        self._counters = counters
        self._problems = problems
        self._db_lock = threading.Lock()
        self._subscribers: list[Subscriber] = []
        self._sub_lock = threading.Lock()

    # -- database ---------------------------------------------------------------------------

    def call(self, doing: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """Run ``fn`` on the database under its lock; None (logged, counted) if it fails."""
        try:
            with self._db_lock:
                return fn(*args, **kwargs)
        except Exception as exc:
            if is_environment_error(exc):
                problem = self._problems.note(exc, doing)
                log.error("cache database: %s: %s", problem.message, exc)
                self._counters.add("db_errors")
            else:
                log.exception("bug in the cache database code while %s", doing)
                self._counters.add("internal_errors")
            return None

    def put(self, row: Row) -> None:
        self.call("recording a cache entry", self.db.put, row_fields(row))

    def put_many(self, rows: Iterable[Row]) -> None:
        fields = [row_fields(r) for r in rows]
        if fields:
            self.call("recording cache entries", self.db.put_many, fields)

    def update(self, key: bytes, **fields: Any) -> None:
        self.call("updating a cache entry", self.db.update, key.hex(), **fields)

    def delete(self, keys: Iterable[bytes]) -> None:
        hexes = [k.hex() for k in keys]
        if hexes:
            self.call("removing cache entries", self.db.delete, hexes)

    def put_chunks(self, chunks: Iterable[Chunk]) -> None:
        fields = [chunk_fields(c) for c in chunks if c.tier is not None]
        if fields:
            self.call("recording cache chunks", self.db.put_chunks, fields)

    def update_chunk(self, key: bytes, **fields: Any) -> None:
        self.call("updating a cache chunk", self.db.update_chunk, key.hex(), **fields)

    def delete_chunks(self, keys: Iterable[bytes]) -> None:
        hexes = [k.hex() for k in keys]
        if hexes:
            self.call("removing cache chunks", self.db.delete_chunks, hexes)

    def counters(self) -> dict[str, int]:
        return self.call("reading counter totals", self.db.counters) or {}

    def add_counters(self, totals: dict[str, int]) -> None:
        self.call("saving counter totals", self.db.add_counters, totals)

    def close(self) -> None:
        with self._db_lock:
            self.db.close()

    # -- notifications ----------------------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        with self._sub_lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._sub_lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def emit(self, kind: str, obj: Any) -> None:
        """Tell every subscriber; call it without holding the catalog's lock."""
        with self._sub_lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(kind, obj)
            except Exception:
                log.exception("cache subscriber failed on %s", kind)
