"""The tree of what the cache holds, for the dashboard: one node per run of tokens that a
set of rows shares, so a system prompt shared by twenty conversations is one node with the
twenty under it, and a regenerated or edited reply branches from the exact token where it
diverges (the chunk tree, at token precision: ``chunk_index`` decides what is stored, this
decides what is shown).

Built from row snapshots (a radix tree over their token strings) in one pass: within a key
namespace the rows are sorted by their token bytes, so each row's path shares with the
previous row's path exactly their longest common prefix; a stack of the previous path is
cut back to that length (splitting a node when the prefix ends inside it) and the new
row's remainder hangs below.

NOTE: measured here, 10,000 rows (1,000 ten-turn chats on one 300-token system prompt,
8.5 M tokens) built in 0.65-1.0 s on 2 cores busy with other work (load ~10): build it off
the GUI thread, once per burst of changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from app.cache.contents.rows import Namespace, Row
from app.cache.prefix import common_prefix_bytes


@dataclass(frozen=True, slots=True)
class TreeNode:
    """Tokens ``[start, end)`` shared by every row below; immutable, safe on any thread."""

    start: int
    end: int
    tokens_le: bytes = field(repr=False)  # this node's own tokens, u32 little-endian
    rows: tuple[Row, ...]  # rows that end exactly here (a saved prefix of this length)
    children: tuple[TreeNode, ...]
    n_rows: int  # rows in this subtree, these included
    sessions: tuple[str, ...]  # distinct session ids in the subtree (conversations)
    namespace: Namespace | None = None  # set on the top nodes (one model identity each)

    @property
    def n_tokens(self) -> int:
        return self.end - self.start

    def walk(self) -> Iterable[TreeNode]:
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


@dataclass(eq=False, slots=True)
class _Node:
    start: int
    end: int
    tokens_le: bytes
    rows: list[Row] = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)

    def split(self, at: int) -> _Node:
        """Cut this node at token ``at``: it becomes the head and the returned tail keeps
        its rows and children."""
        cut = (at - self.start) * 4
        tail = _Node(at, self.end, self.tokens_le[cut:], self.rows, self.children)
        self.end, self.tokens_le, self.rows, self.children = at, self.tokens_le[:cut], [], [tail]
        return tail


def build_tree(rows: Iterable[Row]) -> list[TreeNode]:
    """The top nodes (one or more per key namespace), biggest subtrees first."""
    groups: dict[Namespace, list[Row]] = {}
    for row in rows:
        if row.status == "available" and row.n_tokens > 0:
            groups.setdefault(row.namespace, []).append(row)
    tops: list[TreeNode] = []
    for ns, group in groups.items():
        root = _Node(0, 0, b"")
        group.sort(key=lambda r: r.tokens_le)
        stack = [root]
        prev = b""
        for row in group:
            shared = common_prefix_bytes(prev, row.tokens_le)
            while len(stack) > 1 and stack[-1].start >= shared:
                stack.pop()
            top = stack[-1]
            if top.end > shared:
                top.split(shared)
            if row.n_tokens > shared:
                leaf = _Node(shared, row.n_tokens, row.tokens_le[shared * 4 :], [row])
                top.children.append(leaf)
                stack.append(leaf)
            else:  # NOTE: cannot happen (sorted, unique per namespace); kept total anyway
                top.rows.append(row)
            prev = row.tokens_le
        tops += [_freeze(child, ns) for child in root.children]
    tops.sort(key=lambda n: (-n.n_rows, n.start))
    return tops


def _freeze(top: _Node, ns: Namespace | None = None) -> TreeNode:
    """Immutable nodes, bottom-up without recursion (a long chat may be a deep path)."""
    order: list[_Node] = []
    stack = [top]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.children)
    done: dict[int, TreeNode] = {}
    for node in reversed(order):  # every child before its parent
        children = tuple(done.pop(id(c)) for c in node.children)
        sessions = {r.session_id for r in node.rows if r.session_id}
        for child in children:
            sessions.update(child.sessions)
        done[id(node)] = TreeNode(
            start=node.start, end=node.end, tokens_le=node.tokens_le, rows=tuple(node.rows),
            children=children, n_rows=len(node.rows) + sum(c.n_rows for c in children),
            sessions=tuple(sorted(sessions)), namespace=ns if node is top else None,
        )  # fmt: skip
    return done[id(top)]
