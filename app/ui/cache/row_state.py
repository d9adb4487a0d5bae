"""The dashboard's list of cache rows: plain-Python state, no Qt.

``CacheRowState`` owns an ordered list of ``Row`` snapshots and a key → position map. Every
change goes through ``reset``, ``apply`` or ``sort``, which tell registered listeners
before and after, so a Qt adapter (``app.ui.qt_models.cache_rows``) can translate them into
``beginInsertRows``/``beginRemoveRows``/``dataChanged``/layout signals without owning any
state itself (STYLE: Qt models are adapters over plain-Python state).

``apply`` takes a batch of store notifications (``published``/``updated`` with a Row,
``removed`` with a key), coalesced by key so a burst costs one pass.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from app.cache.index import Row

TIER_ORDER = {"ram": 0, "ram_file": 1, "disk": 2}
SortKey = Callable[[Row], Any]

# Bigger batches of inserts than this re-sort once instead of inserting one by one.
_SORTED_INSERT_LIMIT = 64


class RowListener(Protocol):
    def before_reset(self) -> None: ...
    def after_reset(self) -> None: ...
    def before_insert(self, first: int, last: int) -> None: ...
    def after_insert(self) -> None: ...
    def before_remove(self, first: int, last: int) -> None: ...
    def after_remove(self) -> None: ...
    def changed(self, first: int, last: int) -> None: ...
    def before_layout(self) -> None: ...
    def after_layout(self, new_positions: dict[bytes, int]) -> None: ...


class CacheRowState:
    """Ordered cache rows, optionally kept sorted by one key function."""

    def __init__(self) -> None:
        self._rows: list[Row] = []
        self._pos: dict[bytes, int] = {}
        self._listeners: list[RowListener] = []
        self._sort_key: SortKey | None = None
        self._reverse = False
        self.version = 0  # bumped on every change; cheap "did anything change" for views
        self._model_ids: tuple[int, list[str]] = (-1, [])

    # -- reading --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rows)

    def row(self, i: int) -> Row:
        return self._rows[i]

    def rows(self) -> Sequence[Row]:
        return self._rows

    def position(self, key: bytes) -> int | None:
        return self._pos.get(key)

    def get(self, key: bytes) -> Row | None:
        i = self._pos.get(key)
        return None if i is None else self._rows[i]

    def model_ids(self) -> list[str]:
        if self._model_ids[0] != self.version:
            self._model_ids = (self.version, sorted({r.model_id for r in self._rows}))
        return self._model_ids[1]

    def add_listener(self, listener: RowListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: RowListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    # -- mutations ------------------------------------------------------------------------

    def reset(self, rows: Iterable[Row]) -> None:
        """Replace everything (used once, when the dashboard opens)."""
        for lst in self._listeners:
            lst.before_reset()
        latest: dict[bytes, Row] = {}
        for row in rows:
            latest[row.key] = row
        self._rows = list(latest.values())
        if self._sort_key is not None:
            self._rows.sort(key=self._sort_key, reverse=self._reverse)
        self._reindex(0)
        self.version += 1
        for lst in self._listeners:
            lst.after_reset()

    def apply(self, changes: Iterable[tuple[str, Any]]) -> None:
        """Apply a batch of store notifications: the last one per key wins."""
        latest: dict[bytes, Row | None] = {}
        for kind, obj in changes:
            if kind == "removed":
                latest[obj] = None
            elif kind in ("published", "updated"):
                latest[obj.key] = obj
        if not latest:
            return
        self.version += 1
        gone = sorted(
            (self._pos[k] for k, r in latest.items() if r is None and k in self._pos),
            reverse=True,
        )
        self._remove_positions(gone)
        new: list[Row] = []
        for key, row in latest.items():
            if row is None:
                continue
            i = self._pos.get(key)
            if i is None:
                new.append(row)
            else:
                self._rows[i] = row
                for lst in self._listeners:
                    lst.changed(i, i)
        self._insert(new)
        if self._sort_key is not None and len(latest) - len(gone) - len(new) > 0:
            self._resort_if_needed()

    def sort(self, key: SortKey | None, reverse: bool = False) -> None:
        """Keep the rows ordered by ``key`` (None: arrival order from now on)."""
        self._sort_key = key
        self._reverse = reverse
        if key is None:
            return
        for lst in self._listeners:
            lst.before_layout()
        self._rows.sort(key=key, reverse=reverse)
        self._reindex(0)
        self.version += 1
        for lst in self._listeners:
            lst.after_layout(self._pos)

    # -- internals ------------------------------------------------------------------------

    def _reindex(self, start: int) -> None:
        rows = self._rows
        pos = self._pos
        if start == 0:
            pos.clear()
        for i in range(start, len(rows)):
            pos[rows[i].key] = i

    def _remove_positions(self, positions: list[int]) -> None:
        """Remove rows at ``positions`` (descending), contiguous runs as one signal each."""
        if not positions:
            return
        runs: list[tuple[int, int]] = []
        for p in positions:
            if runs and runs[-1][0] == p + 1:
                runs[-1] = (p, runs[-1][1])
            else:
                runs.append((p, p))
        for first, last in runs:
            for lst in self._listeners:
                lst.before_remove(first, last)
            for row in self._rows[first : last + 1]:
                del self._pos[row.key]
            del self._rows[first : last + 1]
            for lst in self._listeners:
                lst.after_remove()
        self._reindex(positions[-1])

    def _insert(self, new: list[Row]) -> None:
        if not new:
            return
        if self._sort_key is None or len(new) > _SORTED_INSERT_LIMIT:
            first = len(self._rows)
            for lst in self._listeners:
                lst.before_insert(first, first + len(new) - 1)
            self._rows.extend(new)
            self._reindex(first)
            for lst in self._listeners:
                lst.after_insert()
            if self._sort_key is not None:
                self.sort(self._sort_key, self._reverse)
            return
        key = self._sort_key
        for row in new:
            i = self._bisect(key(row))
            for lst in self._listeners:
                lst.before_insert(i, i)
            self._rows.insert(i, row)
            self._reindex(i)
            for lst in self._listeners:
                lst.after_insert()

    def _bisect(self, value: Any) -> int:
        key = self._sort_key
        assert key is not None
        if self._reverse:
            # descending: the first position whose key is smaller than value
            lo, hi = 0, len(self._rows)
            while lo < hi:
                mid = (lo + hi) // 2
                if key(self._rows[mid]) < value:
                    hi = mid
                else:
                    lo = mid + 1
            return lo
        return bisect.bisect_right(self._rows, value, key=key)

    def _resort_if_needed(self) -> None:
        key = self._sort_key
        assert key is not None
        keys = [key(r) for r in self._rows]
        pairs = zip(keys, keys[1:], strict=False)
        ordered = all(b <= a for a, b in pairs) if self._reverse else all(a <= b for a, b in pairs)
        if not ordered:
            self.sort(key, self._reverse)
