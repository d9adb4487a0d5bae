"""Qt adapters over :class:`~app.ui.state.row_state.CacheRowState` (they own no rows).

``CacheRowsModel`` translates the state's notifications into row signals (through
:class:`~app.ui.qt_models.adapter.ListAdapter`) and formats cells; sorting is done by the state in plain Python (one ``list.sort`` with a key, ~10 ms
for 20,000 rows) because a ``QSortFilterProxyModel`` sort would call ``data()`` across the
Python boundary ~600,000 times. ``CacheRowsProxy`` filters (model, tier, save reason,
text) and forwards ``sort`` to the source, so it keeps the source's order.
"""

from __future__ import annotations

from PySide6.QtCore import (
    QAbstractItemModel,
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QColor

from app.cache.contents.index import Row
from app.ui.qt_models.adapter import ListAdapter
from app.ui.state import cache_fmt as fmt
from app.ui.state.previews import PreviewCache
from app.ui.state.row_state import TIER_ORDER, CacheRowState, SortKey
from app.ui.state.titles import ConversationTitles
from app.units import human_bytes

Index = QModelIndex | QPersistentModelIndex

KEY_ROLE = Qt.ItemDataRole.UserRole + 1
ROW_ROLE = Qt.ItemDataRole.UserRole + 2

COLUMNS = (
    "Model", "Conversation", "Tokens", "Size", "Where", "Saved because", "Saved", "Last used",
    "Reused", "Pinned", "Ends with…",
)  # fmt: skip
COL_MODEL, COL_CONVERSATION, COL_TOKENS, COL_SIZE, COL_TIER, COL_REASON, COL_CREATED, \
    COL_USED, COL_HITS, COL_PINNED, COL_PREVIEW = range(len(COLUMNS))  # fmt: skip

HEADER_TIPS = (
    "The model whose memory this is. A saved entry only works with the exact same model file.",
    "The chat this was saved for (empty for requests without one, e.g. the local server).",
    "How many tokens (word pieces) of conversation this entry lets the model skip re-reading.",
    "How much space the saved memory takes.",
    "Where it is kept: RAM (fastest, gone when Hearth closes), RAM file (fast, gone at "
    "reboot) or Disk (slower, permanent).",
    "What made Hearth save it (a prompt was read, a reply finished, a slot was freed, …).",
    "When it was saved.",
    "When it was last reused (or saved). The least recently used entries make room first.",
    "How many times a conversation was resumed from this entry instead of being re-read.",
    "Pinned entries are never removed to make room.",
    "The last words of the conversation this entry remembers (needs the model to be loaded).",
)


def _preview_sort(previews: PreviewCache) -> SortKey:
    return lambda r: previews.cached_tail(r.key) or r.prompt_preview or ""


SORT_KEYS: dict[int, SortKey] = {
    COL_MODEL: lambda r: r.model_id,
    COL_TOKENS: lambda r: r.n_tokens,
    COL_SIZE: lambda r: r.size,
    COL_TIER: lambda r: TIER_ORDER.get(r.tier, 9),
    COL_REASON: lambda r: r.save_reason,
    COL_CREATED: lambda r: r.created,
    COL_USED: lambda r: r.last_used,
    COL_HITS: lambda r: r.hits,
    COL_PINNED: lambda r: r.pinned,
}


class CacheRowsModel(ListAdapter[Row, bytes], QAbstractTableModel):
    """Table adapter: one row per cache entry, columns ``COLUMNS``."""

    def __init__(
        self,
        state: CacheRowState,
        previews: PreviewCache,
        parent: QObject | None = None,
        *,
        titles: ConversationTitles | None = None,
    ) -> None:
        super().__init__(parent)
        self._state = state
        self._previews = previews
        self._titles = titles or ConversationTitles(None)
        self._last_sort: tuple[int, Qt.SortOrder, int] | None = None
        self._muted = QColor("#8a8f98")
        self._pin_color = QColor("#e8590c")
        self.observe(state)

    def set_colors(self, muted: str, accent: str) -> None:
        self._muted = QColor(muted)
        self._pin_color = QColor(accent)

    @property
    def state(self) -> CacheRowState:
        return self._state

    # -- QAbstractTableModel ------------------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._state)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(COLUMNS):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return HEADER_TIPS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self._state):
            return None
        row = self._state.row(index.row())
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(row, col)
        if role == KEY_ROLE:
            return row.key
        if role == ROW_ROLE:
            return row
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(row, col)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (COL_TOKENS, COL_SIZE, COL_HITS):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole:
            if col == COL_PREVIEW or col in (COL_CREATED, COL_USED):
                return self._muted
            if col == COL_PINNED and row.pinned:
                return self._pin_color
        return None

    def _display(self, row: Row, col: int) -> str | None:
        if col == COL_MODEL:
            return row.model_id
        if col == COL_CONVERSATION:
            return self.conversation(row)
        if col == COL_TOKENS:
            return f"{row.n_tokens:,}"
        if col == COL_SIZE:
            return human_bytes(row.size)
        if col == COL_TIER:
            return fmt.TIER_LABELS.get(row.tier, row.tier) + (
                " (saving…)" if row.status != "available" else ""
            )
        if col == COL_REASON:
            return fmt.REASON_LABELS.get(row.save_reason, row.save_reason)
        if col == COL_CREATED:
            return fmt.age(row.created)
        if col == COL_USED:
            return fmt.age(row.last_used)
        if col == COL_HITS:
            return str(row.hits)
        if col == COL_PINNED:
            return "pinned" if row.pinned else ""
        if col == COL_PREVIEW:
            return self._previews.tail(row)
        return None

    def conversation(self, row: Row) -> str:
        """The title of the chat this row was saved for ("" when it has none)."""
        return self._titles.title(row.session_id) or ""

    def _tooltip(self, row: Row, col: int) -> str:
        if col == COL_TIER:
            return fmt.TIER_HELP.get(row.tier, row.tier)
        if col == COL_REASON:
            return fmt.REASON_HELP.get(row.save_reason, row.save_reason)
        if col in (COL_CREATED, COL_USED):
            return fmt.stamp(row.created if col == COL_CREATED else row.last_used)
        if col == COL_PREVIEW:
            return self._previews.tail(row)
        return f"key {row.key_hex[:16]}…  ·  {row.n_tokens:,} tokens  ·  {human_bytes(row.size)}"

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        # NOTE: QTableView.sortByColumn asks twice (header indicator, then the view); the
        # state keeps itself sorted between calls, so a repeat with no change is a no-op.
        request = (column, order, self._state.version)
        if request == self._last_sort:
            return
        if column == COL_PREVIEW:
            key: SortKey | None = _preview_sort(self._previews)
        elif column == COL_CONVERSATION:
            key = self._conversation_sort
        else:
            key = SORT_KEYS.get(column)
        self._state.sort(key, reverse=order == Qt.SortOrder.DescendingOrder)
        self._last_sort = (column, order, self._state.version)


    def _conversation_sort(self, row: Row) -> str:
        return self.conversation(row).casefold()


class CacheRowsProxy(QSortFilterProxyModel):
    """Filters rows by model, tier, save reason and a text search; sorting goes to the
    source (see the module docstring), so this proxy never reorders."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model_id: str | None = None
        self.tier: str | None = None
        self.reason: str | None = None
        self.text = ""
        self._previews: PreviewCache | None = None
        self._active = False

    def setSourceModel(self, model: QAbstractItemModel) -> None:  # noqa: N802 (Qt override)
        super().setSourceModel(model)
        self._previews = getattr(model, "_previews", None)

    def set_filters(
        self,
        *,
        model_id: str | None = None,
        tier: str | None = None,
        reason: str | None = None,
        text: str = "",
    ) -> None:
        """Any of model / tier / reason (None = all) and a case-insensitive text that
        matches the model name, the key (hex) or a preview already shown."""
        self.beginFilterChange()
        self.model_id, self.tier, self.reason = model_id, tier, reason
        self.text = text.strip().lower()
        self._active = bool(model_id or tier or reason or self.text)
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:  # noqa: N802
        if not self._active:
            return True
        src = self.sourceModel()
        assert isinstance(src, CacheRowsModel)
        return self.accepts(src.state.row(source_row))

    def accepts(self, row: Row) -> bool:
        if self.model_id and row.model_id != self.model_id:
            return False
        if self.tier and row.tier != self.tier:
            return False
        if self.reason and row.save_reason != self.reason:
            return False
        if self.text:
            if self.text in row.model_id.lower() or row.key_hex.startswith(self.text):
                return True
            src = self.sourceModel()
            if isinstance(src, CacheRowsModel) and self.text in src.conversation(row).lower():
                return True
            shown = self._previews.cached_tail(row.key) if self._previews else None
            return self.text in (shown or row.prompt_preview).lower()
        return True

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        src = self.sourceModel()
        if src is not None:
            src.sort(column, order)
