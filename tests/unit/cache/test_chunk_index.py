"""The chunk tree in memory: chains, reference counts, supersession, missing chunks, and the
longest-common-prefix index."""

from __future__ import annotations

import random

from app.cache.blobs import kvc_chunked
from app.cache.contents.chunk_index import Chunk, ChunkIndex, Link
from app.cache.contents.lcp import PrefixIndex, Tombstones
from app.cache.keys import encode_tokens
from app.cache.prefix import common_prefix_bytes
from app.cache.saving.chunked_rows import links_for

C = 4
ROOT = kvc_chunked.chain_root(b"\x01" * 32, "q8_0", b"\x02" * 32, C)


def links(tokens: list[int]) -> list[Link]:
    return links_for(encode_tokens(tokens), ROOT, C)


def stored(link: Link, tier: str = "disk", size: int = 100) -> Chunk:
    return Chunk(link.key, link.parent, link.start, link.tokens_le, C, tier=tier, size=size)


def test_rows_share_chunks_and_counts_are_per_row() -> None:
    idx = ChunkIndex()
    a = links([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])  # 4 + 4 + 2
    b = links([1, 2, 3, 4, 5, 6, 7, 8, 20])  # shares the first two chunks
    for ln in a:
        idx.put(stored(ln))
    idx.attach(b"A", a)
    idx.put(stored(b[2]))
    idx.attach(b"B", b)
    assert idx.chain(b"A")[:2] == idx.chain(b"B")[:2]
    assert {len(idx.get(k).rows) for k in idx.chain(b"A")[:2]} == {2}  # type: ignore[union-attr]
    assert idx.usage("disk") == 4 * 100  # four unique chunks
    gone = idx.detach(b"A")
    assert [c.key for c in gone] == [a[2].key]  # only A's own tail was unused
    gone = idx.detach(b"B")
    assert {c.key for c in gone} == {b[0].key, b[1].key, b[2].key} and len(idx) == 0
    assert idx.usage("disk") == 0


def test_a_longer_chunk_supersedes_the_partial_it_extends() -> None:
    idx = ChunkIndex()
    short = links([1, 2, 3, 4, 5, 6])  # tail [5, 6]
    for ln in short:
        idx.put(stored(ln))
    idx.attach(b"S", short)
    longer = links([1, 2, 3, 4, 5, 6, 7])  # tail [5, 6, 7] extends [5, 6]
    gone = idx.put(stored(longer[1]))
    assert [c.key for c in gone] == [short[1].key]  # the old partial: delete its file
    assert idx.chain(b"S") == (short[0].key, longer[1].key)  # S now reads the longer one
    assert idx.get(longer[1].key).rows == {b"S"}  # type: ignore[union-attr]
    # a row whose tail a stored chunk already covers uses it, nothing new to store
    idx.attach(b"T", links([1, 2, 3, 4, 5]))
    assert idx.chain(b"T") == (short[0].key, longer[1].key)
    assert idx.usage("disk") == 200


def test_supersession_does_not_depend_on_the_order_chunks_are_found() -> None:
    """Start-up indexes files in any order: a partial found after its extension goes too."""
    idx = ChunkIndex()
    long_ = links([1, 2, 3, 4, 5, 6, 7, 8])[1]  # a full chunk [5..8]
    part = links([1, 2, 3, 4, 5, 6])[1]
    idx.put(stored(long_))
    gone = idx.put(stored(part))
    assert [c.key for c in gone] == [part.key] and idx.get(part.key) is None


def test_diverging_siblings_both_stay_and_resolve_exactly() -> None:
    idx = ChunkIndex()
    a = links([1, 2, 3, 4, 5, 6, 7])
    b = links([1, 2, 3, 4, 5, 9])  # diverges inside the second chunk
    for ln in a + b[1:]:
        idx.put(stored(ln))
    assert idx.resolve(a[1]).key == a[1].key  # type: ignore[union-attr]
    assert idx.resolve(b[1]).key == b[1].key  # type: ignore[union-attr]
    assert idx.resolve(links([1, 2, 3, 4, 5])[1]).key in {a[1].key, b[1].key}  # type: ignore[union-attr]
    assert idx.resolve(links([1, 2, 3, 4, 8])[1]) is None
    assert [c.key for c in idx.children(a[0].key)] == sorted([a[1].key, b[1].key], key=lambda k: idx.get(k).tokens_le)  # type: ignore[union-attr]


def test_a_missing_chunk_stays_indexed_while_rows_use_it_and_is_filled_again() -> None:
    idx = ChunkIndex()
    a = links([1, 2, 3, 4, 5, 6, 7, 8])
    for ln in a:
        idx.put(stored(ln))
    idx.attach(b"A", a)
    assert idx.mark_missing(a[0].key) is not None
    assert idx.get(a[0].key).tier is None and idx.usage("disk") == 100  # type: ignore[union-attr]
    assert idx.resolve(a[0]) is None
    idx.put(stored(a[0]))  # the same tokens saved again: same key, the rows are still there
    assert idx.get(a[0].key).rows == {b"A"} and idx.usage("disk") == 200  # type: ignore[union-attr]


def test_plan_branches_inside_a_chunk_instead_of_storing_its_head_again() -> None:
    idx = ChunkIndex()
    a = links([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])  # [1..4] [5..8] [9, 10]
    for ln in a:
        idx.put(stored(ln))
    idx.attach(b"A", a)
    b = idx.plan(ROOT, encode_tokens([1, 2, 3, 4, 5, 6, 99, 98, 97, 96, 95]), C)
    assert [(ln.start, len(ln.tokens_le) // 4) for ln in b] == [(0, 4), (4, 2), (6, 4), (10, 1)]
    assert b[0].key == a[0].key and b[1].parent == a[0].key
    assert b[2].parent == kvc_chunked.chunk_key(a[0].key, encode_tokens([5, 6]))  # below the branch point
    assert idx.resolve(b[1]).key == a[1].key  # type: ignore[union-attr]  # the head of [5..8]
    assert [ln for ln in b if idx.resolve(ln) is None] == b[2:]  # only B's own tokens are new
    idx.attach(b"B", b)
    assert idx.chain(b"B")[:2] == idx.chain(b"A")[:2]
    # a row extending a stored partial chunk gets a full step, which supersedes it
    c = idx.plan(ROOT, encode_tokens([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]), C)
    assert [(ln.start, len(ln.tokens_le) // 4) for ln in c] == [(0, 4), (4, 4), (8, 4)]
    assert idx.resolve(c[2]) is None
    # with nothing stored, the plan is the fixed grid
    assert ChunkIndex().plan(ROOT, encode_tokens(list(range(11))), C) == links(list(range(11)))


def test_best_child_skips_missing_chunks_on_both_sides() -> None:
    idx = ChunkIndex()
    rows = [[1, 2, 3, 4], [1, 2, 5, 6], [1, 7, 7, 7], [2, 2, 2, 2]]
    ls = [links(r)[0] for r in rows]
    for ln in ls:
        idx.put(stored(ln))
    idx.attach(b"R", [ls[1]])
    idx.mark_missing(ls[1].key)  # kept while R uses it, but nothing to read
    best, n = idx.best_child(ROOT, encode_tokens([1, 2, 5, 9]))
    assert best is not None and (best.key, n) == (ls[0].key, 2)
    assert idx.best_child(ROOT, encode_tokens([3])) == (None, 0)


def test_prefix_index_finds_the_longest_common_prefix_at_a_neighbour() -> None:
    rng = random.Random(3)
    idx = PrefixIndex()
    strings = []
    for i in range(400):
        base = [rng.randrange(6) for _ in range(rng.randrange(1, 30))]
        tokens = encode_tokens(base)
        strings.append(tokens)
        idx.add("ns", tokens, i.to_bytes(4, "big"))
    idx.add("other", encode_tokens([0] * 50), b"x")
    for _ in range(300):
        query = encode_tokens([rng.randrange(6) for _ in range(rng.randrange(0, 40))])
        n, key = idx.best("ns", query)
        brute = max(common_prefix_bytes(query, s) for s in strings)
        assert n == brute
        if n:
            assert key is not None and common_prefix_bytes(query, strings[int.from_bytes(key, "big")]) == n
    assert idx.best("nowhere", encode_tokens([1])) == (0, None)
    assert idx.best_elsewhere("ns", encode_tokens([0] * 60))[0] == 50


def test_prefix_index_remove_and_tombstone_budget() -> None:
    idx = PrefixIndex()
    idx.add("ns", encode_tokens([1, 2, 3]), b"a")
    idx.remove("ns", encode_tokens([1, 2, 3]), b"a")
    assert idx.best("ns", encode_tokens([1, 2, 3])) == (0, None) and len(idx) == 0
    tomb = Tombstones(max_entries=2)
    for i in range(3):
        tomb.add("ns", encode_tokens([i] * 5), bytes([i]))
    assert tomb.best("ns", encode_tokens([0] * 5))[0] == 0  # aged out
    assert tomb.best("ns", encode_tokens([2] * 9))[0] == 5


def test_served_counts_what_a_chain_really_holds_for_its_row() -> None:
    idx = ChunkIndex()
    a = links([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    for ln in a:
        idx.put(stored(ln))
    idx.attach(b"A", a)
    row_b = encode_tokens([1, 2, 3, 4, 5, 6, 99, 98])
    b = idx.plan(ROOT, row_b, C)
    idx.put(stored(b[2]))
    idx.attach(b"B", b)
    assert idx.served(b"A", encode_tokens(list(range(1, 11)))) == 10
    assert idx.served(b"B", row_b) == 8  # 4 + the head (2) of A's second chunk + its own 2
    assert idx.served(b"B", encode_tokens([1, 2, 3, 4, 5, 0, 99, 98])) == 4  # other tokens: not served
    idx.mark_missing(a[1].key)  # the shared chunk is lost: both stop before it
    assert idx.served(b"A", encode_tokens(list(range(1, 11)))) == 4 and idx.served(b"B", row_b) == 4
