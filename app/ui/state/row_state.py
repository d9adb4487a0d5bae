"""The dashboard's list of cache rows: plain-Python state, no Qt.

``CacheRowState`` is an :class:`~app.ui.state.observable.ObservableList` of ``Row`` snapshots keyed
by the row's cache key. Every change goes through ``reset``, ``apply`` or ``sort``, so the Qt
adapter (``app.ui.qt_models.cache_rows``) only translates notifications into row signals and
owns no rows itself (STYLE: Qt models are adapters over plain-Python state).

``apply`` takes a batch of store notifications (``published``/``updated`` with a Row,
``removed`` with a key), coalesced by key so a burst costs one pass.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, Self

from app.cache.contents.index import Row
from app.ui.state.observable import ObservableList

TIER_ORDER = {"ram": 0, "ram_file": 1, "disk": 2}


class Ordered(Protocol):
    """A sort key's value: compares with others of its own type (str, int, float…)."""

    def __lt__(self, other: Self, /) -> bool: ...
    def __le__(self, other: Self, /) -> bool: ...


SortKey = Callable[[Row], Ordered]

# Bigger batches of inserts than this re-sort once instead of inserting one by one.
_SORTED_INSERT_LIMIT = 64


def _row_key(row: Row) -> bytes:
    return row.key


class CacheRowState(ObservableList[Row, bytes]):
    """Ordered cache rows, optionally kept sorted by one key function."""

    def __init__(self) -> None:
        super().__init__(_row_key)
        self._sort_key: SortKey | None = None
        self._reverse = False
        self.version = 0  # bumped on every change; cheap "did anything change" for views
        self._model_ids: tuple[int, list[str]] = (-1, [])

    # -- reading --------------------------------------------------------------------------

    def row(self, i: int) -> Row:
        return self[i]

    def rows(self) -> Sequence[Row]:
        return self.items()

    def model_ids(self) -> list[str]:
        if self._model_ids[0] != self.version:
            self._model_ids = (self.version, sorted({r.model_id for r in self.items()}))
        return self._model_ids[1]

    # -- mutations ------------------------------------------------------------------------

    def reset(self, rows: Iterable[Row]) -> None:
        """Replace everything (used once, when the dashboard opens)."""
        rows = list(rows)
        if self._sort_key is not None:
            rows.sort(key=self._sort_key, reverse=self._reverse)
        self.version += 1
        self._reset(rows)

    def apply(self, changes: Iterable[tuple[str, Row | bytes]]) -> None:
        """Apply a batch of store notifications: the last one per key wins."""
        latest: dict[bytes, Row | None] = {}
        for kind, obj in changes:
            if isinstance(obj, Row):
                if kind in ("published", "updated"):
                    latest[obj.key] = obj
            elif kind == "removed":
                latest[obj] = None
        if not latest:
            return
        self.version += 1
        gone = sorted(
            (p for k, r in latest.items() if r is None and (p := self.position(k)) is not None),
            reverse=True,
        )
        self._remove_positions(gone)
        new: list[Row] = []
        num_updated = 0
        for key, row in latest.items():
            if row is None:
                continue
            i = self.position(key)
            if i is None:
                new.append(row)
            else:
                self._replace(i, row)
                num_updated += 1
        self._insert_rows(new)
        if self._sort_key is not None and num_updated:
            self._resort_if_needed()

    def sort(self, key: SortKey | None, reverse: bool = False) -> None:
        """Keep the rows ordered by ``key`` (None: arrival order from now on)."""
        self._sort_key = key
        self._reverse = reverse
        if key is None:
            return
        self.version += 1
        self._relayout(sorted(self.items(), key=key, reverse=reverse))

    # -- internals ------------------------------------------------------------------------

    def _remove_positions(self, positions: list[int]) -> None:
        """Remove rows at ``positions`` (descending), contiguous runs as one signal each."""
        runs: list[tuple[int, int]] = []
        for p in positions:
            if runs and runs[-1][0] == p + 1:
                runs[-1] = (p, runs[-1][1])
            else:
                runs.append((p, p))
        for first, last in runs:
            self._remove(first, last)

    def _insert_rows(self, new: list[Row]) -> None:
        if not new:
            return
        if self._sort_key is None or len(new) > _SORTED_INSERT_LIMIT:
            self._insert(len(self), new)
            if self._sort_key is not None:
                self.sort(self._sort_key, self._reverse)
            return
        key = self._sort_key
        for row in new:
            self._insert(self._bisect(key(row)), [row])

    def _bisect(self, value: Ordered) -> int:
        key = self._sort_key
        assert key is not None
        rows = self.items()
        if self._reverse:
            # descending: the first position whose key is smaller than value
            lo, hi = 0, len(rows)
            while lo < hi:
                mid = (lo + hi) // 2
                if key(rows[mid]) < value:
                    hi = mid
                else:
                    lo = mid + 1
            return lo
        return bisect.bisect_right(rows, value, key=key)

    def _resort_if_needed(self) -> None:
        key = self._sort_key
        assert key is not None
        keys = [key(r) for r in self.items()]
        pairs = zip(keys, keys[1:], strict=False)
        ordered = all(b <= a for a, b in pairs) if self._reverse else all(a <= b for a, b in pairs)
        if not ordered:
            self.sort(key, self._reverse)
