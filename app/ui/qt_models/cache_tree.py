"""``QAbstractItemModel`` adapter over a :class:`~app.ui.cache.prefix_tree.TreeNode` tree.

The tree is plain Python and rebuilt whole (``set_tree``) when the rows change; indexes
carry a node id (``internalId``) looked up in a dict, never a raw Python pointer.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QPersistentModelIndex, Qt

from app.template_text import readable
from app.ui.cache import fmt
from app.ui.cache.prefix_tree import TreeNode
from app.ui.cache.previews import PreviewCache

Index = QModelIndex | QPersistentModelIndex

NODE_ROLE = Qt.ItemDataRole.UserRole + 3
KEY_ROLE = Qt.ItemDataRole.UserRole + 1  # same as the table's

TREE_COLUMNS = ("Conversation", "Tokens", "Adds", "Where", "Reused")
TREE_TIPS = (
    "Each line is one saved point of a conversation. Indented lines continue the line "
    "above: they share all of its tokens, so only the new part had to be computed.",
    "Total tokens remembered at this point.",
    "Tokens this entry adds to the one it continues.",
    "Where this entry is kept (RAM, RAM file or Disk).",
    "How many times a request resumed from this entry.",
)


class CachePrefixTreeModel(QAbstractItemModel):
    def __init__(self, previews: PreviewCache, parent: Any = None) -> None:
        super().__init__(parent)
        self._previews = previews
        self._root = TreeNode(None)
        self._ids: dict[int, TreeNode] = {}
        self._id_of: dict[int, int] = {}  # id(node) -> our id
        self._labels: dict[int, str] = {}  # node id -> label (detokenizing is not free)

    def set_tree(self, root: TreeNode) -> None:
        self.beginResetModel()
        self._root = root
        self._ids.clear()
        self._id_of.clear()
        self._labels.clear()
        for i, node in enumerate(root.walk()):
            self._ids[i] = node
            self._id_of[id(node)] = i
        self.endResetModel()

    @property
    def root(self) -> TreeNode:
        return self._root

    def node(self, index: Index) -> TreeNode:
        if not index.isValid():
            return self._root
        return self._ids[index.internalId()]

    def index_of(self, node: TreeNode, column: int = 0) -> QModelIndex:
        if node is self._root or node.parent is None:
            return QModelIndex()
        return self.createIndex(node.row_in_parent, column, self._id_of[id(node)])

    def find(self, key: bytes) -> QModelIndex:
        for node in self._root.walk():
            if node.row is not None and node.row.key == key:
                return self.index_of(node)
        return QModelIndex()

    # -- QAbstractItemModel -------------------------------------------------------------------

    def index(self, row: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:  # noqa: B008
        if not self.hasIndex(row, column, parent):
            return QModelIndex()
        node = self.node(parent)
        if not 0 <= row < len(node.children):
            return QModelIndex()
        return self.createIndex(row, column, self._id_of[id(node.children[row])])

    def parent(self, index: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not index.isValid():
            return QModelIndex()
        node = self._ids.get(index.internalId())
        if node is None or node.parent is None:
            return QModelIndex()
        return self.index_of(node.parent)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        if parent.isValid() and parent.column() != 0:
            return 0
        return len(self.node(parent).children)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return len(TREE_COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(TREE_COLUMNS):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return TREE_COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return TREE_TIPS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        node = self._ids.get(index.internalId())
        if node is None or node.row is None:
            return None
        row = node.row
        col = index.column()
        if role == NODE_ROLE:
            return node
        if role == KEY_ROLE:
            return row.key
        if role == Qt.ItemDataRole.DisplayRole:
            if col == 0:
                nid = index.internalId()
                label = self._labels.get(nid)
                if label is None:
                    label = self._labels[nid] = self._label(node)
                return label
            if col == 1:
                return f"{row.n_tokens:,}"
            if col == 2:
                return f"+{node.n_new_tokens:,}"
            if col == 3:
                return fmt.TIER_LABELS.get(row.tier, row.tier)
            if col == 4:
                return str(row.hits)
        if role == Qt.ItemDataRole.ToolTipRole and col == 0:
            shared = node.parent.n_tokens if node.parent else 0
            return (
                f"{row.n_tokens:,} tokens; the first {shared:,} are shared with the line above."
                if shared
                else f"{row.n_tokens:,} tokens; starts a conversation."
            )
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (1, 2, 4):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def _label(self, node: TreeNode) -> str:
        row = node.row
        assert row is not None
        start = node.parent.n_tokens if node.parent is not None else 0
        text = self._previews.text(row, start)
        if text is None:
            return f"{fmt.REASON_LABELS.get(row.save_reason, row.save_reason)} · {row.key_hex[:8]}"
        text = readable(text)
        return ("… " if start else "") + (text[:90] + "…" if len(text) > 90 else text)
