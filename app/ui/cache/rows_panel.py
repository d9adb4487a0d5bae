"""The "Saved conversations" tab: the filterable table of cache rows and its actions."""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, QPoint, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.cache.contents.index import Row
from app.template_text import transcript
from app.ui.cache.actions import CacheActions
from app.ui.cache.detail_split import detail_split
from app.ui.qt_models.cache_rows import (
    COL_PREVIEW,
    COLUMNS,
    ROW_ROLE,
    CacheRowsModel,
    CacheRowsProxy,
)
from app.ui.state import cache_fmt as fmt
from app.ui.state.previews import PreviewCache
from app.units import human_bytes

ALL = "All"
COLUMN_WIDTHS = (110, 170, 70, 80, 90, 125, 95, 95, 70, 70, 360)


class RowsPanel(QWidget):
    row_selected = Signal(object)  # the selected Row, or None

    def __init__(
        self,
        model: CacheRowsModel,
        previews: PreviewCache,
        actions: CacheActions,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("cacheRowsPanel")
        self.model = model
        self._previews = previews
        self._actions = actions
        self.proxy = CacheRowsProxy(self)
        self.proxy.setObjectName("cacheRowsProxy")
        self.proxy.setSourceModel(model)

        caption = QLabel(
            "Each line is a saved point of a conversation: the model's \"memory\" of having "
            "read it (its KV cache). When a new message starts with one of these, Hearth loads "
            "the memory instead of making the model read everything again — that is why a "
            "long chat answers instantly. Older, unused entries make room for new ones unless "
            "pinned."
        )
        caption.setObjectName("cacheCaption")
        caption.setWordWrap(True)

        self.model_filter = self._combo("cacheModelFilter", [ALL], "Show one model's entries")
        self.tier_filter = self._combo(
            "cacheTierFilter", [ALL, *fmt.TIER_LABELS.values()], "Show one storage place"
        )
        self.reason_filter = self._combo(
            "cacheReasonFilter", [ALL, *fmt.REASON_LABELS.values()], "Show one save reason"
        )
        self.search = QLineEdit()
        self.search.setObjectName("cacheSearch")
        self.search.setPlaceholderText("Search model, key or shown text…")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._apply_filters)
        self.count_label = QLabel()
        self.count_label.setObjectName("cacheStatus")

        filters = QHBoxLayout()
        for label, w in (("Model", self.model_filter), ("Where", self.tier_filter),
                         ("Reason", self.reason_filter)):  # fmt: skip
            filters.addWidget(QLabel(label))
            filters.addWidget(w)
        filters.addWidget(self.search, 1)
        filters.addWidget(self.count_label)

        self.table = QTableView()
        self.table.setObjectName("cacheRowsTable")
        self.table.setModel(self.proxy)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        vh = self.table.verticalHeader()
        vh.setVisible(False)
        vh.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        vh.setDefaultSectionSize(26)
        hh = self.table.horizontalHeader()
        hh.setHighlightSections(False)
        for col, width in enumerate(COLUMN_WIDTHS):
            hh.resizeSection(col, width)
        hh.setStretchLastSection(True)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(COLUMNS.index("Last used"), Qt.SortOrder.DescendingOrder)
        self.table.selectionModel().selectionChanged.connect(self._on_selection_changed)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._on_context_menu)

        self.detail, split = detail_split(self.table, "Select an entry to see what it remembers.", 4)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        layout.addWidget(caption)
        layout.addLayout(filters)
        layout.addLayout(self._action_bar())
        layout.addWidget(split, 1)
        self.proxy.rowsInserted.connect(self._update_count)
        self.proxy.rowsRemoved.connect(self._update_count)
        self.proxy.modelReset.connect(self._update_count)
        self.proxy.layoutChanged.connect(self._update_count)
        self._update_count()
        self._on_selection_changed()

    # -- building -------------------------------------------------------------------------

    def _combo(self, name: str, items: list[str], tip: str) -> QComboBox:
        box = QComboBox()
        box.setObjectName(name)
        box.addItems(items)
        box.setToolTip(tip)
        # Wide enough for a model's name, and growing with the names added later.
        box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        box.setMinimumContentsLength(6)
        box.currentIndexChanged.connect(self._apply_filters)
        return box

    def _button(self, name: str, text: str, tip: str) -> QToolButton:
        b = QToolButton()
        b.setObjectName("cacheAction")
        b.setProperty("action", name)
        b.setText(text)
        b.setToolTip(tip)
        return b

    def _action_bar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.pin_button = self._button("pin", "Pin", "Keep the selected entries: never removed to make room.")
        self.unpin_button = self._button("unpin", "Unpin", "Let the selected entries be removed when space runs low.")
        self.evict_button = self._button(
            "evict", "Evict", "Push the selected entries out of memory: RAM entries move to disk, disk entries are deleted."
        )
        self.delete_button = self._button("delete", "Delete", "Delete the selected entries now, wherever they are.")
        self.move_button = self._button("move", "Move to", "Move the selected entries to another storage place.")
        self.move_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.move_button)
        for tier, label in fmt.TIER_LABELS.items():
            act = menu.addAction(label)
            act.setToolTip(fmt.TIER_HELP[tier])
            act.triggered.connect(lambda _=False, t=tier: self._actions.move(self.selected_keys(), t))
        self.move_button.setMenu(menu)
        self.clear_button = self._button("clear", "Clear…", "Delete every entry of a model, or those unused for a while.")
        self.verify_button = self._button("verify", "Verify all", "Re-read every saved file and check it is intact; damaged ones are removed.")
        self.pin_button.clicked.connect(lambda: self._actions.pin(self.selected_keys()))
        self.unpin_button.clicked.connect(lambda: self._actions.unpin(self.selected_keys()))
        self.evict_button.clicked.connect(lambda: self._actions.evict(self.selected_keys()))
        self.delete_button.clicked.connect(lambda: self._actions.delete(self.selected_keys()))
        self.clear_button.clicked.connect(self._on_clear_clicked)
        self.verify_button.clicked.connect(self._actions.verify)
        for b in (self.pin_button, self.unpin_button, self.evict_button, self.delete_button,
                  self.move_button):  # fmt: skip
            bar.addWidget(b)
        bar.addStretch(1)
        bar.addWidget(self.clear_button)
        bar.addWidget(self.verify_button)
        return bar

    # -- filters ---------------------------------------------------------------------------

    def set_model_ids(self, ids: list[str]) -> None:
        """Offer these models in the model filter (keeps the current choice)."""
        current = self.model_filter.currentText()
        wanted = [ALL, *ids]
        if [self.model_filter.itemText(i) for i in range(self.model_filter.count())] == wanted:
            return
        self.model_filter.blockSignals(True)
        self.model_filter.clear()
        self.model_filter.addItems(wanted)
        self.model_filter.setCurrentIndex(max(0, self.model_filter.findText(current)))
        self.model_filter.blockSignals(False)

    def _apply_filters(self) -> None:
        def pick(box: QComboBox, mapping: dict[str, str] | None = None) -> str | None:
            text = box.currentText()
            if text == ALL or not text:
                return None
            if mapping is None:
                return text
            return next((k for k, v in mapping.items() if v == text), None)

        self.proxy.set_filters(
            model_id=pick(self.model_filter),
            tier=pick(self.tier_filter, fmt.TIER_LABELS),
            reason=pick(self.reason_filter, fmt.REASON_LABELS),
            text=self.search.text(),
        )
        self._update_count()

    def _update_count(self, *args: object) -> None:
        shown, total = self.proxy.rowCount(), self.model.rowCount()
        self.count_label.setText(
            f"{total:,} entries" if shown == total else f"{shown:,} of {total:,} entries"
        )

    # -- selection and actions -----------------------------------------------------------

    def selected_rows(self) -> list[Row]:
        rows = []
        for idx in self.table.selectionModel().selectedRows():
            row = idx.data(ROW_ROLE)
            if row is not None:
                rows.append(row)
        return rows

    def selected_keys(self) -> list[bytes]:
        return [r.key for r in self.selected_rows()]

    def select_key(self, key: bytes) -> bool:
        pos = self.model.state.position(key)
        if pos is None:
            return False
        idx = self.proxy.mapFromSource(self.model.index(pos, 0))
        if not idx.isValid():
            return False
        flags = QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
        self.table.selectionModel().select(idx, flags)
        self.table.scrollTo(idx)
        return True

    def _on_selection_changed(self, *args: object) -> None:
        rows = self.selected_rows()
        has = bool(rows)
        for b in (self.pin_button, self.unpin_button, self.evict_button, self.delete_button,
                  self.move_button):  # fmt: skip
            b.setEnabled(has)
        if len(rows) == 1:
            title = self.model.conversation(rows[0])
            self.detail.setPlainText(describe(rows[0], self._previews, title))
        elif rows:
            total = sum(r.n_tokens for r in rows)
            size = sum(r.size for r in rows)
            self.detail.setPlainText(f"{len(rows)} entries selected: {total:,} tokens, {human_bytes(size)}.")
        else:
            self.detail.clear()
        self.row_selected.emit(rows[0] if len(rows) == 1 else None)

    def _on_context_menu(self, pos: QPoint) -> None:
        if not self.selected_rows():
            return
        menu = QMenu(self)
        for b in (self.pin_button, self.unpin_button, self.evict_button, self.delete_button):
            menu.addAction(b.text(), b.click)
        menu.exec(self.table.viewport().mapToGlobal(pos))

    def _on_clear_clicked(self) -> None:
        dialog = ClearDialog([self.model_filter.itemText(i) for i in range(1, self.model_filter.count())], self)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self._actions.clear(*dialog.choice())


def describe(row: Row, previews: PreviewCache, title: str = "") -> str:
    """A plain-language description of one row, then its text."""
    text = previews.text(row)
    chat = f"the conversation “{title}”" if title else "a conversation"
    lines = [
        f"{row.n_tokens:,} tokens of {chat} with {row.model_id}, "
        f"kept in {fmt.TIER_LABELS.get(row.tier, row.tier)} ({human_bytes(row.size)}).",
        f"Saved {fmt.age(row.created)} because: {fmt.REASON_HELP.get(row.save_reason, row.save_reason)}",
        f"Reused {row.hits} time(s), last {fmt.age(row.last_used)}."
        + (" Pinned: never removed to make room." if row.pinned else ""),
        f"Key {row.key_hex}",
        "",
        transcript(text) if text is not None else "(Load this model to read the text it remembers.)",
    ]
    return "\n".join(lines)


class ClearDialog(QDialog):
    """Pick what to clear: one model's entries and/or those unused for some hours."""

    def __init__(self, model_ids: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Clear saved conversations")
        self.model = QComboBox()
        self.model.addItems(["All models", *model_ids])
        self.hours = QDoubleSpinBox()
        self.hours.setRange(0, 24 * 365)
        self.hours.setDecimals(1)
        self.hours.setSuffix(" h")
        self.hours.setSpecialValueText("any age")
        form = QFormLayout(self)
        form.addRow(QLabel("Pinned entries are always kept."))
        form.addRow("Model", self.model)
        form.addRow("Unused for at least", self.hours)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def choice(self) -> tuple[str | None, float | None]:
        model = None if self.model.currentIndex() == 0 else self.model.currentText()
        hours = self.hours.value()
        return model, (hours * 3600 if hours > 0 else None)


__all__ = ["RowsPanel", "describe", "COL_PREVIEW"]
