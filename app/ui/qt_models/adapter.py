"""The one Qt adapter over :class:`app.ui.state.observable.ObservableList`.

``ListAdapter`` is a mixin for a ``QAbstractListModel`` / ``QAbstractTableModel`` subclass:
it implements :class:`~app.ui.state.observable.ListListener` by calling Qt's matching
``begin*/end*`` methods, so the item model owns no rows and only formats cells. Put it first
in the bases: ``class M(ListAdapter, QAbstractTableModel)``, then ``self.observe(source)``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from PySide6.QtCore import QAbstractItemModel, QAbstractListModel, QModelIndex

from app.ui.state.observable import ObservableList

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class ListAdapter(Generic[T, K]):
    """Parameterised like its source: ``ListAdapter[Row, bytes]`` observes an
    ``ObservableList[Row, bytes]``."""

    _source: ObservableList[T, K]
    _layout_keys: list[K]

    def observe(self, source: ObservableList[T, K]) -> None:
        self._source = source
        self._layout_keys = []
        source.add_listener(self)

    def _qt(self) -> QAbstractItemModel:
        assert isinstance(self, QAbstractItemModel)
        return self

    # -- ListListener -------------------------------------------------------------------

    def before_reset(self) -> None:
        self._qt().beginResetModel()

    def after_reset(self) -> None:
        self._qt().endResetModel()

    def before_insert(self, first: int, last: int) -> None:
        self._qt().beginInsertRows(QModelIndex(), first, last)

    def after_insert(self) -> None:
        self._qt().endInsertRows()

    def before_remove(self, first: int, last: int) -> None:
        self._qt().beginRemoveRows(QModelIndex(), first, last)

    def after_remove(self) -> None:
        self._qt().endRemoveRows()

    def before_move(self, first: int, last: int, dest: int) -> None:
        ok = self._qt().beginMoveRows(QModelIndex(), first, last, QModelIndex(), dest)
        assert ok, (first, last, dest)

    def after_move(self) -> None:
        self._qt().endMoveRows()

    def changed(self, first: int, last: int) -> None:
        qt = self._qt()
        # NOTE: QAbstractListModel keeps columnCount private: a list has one column.
        right = 0 if isinstance(qt, QAbstractListModel) else max(qt.columnCount() - 1, 0)
        qt.dataChanged.emit(qt.index(first, 0), qt.index(last, right))

    def before_layout(self) -> None:
        qt = self._qt()
        qt.layoutAboutToBeChanged.emit()
        src = self._source
        self._layout_keys = [src.key_of(src[i.row()]) for i in qt.persistentIndexList()]

    def after_layout(self) -> None:
        qt = self._qt()
        old = qt.persistentIndexList()
        new = []
        for key, index in zip(self._layout_keys, old, strict=True):
            row = self._source.position(key)
            new.append(QModelIndex() if row is None else qt.index(row, index.column()))
        qt.changePersistentIndexList(old, new)
        self._layout_keys = []
        qt.layoutChanged.emit()
