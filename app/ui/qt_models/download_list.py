"""``QAbstractListModel`` adapter over the download manager's :class:`DownloadList`
(qutebrowser's pattern: the manager owns the list; this model only translates its
notifications, through :class:`~app.ui.qt_models.adapter.ListAdapter`)."""

from __future__ import annotations

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt

from app.ui.qt_models.adapter import ListAdapter
from app.ui.state.downloads import DownloadItem, DownloadList, describe

Index = QModelIndex | QPersistentModelIndex

ITEM_ROLE = Qt.ItemDataRole.UserRole + 1  # the DownloadItem snapshot
PROGRESS_ROLE = Qt.ItemDataRole.UserRole + 2  # int per mille (0–1000)
STATUS_ROLE = Qt.ItemDataRole.UserRole + 3  # the status line
STATE_ROLE = Qt.ItemDataRole.UserRole + 4  # DownloadState value (str)


class DownloadListModel(ListAdapter[DownloadItem, int], QAbstractListModel):
    def __init__(self, items: DownloadList) -> None:
        super().__init__()
        self._items = items
        self.observe(items)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self._items)

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | \
            Qt.ItemFlag.ItemNeverHasChildren

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self._items):
            return None
        item = self._items[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return item.filename
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{item.repo_id}/{item.filename}" + (f"\n{item.error}" if item.error else "")
        if role == ITEM_ROLE:
            return item
        if role == PROGRESS_ROLE:
            return int(round(item.fraction * 1000))
        if role == STATUS_ROLE:
            return describe(item)
        if role == STATE_ROLE:
            return item.state.value
        return None

    def item_id(self, row: int) -> int:
        return self._items[row].id
