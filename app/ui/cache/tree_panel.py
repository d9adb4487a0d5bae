"""The "Conversation tree" tab: one model's cache rows as the tree of prefixes they form."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from app.template_text import transcript
from app.ui.cache import fmt
from app.ui.cache.detail_split import detail_split
from app.ui.cache.prefix_tree import TreeNode, build_prefix_tree
from app.ui.cache.previews import PreviewCache
from app.ui.cache.row_state import CacheRowState
from app.ui.qt_models.cache_tree import KEY_ROLE, NODE_ROLE, CachePrefixTreeModel
from app.units import human_bytes

AUTO_EXPAND_ROWS = 500


class TreePanel(QWidget):
    def __init__(self, state: CacheRowState, previews: PreviewCache, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("cacheTreePanel")
        self._state = state
        self._previews = previews
        self._built_version = -1
        self._built_model: str | None = None
        caption = QLabel(
            "Conversations that start the same way share their saved memory. Each line "
            "continues the line it is indented under: everything up to there was computed "
            "once and reused. Two chats with the same system prompt appear side by side "
            "under that prompt's entry."
        )
        caption.setObjectName("cacheCaption")
        caption.setWordWrap(True)
        self.model_box = QComboBox()
        self.model_box.setObjectName("cacheTreeModel")
        self.model_box.setToolTip("Whose conversations to draw")
        self.model_box.currentIndexChanged.connect(lambda _: self.refresh(force=True))
        self.summary = QLabel()
        self.summary.setObjectName("cacheStatus")
        top = QHBoxLayout()
        top.addWidget(QLabel("Model"))
        top.addWidget(self.model_box)
        top.addWidget(self.summary, 1)

        self.model = CachePrefixTreeModel(previews, self)
        self.model.setObjectName("cachePrefixTreeModel")
        self.view = QTreeView()
        self.view.setObjectName("cachePrefixTree")
        self.view.setModel(self.model)
        self.view.setUniformRowHeights(True)
        self.view.setAlternatingRowColors(True)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        header = self.view.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col, w in ((1, 70), (2, 70), (3, 80), (4, 70)):
            header.resizeSection(col, w)
        self.view.selectionModel().currentChanged.connect(self._on_current_changed)

        self.detail, split = detail_split(self.view, "Select a line to see what it remembers.", 3)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        layout.addWidget(caption)
        layout.addLayout(top)
        layout.addWidget(split, 1)

    def set_model_ids(self, ids: list[str]) -> None:
        current = self.model_box.currentText()
        if [self.model_box.itemText(i) for i in range(self.model_box.count())] == ids:
            return
        self.model_box.blockSignals(True)
        self.model_box.clear()
        self.model_box.addItems(ids)
        if current in ids:
            self.model_box.setCurrentText(current)
        self.model_box.blockSignals(False)
        if self.isVisible():
            self.refresh(force=True)

    def current_model(self) -> str | None:
        return self.model_box.currentText() or None

    def refresh(self, force: bool = False) -> None:
        """Rebuild the tree if the rows (or the chosen model) changed since last time."""
        model_id = self.current_model()
        if not force and self._built_version == self._state.version and self._built_model == model_id:
            return
        self._built_version = self._state.version
        self._built_model = model_id
        rows = [r for r in self._state.rows() if r.model_id == model_id] if model_id else []
        expanded = self._expanded_keys()
        selected = self.view.currentIndex().data(KEY_ROLE)
        root = build_prefix_tree(rows)
        self.model.set_tree(root)
        # Open every branch of a small tree; of a big one only what was open before.
        auto = not expanded and len(rows) <= AUTO_EXPAND_ROWS
        for node in root.walk():
            if node.row is not None and node.children and (auto or node.row.key in expanded):
                self.view.setExpanded(self.model.index_of(node), True)
        if selected is not None:
            idx = self.model.find(selected)
            if idx.isValid():
                self.view.setCurrentIndex(idx)
        n_conv = sum(1 for n in root.walk() if n.row is not None and not n.children)
        self.summary.setText(f"{len(rows)} saved points · {n_conv} conversation ends")

    def _expanded_keys(self) -> set[bytes]:
        out = set()
        for node in self.model.root.walk():
            if node.row is not None and node.children and self.view.isExpanded(self.model.index_of(node)):
                out.add(node.row.key)
        return out

    def _on_current_changed(self, current: Any, previous: Any) -> None:
        node: TreeNode | None = current.data(NODE_ROLE) if current.isValid() else None
        if node is None or node.row is None:
            self.detail.clear()
            return
        row = node.row
        shared = node.parent.n_tokens if node.parent is not None else 0
        head = (
            f"{row.n_tokens:,} tokens · {fmt.TIER_LABELS.get(row.tier, row.tier)} · "
            f"{human_bytes(row.size)} · saved {fmt.age(row.created)} "
            f"({fmt.REASON_LABELS.get(row.save_reason, row.save_reason)}) · reused {row.hits}×\n"
        )
        if shared:
            head += f"The first {shared:,} tokens are shared with the entry above; this one adds {row.n_tokens - shared:,}.\n"
        text = self._previews.text(row)
        if text is None:
            body = "(Load this model to read the text it remembers.)"
        elif shared:
            before = self._previews.text(row, 0) or ""
            new = self._previews.text(row, shared) or ""
            old = transcript(before[: len(before) - len(new)])
            body = f"{old}\n\n──── new in this entry ────\n\n{transcript(new)}"
        else:
            body = transcript(text)
        self.detail.setPlainText(head + "\n" + body)
