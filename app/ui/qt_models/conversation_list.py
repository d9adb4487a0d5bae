"""``QAbstractListModel`` adapter over :class:`ConversationCatalog` (it owns no state; the
row signals come from :class:`~app.ui.qt_models.adapter.ListAdapter`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt

from app.ui.qt_models.adapter import ListAdapter
from app.ui.state.conversation_catalog import ConversationCatalog, ConversationEntry

Index = QModelIndex | QPersistentModelIndex

ID_ROLE = Qt.ItemDataRole.UserRole + 1
BUSY_ROLE = Qt.ItemDataRole.UserRole + 2
UPDATED_ROLE = Qt.ItemDataRole.UserRole + 3
AGE_ROLE = Qt.ItemDataRole.UserRole + 4


class ConversationListModel(ListAdapter[ConversationEntry, str], QAbstractListModel):
    def __init__(
        self, catalog: ConversationCatalog, rename: Callable[[str, str], None] | None = None
    ) -> None:
        super().__init__()
        self._catalog = catalog
        self._rename = rename
        self.observe(catalog)

    # -- QAbstractListModel -------------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._catalog)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self._catalog):
            return None
        entry = self._catalog.entry(index.row())
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            return entry.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return entry.title + (" — generating…" if entry.busy else "")
        if role == ID_ROLE:
            return entry.id
        if role == BUSY_ROLE:
            return entry.busy
        if role == UPDATED_ROLE:
            return entry.updated
        if role == AGE_ROLE:
            return _age(entry.updated)
        return None

    def setData(self, index: Index, value: object, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if role != Qt.ItemDataRole.EditRole or not index.isValid() or self._rename is None:
            return False
        title = str(value).strip()
        if not title:
            return False
        self._rename(self._catalog.entry(index.row()).id, title)
        return True

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        flags = (
            Qt.ItemFlag.ItemIsEnabled
            | Qt.ItemFlag.ItemIsSelectable
            | Qt.ItemFlag.ItemNeverHasChildren
        )
        if self._rename is not None:
            flags |= Qt.ItemFlag.ItemIsEditable
        return flags

    def row_of(self, conversation_id: str) -> int:
        return self._catalog.row_of(conversation_id)

    def hold_order(self, held: bool) -> None:
        """While the pointer is over the list, rows do not move (see the catalog)."""
        self._catalog.hold_order(held)


def _age(ts: float) -> str:
    delta = max(0.0, time.time() - ts)
    if delta < 60:
        return "now"
    if delta < 3600:
        return f"{int(delta // 60)}m"
    if delta < 86400:
        return f"{int(delta // 3600)}h"
    if delta < 7 * 86400:
        return f"{int(delta // 86400)}d"
    return time.strftime("%b %d", time.localtime(ts))
