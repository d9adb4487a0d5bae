"""``QAbstractItemModel`` adapter over the cache's chunk tree (``CacheStore.tree``).

The tree is ``app.cache.contents.tree.TreeNode``s — frozen, built off the GUI thread and replaced
whole (``set_tree``); a system prompt shared by several conversations is one node with
them below. Indexes carry a node id (``internalId``) looked up in a dict, never a Python
pointer. A node reads as words: its conversation's title (or "shared by N chats") and its
text, detokenized with its model and cleared of template markup.
"""

from __future__ import annotations

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QObject, QPersistentModelIndex, Qt

from app.cache.contents.index import Row
from app.cache.contents.tree import TreeNode
from app.template_text import readable
from app.ui.state import cache_fmt as fmt
from app.ui.state.previews import PreviewCache
from app.ui.state.titles import ConversationTitles

Index = QModelIndex | QPersistentModelIndex

NODE_ROLE = Qt.ItemDataRole.UserRole + 3
KEY_ROLE = Qt.ItemDataRole.UserRole + 1  # same as the table's: the row saved at this node

TREE_COLUMNS = ("What it holds", "Tokens", "Adds", "Chats", "Where", "Reused")
COL_LABEL, COL_TOKENS, COL_ADDS, COL_CHATS, COL_TIER, COL_HITS = range(len(TREE_COLUMNS))
TREE_TIPS = (
    "Each line is a stretch of tokens the cache holds once. Lines indented under it continue "
    "it: a system prompt shared by several chats is one line with the chats below.",
    "Tokens from the start of the conversation to the end of this line.",
    "Tokens this line adds to the one it continues.",
    "How many conversations use this line (and so did not compute it again).",
    "Where the saved point that ends on this line is kept (RAM, RAM file or Disk).",
    "How many times a request resumed from the saved point that ends on this line.",
)
LABEL_CHARS = 90
CONTEXT_TOKENS = 16  # tokens before a line, read only to learn who speaks at its start


class CacheTreeModel(QAbstractItemModel):
    def __init__(
        self, previews: PreviewCache, titles: ConversationTitles, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._previews = previews
        self._titles = titles
        self._tops: list[TreeNode] = []
        self._nodes: dict[int, TreeNode] = {}
        self._parent: dict[int, int] = {}  # node id -> parent node id (absent: a top node)
        self._place: dict[int, int] = {}  # node id -> row under its parent
        self._id_of: dict[int, int] = {}  # id(node) -> node id
        self._sample: dict[int, Row | None] = {}  # node id -> a row below it (its model)
        self._labels: dict[int, str] = {}

    def set_tree(self, tops: list[TreeNode]) -> None:
        self.beginResetModel()
        self._tops = list(tops)
        self._nodes.clear()
        self._parent.clear()
        self._place.clear()
        self._id_of.clear()
        self._sample.clear()
        self._labels.clear()
        stack: list[tuple[TreeNode, int | None, int]] = [
            (n, None, i) for i, n in enumerate(self._tops)
        ]
        while stack:
            node, parent, place = stack.pop()
            nid = len(self._nodes)
            self._nodes[nid] = node
            self._id_of[id(node)] = nid
            self._place[nid] = place
            if parent is not None:
                self._parent[nid] = parent
            stack.extend((c, nid, i) for i, c in enumerate(node.children))
        self.endResetModel()

    @property
    def tops(self) -> list[TreeNode]:
        return self._tops

    def node(self, index: Index) -> TreeNode | None:
        return self._nodes.get(index.internalId()) if index.isValid() else None

    def index_of(self, node: TreeNode, column: int = 0) -> QModelIndex:
        nid = self._id_of.get(id(node))
        if nid is None:
            return QModelIndex()
        return self.createIndex(self._place[nid], column, nid)

    def find(self, key: bytes) -> QModelIndex:
        """The node where the row with ``key`` ends."""
        for nid, node in self._nodes.items():
            if any(r.key == key for r in node.rows):
                return self.createIndex(self._place[nid], 0, nid)
        return QModelIndex()

    def sample_row(self, node: TreeNode) -> Row | None:
        """A row in ``node``'s subtree: every one of them has the node's tokens and model."""
        nid = self._id_of[id(node)]
        if nid not in self._sample:
            self._sample[nid] = next((r for n in node.walk() for r in n.rows), None)
        return self._sample[nid]

    def texts(self, node: TreeNode) -> tuple[str, str] | None:
        """(the text just before ``node``, ``node``'s own text), raw, or None without a
        loaded model. The words before name the speaker a continuing line starts with."""
        sample = self.sample_row(node)
        if sample is None:
            return None
        text = self._previews.decode(sample, node.tokens_le)
        if text is None:
            return None
        lead = max(0, node.start - CONTEXT_TOKENS)
        before = self._previews.decode(sample, sample.tokens_le[lead * 4 : node.start * 4]) or ""
        return before, text

    def label(self, node: TreeNode) -> str:
        nid = self._id_of[id(node)]
        label = self._labels.get(nid)
        if label is None:
            label, read = self._label(node)
            if read:  # NOTE: a stand-in shown while the model is not loaded is not kept
                self._labels[nid] = label
        return label

    def reread_text(self) -> None:
        """A model was loaded or unloaded: labels are read again when next shown."""
        self._labels.clear()
        if self._nodes:
            self.layoutAboutToBeChanged.emit()
            self.layoutChanged.emit()

    # -- QAbstractItemModel -------------------------------------------------------------------

    def index(self, row: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:  # noqa: B008
        if not self.hasIndex(row, column, parent):
            return QModelIndex()
        siblings = self._children(parent)
        if not 0 <= row < len(siblings):
            return QModelIndex()
        return self.createIndex(row, column, self._id_of[id(siblings[row])])

    def parent(self, index: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not index.isValid():
            return QModelIndex()
        pid = self._parent.get(index.internalId())
        if pid is None:
            return QModelIndex()
        return self.createIndex(self._place[pid], 0, pid)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008, N802
        if parent.isValid() and parent.column() != 0:
            return 0
        return len(self._children(parent))

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008, N802
        return len(TREE_COLUMNS)

    def headerData(  # noqa: N802
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> object:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(TREE_COLUMNS):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return TREE_COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return TREE_TIPS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        node = self.node(index)
        if node is None:
            return None
        col = index.column()
        if role == NODE_ROLE:
            return node
        if role == KEY_ROLE:
            return node.rows[0].key if node.rows else None
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(node, col)
        if role == Qt.ItemDataRole.ToolTipRole and col == COL_LABEL:
            return self._tooltip(node)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (COL_TOKENS, COL_ADDS, COL_CHATS, COL_HITS):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    # -- internals ----------------------------------------------------------------------------

    def _children(self, parent: Index) -> list[TreeNode] | tuple[TreeNode, ...]:
        node = self.node(parent)
        return self._tops if node is None else node.children

    def _display(self, node: TreeNode, col: int) -> str:
        if col == COL_LABEL:
            return self.label(node)
        if col == COL_TOKENS:
            return f"{node.end:,}"
        if col == COL_ADDS:
            return f"+{node.n_tokens:,}"
        if col == COL_CHATS:
            return str(len(node.sessions)) if node.sessions else "–"
        if col == COL_TIER:
            tiers = {fmt.TIER_LABELS.get(r.tier, r.tier) for r in node.rows}
            return ", ".join(sorted(tiers)) if tiers else "–"
        if col == COL_HITS:
            return str(sum(r.hits for r in node.rows)) if node.rows else "–"
        return ""

    def _label(self, node: TreeNode) -> tuple[str, bool]:
        """The line's label, and whether its words were read (False: the model is not
        loaded, so only who uses the line is known)."""
        texts = self.texts(node)
        if texts is None:
            words = "(the text shows when its model is loaded)"
        else:
            words = readable(texts[1], before=texts[0])
        if len(words) > LABEL_CHARS:
            words = words[: LABEL_CHARS - 1] + "…"
        if node.start and texts is not None:
            words = "… " + words
        who = self._titles.quoted(node.sessions)
        if len(node.sessions) > 1:
            return f"Shared by {len(node.sessions)} chats · {words}", texts is not None
        if who:
            return f"{who[0]} · {words}", texts is not None
        return words, texts is not None

    def _tooltip(self, node: TreeNode) -> str:
        lines = [f"Tokens {node.start:,}–{node.end:,}: this line holds {node.n_tokens:,} of them."]
        who = self._titles.quoted(node.sessions)
        if who:
            lines.append("Used by " + ", ".join(who) + ".")
        elif node.sessions:
            lines.append(f"Used by {len(node.sessions)} conversation(s).")
        if node.rows:
            lines.append(f"{len(node.rows)} saved point(s) end here.")
        return "\n".join(lines)
