"""The "Conversation tree" tab: what one model's cache holds, as the tree of shared prefixes.

The tree is the store's (``CacheStore.tree``): a system prompt shared by several chats is
one line with the chats below it, and a regenerated or edited reply branches off at the
token where it diverged. It is built on a worker thread (a coroutine on the GUI loop) when
the rows or the chosen model change; lines are named by their conversations' titles.
"""

from __future__ import annotations

from PySide6.QtCore import QModelIndex
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

from app.cache.contents.tree import TreeNode
from app.cache.store import CacheStore
from app.template_text import transcript
from app.ui.cache.detail_split import detail_split
from app.ui.qt_models.cache_tree import COL_LABEL, KEY_ROLE, NODE_ROLE, CacheTreeModel
from app.ui.state import cache_fmt as fmt
from app.ui.state.previews import PreviewCache
from app.ui.state.row_state import CacheRowState
from app.ui.state.titles import ConversationTitles
from app.ui.tasks import TaskRunner
from app.units import human_bytes

AUTO_EXPAND_NODES = 500


class TreePanel(QWidget):
    def __init__(
        self,
        store: CacheStore,
        state: CacheRowState,
        previews: PreviewCache,
        titles: ConversationTitles,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("cacheTreePanel")
        self._store = store
        self._state = state
        self._previews = previews
        self._titles = titles
        self._built: tuple[int, str | None] | None = None  # (rows version, model) shown
        self._runner = TaskRunner(max_threads=1, parent=self)
        caption = QLabel(
            "What the cache holds, as the conversations that share it: a line indented "
            "under another continues it, so everything up to there was computed once and "
            "reused. Chats with the same system prompt sit side by side under that prompt."
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

        self.model = CacheTreeModel(previews, titles, self)
        self.model.setObjectName("cacheTreeModel")
        self.view = QTreeView()
        self.view.setObjectName("cachePrefixTree")
        self.view.setModel(self.model)
        self.view.setUniformRowHeights(True)
        self.view.setAlternatingRowColors(True)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        header = self.view.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(COL_LABEL, QHeaderView.ResizeMode.Stretch)
        for col, w in ((1, 70), (2, 70), (3, 50), (4, 80), (5, 60)):
            header.resizeSection(col, w)
        self.view.selectionModel().currentChanged.connect(self._on_current_changed)

        self.detail, split = detail_split(self.view, "Select a line to see what it holds.", 3)

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
        """Rebuild the tree (off the GUI thread) if the rows or the model changed."""
        wanted = (self._state.version, self.current_model())
        if not force and self._built == wanted:
            return
        self._built = wanted
        self._runner.start(self._rebuild(wanted[1]), name="cache tree")

    async def _rebuild(self, model_id: str | None) -> None:
        tops: list[TreeNode] = (
            await self._runner.call(lambda: self._store.tree(model_id)) if model_id else []
        )
        if model_id != self.current_model():
            return  # another model was picked meanwhile; its own rebuild is on the way
        expanded = self._expanded_keys()
        selected = self.view.currentIndex().data(KEY_ROLE)
        self._titles.clear()
        self.model.set_tree(tops)
        nodes = [n for top in tops for n in top.walk()]
        # Open every branch of a small tree; of a big one only what was open before.
        auto = not expanded and len(nodes) <= AUTO_EXPAND_NODES
        for node in nodes:
            if node.children and (auto or _first_key(node) in expanded):
                self.view.setExpanded(self.model.index_of(node), True)
        if selected is not None:
            idx = self.model.find(selected)
            if idx.isValid():
                self.view.setCurrentIndex(idx)
        n_rows = sum(t.n_rows for t in tops)
        n_chats = len({s for t in tops for s in t.sessions})
        self.summary.setText(f"{n_rows} saved points · {n_chats} conversations")

    def _expanded_keys(self) -> set[bytes]:
        out = set()
        for top in self.model.tops:
            for node in top.walk():
                if node.children and self.view.isExpanded(self.model.index_of(node)):
                    key = _first_key(node)
                    if key is not None:
                        out.add(key)
        return out

    def _on_current_changed(self, current: QModelIndex, previous: QModelIndex) -> None:
        node: TreeNode | None = current.data(NODE_ROLE) if current.isValid() else None
        self.detail.setPlainText("" if node is None else self.describe(node))

    def describe(self, node: TreeNode) -> str:
        """What one line holds, in words: who uses it, what is saved there, and its text."""
        lines = [f"Tokens {node.start:,}–{node.end:,} ({node.n_tokens:,} on this line)."]
        who = self._titles.quoted(node.sessions)
        if len(node.sessions) > 1:
            lines.append(
                f"Shared by {len(node.sessions)} conversations"
                + (f": {', '.join(who)}" if who else "")
                + ". It was computed once and is reused by each of them."
            )
        elif who:
            lines.append(f"From the conversation {who[0]}.")
        if node.start:
            lines.append(f"It continues the line above, which holds tokens 0–{node.start:,}.")
        for row in node.rows:
            lines.append(
                f"A saved point ends here: {fmt.TIER_LABELS.get(row.tier, row.tier)}, "
                f"{human_bytes(row.size)}, saved {fmt.age(row.created)} "
                f"({fmt.REASON_LABELS.get(row.save_reason, row.save_reason)}), "
                f"reused {row.hits}×."
            )
        texts = self.model.texts(node)
        body = (
            transcript(texts[1], before=texts[0])
            if texts is not None
            else "(Load this model to read the text.)"
        )
        return "\n".join(lines) + "\n\n" + body


def _first_key(node: TreeNode) -> bytes | None:
    """A stable name for a node across rebuilds: the first row in its subtree."""
    return next((r.key for n in node.walk() for r in n.rows), None)
