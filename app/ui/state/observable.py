"""One observable list for the app's plain-Python UI state, and its one listener protocol.

STYLE §2 (qutebrowser, napari): the state owner keeps a plain list and routes every change
through a few methods that notify; a Qt item model is a thin adapter that only translates
those notifications (``app.ui.qt_models.adapter.ListAdapter``). No Qt here, so the state is
tested without widgets.

The notifications mirror Qt's own row protocol, so the adapter is one line each:
``before_insert(first, last)`` / ``after_insert()``, ``before_remove(first, last)`` /
``after_remove()``, ``before_move(first, last, dest)`` / ``after_move()`` (``dest`` is Qt's
"insert before this row", counted before the move), ``changed(first, last)``,
``before_reset()`` / ``after_reset()``, and ``before_layout()`` / ``after_layout()`` for a
reorder of the same items (a sort), during which the adapter follows items by their key.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class ListListener(Protocol):
    def before_reset(self) -> None: ...
    def after_reset(self) -> None: ...
    def before_insert(self, first: int, last: int) -> None: ...
    def after_insert(self) -> None: ...
    def before_remove(self, first: int, last: int) -> None: ...
    def after_remove(self) -> None: ...
    def before_move(self, first: int, last: int, dest: int) -> None: ...
    def after_move(self) -> None: ...
    def changed(self, first: int, last: int) -> None: ...
    def before_layout(self) -> None: ...
    def after_layout(self) -> None: ...


class ObservableList(Generic[T, K]):
    """An ordered list of frozen items, each with a unique key, that tells its listeners
    before and after every change. Subclasses add the domain's own operations on top of
    the protected mutators below (the only code that changes ``_items``)."""

    def __init__(self, key: Callable[[T], K]) -> None:
        self._key = key
        self._items: list[T] = []
        self._pos: dict[K, int] = {}
        self._listeners: list[ListListener] = []

    # -- reading --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, row: int) -> T:
        return self._items[row]

    def items(self) -> Sequence[T]:
        """The items in order (a read-only view: change them through the mutators)."""
        return self._items

    def key_of(self, item: T) -> K:
        return self._key(item)

    def position(self, key: K) -> int | None:
        return self._pos.get(key)

    def get(self, key: K) -> T | None:
        i = self._pos.get(key)
        return None if i is None else self._items[i]

    # -- listeners ------------------------------------------------------------------------

    def add_listener(self, listener: ListListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: ListListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    # -- mutators -------------------------------------------------------------------------

    def _reset(self, items: Iterable[T]) -> None:
        """Replace everything; a later item with the same key wins."""
        latest: dict[K, T] = {}
        for item in items:
            latest[self._key(item)] = item
        for lst in self._listeners:
            lst.before_reset()
        self._items = list(latest.values())
        self._reindex(0)
        for lst in self._listeners:
            lst.after_reset()

    def _insert(self, row: int, items: Sequence[T]) -> None:
        if not items:
            return
        for lst in self._listeners:
            lst.before_insert(row, row + len(items) - 1)
        self._items[row:row] = items
        self._reindex(row)
        for lst in self._listeners:
            lst.after_insert()

    def _remove(self, first: int, last: int) -> None:
        for lst in self._listeners:
            lst.before_remove(first, last)
        for item in self._items[first : last + 1]:
            del self._pos[self._key(item)]
        del self._items[first : last + 1]
        self._reindex(first)
        for lst in self._listeners:
            lst.after_remove()

    def _replace(self, row: int, item: T) -> None:
        """Put ``item`` (same key) at ``row``: one ``changed``."""
        assert self._key(item) == self._key(self._items[row]), (row, item)
        self._items[row] = item
        for lst in self._listeners:
            lst.changed(row, row)

    def _move(self, row: int, to: int) -> None:
        """Move the item at ``row`` so that it ends up at position ``to``."""
        if row == to:
            return
        dest = to if to < row else to + 1  # Qt counts the destination before the move
        for lst in self._listeners:
            lst.before_move(row, row, dest)
        item = self._items.pop(row)
        self._items.insert(to, item)
        self._reindex(min(row, to))
        for lst in self._listeners:
            lst.after_move()

    def _relayout(self, items: list[T]) -> None:
        """The same items in a new order (a sort): one layout change."""
        assert len(items) == len(self._items)
        for lst in self._listeners:
            lst.before_layout()
        self._items = items
        self._reindex(0)
        for lst in self._listeners:
            lst.after_layout()

    def _changed(self, first: int, last: int) -> None:
        for lst in self._listeners:
            lst.changed(first, last)

    def _reindex(self, start: int) -> None:
        if start == 0:
            self._pos.clear()
        tail = self._items[start:]
        self._pos.update(zip(map(self._key, tail), range(start, start + len(tail)), strict=True))
