"""The prefix tree of cache rows: which saved conversation extends which. Plain Python.

A row's parent is the longest other row (same key namespace) whose tokens are a prefix of
it. Built like the store's longest-prefix lookup, so no pair of rows is ever compared:
rows are grouped by namespace; for each row, one incremental sha256 pass over its tokens
takes a digest only at lengths some shorter row has *and* whose last token matches
(``(length, last token)`` set), and the digests are looked up in a key → row dict. Cost:
O(total tokens) hashing plus O(1) probes; equal keys are confirmed by comparing bytes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.cache.index import Row, prefix_keys
from app.cache.keys import KeyMeta, decode_tokens


@dataclass(eq=False, slots=True)
class TreeNode:
    """One row in the tree. ``row`` is None only for the invisible root."""

    row: Row | None
    parent: TreeNode | None = None
    children: list[TreeNode] = field(default_factory=list)
    row_in_parent: int = 0

    @property
    def n_tokens(self) -> int:
        return self.row.n_tokens if self.row is not None else 0

    @property
    def n_new_tokens(self) -> int:
        """Tokens this row adds to its parent (all of them for a top-level row)."""
        base = self.parent.n_tokens if self.parent is not None else 0
        return self.n_tokens - base

    def walk(self) -> Iterable[TreeNode]:
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


def _meta(row: Row) -> KeyMeta | None:
    try:
        return KeyMeta(bytes.fromhex(row.fingerprint), row.quant_type, bytes.fromhex(row.ctx_hash))
    except ValueError:
        return None


def build_prefix_tree(rows: Iterable[Row]) -> TreeNode:
    """The tree of ``rows`` under an invisible root; children ordered by length, then age."""
    root = TreeNode(None)
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for row in rows:
        if row.status == "available" and row.n_tokens > 0:
            groups.setdefault((row.fingerprint, row.quant_type, row.ctx_hash), []).append(row)
    nodes: dict[bytes, TreeNode] = {}
    for group in groups.values():
        group.sort(key=lambda r: (r.n_tokens, r.created))
        meta = _meta(group[0])
        by_key: dict[bytes, Row] = {}
        lengths: list[int] = []  # distinct lengths seen so far (ascending)
        tails: set[int] = set()  # (length << 32) | last token, as in app.cache.index
        for row in group:
            tokens = decode_tokens(row.tokens_le)
            parent = _longest_prefix_row(row, tokens, meta, by_key, lengths, tails)
            node = TreeNode(row, parent=nodes[parent.key] if parent is not None else root)
            nodes[row.key] = node
            by_key[row.key] = row
            if not lengths or lengths[-1] != row.n_tokens:
                bisect.insort(lengths, row.n_tokens)
            tails.add((row.n_tokens << 32) | tokens[-1])
    for node in nodes.values():
        assert node.parent is not None
        node.parent.children.append(node)
    for node in root.walk():
        node.children.sort(key=lambda n: (n.n_tokens, n.row.created if n.row else 0.0))
        for i, child in enumerate(node.children):
            child.row_in_parent = i
    return root


def _longest_prefix_row(
    row: Row,
    tokens: list[int],
    meta: KeyMeta | None,
    by_key: dict[bytes, Row],
    lengths: list[int],
    tails: set[int],
) -> Row | None:
    if meta is None or not lengths:
        return None
    hi = bisect.bisect_left(lengths, row.n_tokens)  # proper prefixes only
    # NOTE: walk whichever is shorter, the known lengths or the row's own tokens: both
    # are bounded by the row's length, so the whole build stays O(total tokens).
    if hi <= row.n_tokens:
        cands = [n for n in lengths[:hi] if (n << 32 | tokens[n - 1]) in tails]
    else:
        cands = [n for n in range(1, row.n_tokens) if (n << 32 | tokens[n - 1]) in tails]
    if not cands:
        return None
    data = row.tokens_le
    keys = prefix_keys(meta.hasher(), data[: cands[-1] * 4], cands)
    for n, key in zip(reversed(cands), reversed(keys), strict=True):
        cand = by_key.get(key)
        if cand is not None and cand.tokens_le == data[: n * 4]:
            return cand
    return None
