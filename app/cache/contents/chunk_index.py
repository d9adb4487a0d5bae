"""The in-memory index of KVC v2 chunks (``app.cache.blobs.kvc_chunked``): which chunks are stored and
where, which rows use each one (its reference count), and, under each parent, the children
sorted by their tokens — the chunk tree.

Rules it keeps:

* A row's **chain** is the chunk keys it uses, in position order: each chunk starts where
  the row's previous link ends, and any of them may be a stored chunk *longer* than the
  row's step (cut on restore): a row that branches off inside a chunk uses the head of
  that chunk and continues below the branch point (``plan``), so a shared prefix is stored
  once whatever its length.
* Under one parent no chunk's tokens are a prefix of another's: ``put`` lets a new chunk
  **supersede** every stored or missing sibling it extends, moving their rows over to it and
  handing the old ones back for deletion.
* A chunk stays indexed while a row uses it, even when its bytes are gone (``tier`` None:
  lost with the RAM tier, found corrupt, or deleted under a load). Those rows restore up to
  that chunk, and a later save of the same tokens (same key) fills it again.
* A chunk no row uses is dropped from the index (``detach`` returns it for deletion).

Not thread-safe; the catalog's lock guards it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.cache.blobs.kvc_chunked import chunk_key
from app.cache.blobs.tiers import TIERS
from app.cache.prefix import common_prefix_bytes


@dataclass(slots=True)
class Chunk:
    """One chunk's index entry (mutable; only the catalog's lock holder touches it)."""

    key: bytes
    parent: bytes
    start: int
    tokens_le: bytes
    chunk_size: int
    tier: str | None = None  # None: not stored (see the module docstring)
    size: int = 0  # file bytes, 0 when not stored
    created: float = 0.0
    rows: set[bytes] = field(default_factory=set)

    @property
    def n(self) -> int:
        return len(self.tokens_le) // 4

    @property
    def is_stored(self) -> bool:
        return self.tier is not None


@dataclass(frozen=True, slots=True)
class Link:
    """One step of a chain as a row needs it: the chunk's exact key and what it must hold."""

    key: bytes
    parent: bytes
    start: int
    tokens_le: bytes  # the row's tokens in this step (the tail may be shorter than C)


class ChunkIndex:
    def __init__(self) -> None:
        self._chunks: dict[bytes, Chunk] = {}
        self._children: dict[bytes, list[tuple[bytes, bytes]]] = {}  # parent → [(tokens, key)]
        self._chains: dict[bytes, tuple[bytes, ...]] = {}  # row key → chunk keys
        self._usage = dict.fromkeys(TIERS, 0)

    def __len__(self) -> int:
        return len(self._chunks)

    def __iter__(self) -> Iterator[Chunk]:
        return iter(list(self._chunks.values()))

    def get(self, key: bytes) -> Chunk | None:
        return self._chunks.get(key)

    def chain(self, row_key: bytes) -> tuple[bytes, ...]:
        return self._chains.get(row_key, ())

    def has_row(self, row_key: bytes) -> bool:
        return row_key in self._chains

    def usage(self, tier: str) -> int:
        return self._usage[tier]

    def children(self, parent: bytes) -> list[Chunk]:
        """Chunks under ``parent``, sorted by their tokens (the tree's edges)."""
        return [self._chunks[k] for _, k in self._children.get(parent, ())]

    # -- resolving a row's chain ---------------------------------------------------------

    def covering(self, parent: bytes, tokens_le: bytes, skip: bytes = b"") -> Chunk | None:
        """A stored chunk under ``parent`` (other than ``skip``) whose tokens start with
        ``tokens_le``: they sort right after ``tokens_le``, one contiguous run."""
        kids = self._children.get(parent)
        if not kids:
            return None
        i = bisect.bisect_left(kids, (tokens_le, b""))
        while i < len(kids) and kids[i][0].startswith(tokens_le):
            chunk = self._chunks[kids[i][1]]
            if chunk.is_stored and chunk.key != skip:
                return chunk
            i += 1
        return None

    def best_child(self, parent: bytes, tokens_le: bytes) -> tuple[Chunk | None, int]:
        """The stored chunk under ``parent`` sharing the most leading tokens with
        ``tokens_le``, and how many it shares (0: none)."""
        kids = self._children.get(parent)
        if not kids:
            return None, 0
        # Sorted strings: the common prefix with ``tokens_le`` only shrinks moving away
        # from its insertion point, so the first stored chunk on each side is that side's best.
        i = bisect.bisect_left(kids, (tokens_le, b""))
        best: Chunk | None = None
        shared = 0
        for order in (range(i, len(kids)), range(i - 1, -1, -1)):
            for j in order:
                chunk = self._chunks[kids[j][1]]
                if chunk.is_stored:
                    n = common_prefix_bytes(chunk.tokens_le, tokens_le)
                    if n > shared:
                        best, shared = chunk, n
                    break
        return best, shared

    def plan(self, root: bytes, tokens_le: bytes, chunk_size: int) -> list[Link]:
        """The chain a token string needs, laid over the chunks already stored.

        Walking down from ``root``, each step takes the stored child sharing the most
        tokens with what is left: all of it when the row contains it; only its head when
        the row branches off inside it (the next link then starts at the branch point, a
        chunk keyed by that head); and when nothing is shared, or the best is a partial
        chunk the row extends, a new ``chunk_size`` step (which supersedes that partial).
        The links not served by a stored chunk are the chunks a save writes.
        """
        links: list[Link] = []
        parent, pos, step = root, 0, chunk_size * 4
        while pos < len(tokens_le):
            rest = tokens_le[pos:]
            best, n = self.best_child(parent, rest)
            full = best is not None and n == best.n
            if best is None or (full and best.n < chunk_size and n < len(rest) // 4):
                take = rest[:step]
            else:
                take = rest[: 4 * n]
            key = chunk_key(parent, take)
            links.append(Link(key, parent, pos // 4, take))
            parent, pos = key, pos + len(take)
        return links

    def resolve(self, link: Link) -> Chunk | None:
        """The stored chunk that serves ``link``: its exact key, else one extending it."""
        exact = self._chunks.get(link.key)
        if exact is not None and exact.is_stored:
            return exact
        return self.covering(link.parent, link.tokens_le)

    def served(self, row_key: bytes, tokens_le: bytes) -> int:
        """How many of a row's leading tokens its chain serves soundly: each link stored,
        starting where the previous one ends, and holding the row's tokens."""
        keys = self._chains.get(row_key, ())
        chain = [self._chunks.get(k) for k in keys]
        covered = 0
        for i, chunk in enumerate(chain):
            if chunk is None or not chunk.is_stored or chunk.start != covered:
                break
            nxt = chain[i + 1] if i + 1 < len(chain) else None
            end = nxt.start if nxt is not None else len(tokens_le) // 4
            used = min(chunk.n, end - covered)
            if used <= 0 or chunk.tokens_le[: 4 * used] != tokens_le[4 * covered : 4 * (covered + used)]:
                break
            covered += used
        return covered

    # -- changing the set of chunks ------------------------------------------------------

    def put(self, chunk: Chunk) -> list[Chunk]:
        """Index a stored chunk (filling a missing entry with its key, rows kept).

        Returns the siblings it supersedes, already removed from the index: delete the
        stored ones' files.
        """
        assert chunk.tier is not None
        old = self._chunks.get(chunk.key)
        if old is not None:
            if old.is_stored:
                self._usage[old.tier] -= old.size  # type: ignore[index]
            chunk.rows = old.rows
        else:
            bisect.insort(self._children.setdefault(chunk.parent, []), (chunk.tokens_le, chunk.key))
        self._chunks[chunk.key] = chunk
        self._usage[chunk.tier] += chunk.size
        longer = self.covering(chunk.parent, chunk.tokens_le, skip=chunk.key)
        if longer is not None:
            # Already extended by a stored sibling (start-up indexes files in any order):
            # the new one is the superseded one.
            self._move_rows(chunk, longer)
            self._drop(chunk)
            return [chunk]
        return self._supersede(chunk)

    def _move_rows(self, old: Chunk, new: Chunk) -> None:
        for row in old.rows:
            self._chains[row] = tuple(new.key if k == old.key else k for k in self._chains[row])
        new.rows |= old.rows
        old.rows = set()

    def _supersede(self, new: Chunk) -> list[Chunk]:
        # NOTE: a sibling that is a prefix of new's tokens is exactly new.tokens[:L] for
        # some L < n: one bisect per length instead of a scan over every sibling (the
        # root may have thousands of children, most starting with the same token).
        kids = self._children[new.parent]
        gone: list[Chunk] = []
        for end in range(4, len(new.tokens_le), 4):
            probe = new.tokens_le[:end]
            i = bisect.bisect_left(kids, (probe, b""))
            if i < len(kids) and kids[i][0] == probe:
                old = self._chunks[kids[i][1]]
                self._move_rows(old, new)
                self._drop(old)
                gone.append(old)
        return gone

    def attach(self, row_key: bytes, links: list[Link]) -> None:
        """Record that a row uses these chunks (each link resolved to a stored chunk when
        one serves it, else to a missing entry under the link's own key)."""
        keys: list[bytes] = []
        for link in links:
            chunk = self.resolve(link)
            if chunk is None:
                chunk = self._chunks.get(link.key)
            if chunk is None:
                chunk = Chunk(link.key, link.parent, link.start, link.tokens_le, 0)
                self._chunks[link.key] = chunk
                bisect.insort(self._children.setdefault(link.parent, []), (link.tokens_le, link.key))
            chunk.rows.add(row_key)
            keys.append(chunk.key)
        old = self._chains.get(row_key)
        self._chains[row_key] = tuple(keys)
        if old is not None:  # re-attached: release what the old chain used and this does not
            for key in set(old) - set(keys):
                self._release(key, row_key)

    def detach(self, row_key: bytes) -> list[Chunk]:
        """Forget a row; returns the chunks no row uses any more (removed from the index)."""
        gone: list[Chunk] = []
        for key in self._chains.pop(row_key, ()):
            chunk = self._release(key, row_key)
            if chunk is not None:
                gone.append(chunk)
        return gone

    def _release(self, key: bytes, row_key: bytes) -> Chunk | None:
        chunk = self._chunks.get(key)
        if chunk is None:
            return None
        chunk.rows.discard(row_key)
        if chunk.rows:
            return None
        self._drop(chunk)
        return chunk

    def unused(self) -> list[Chunk]:
        """Stored chunks no row uses (after start-up, or another process's save between
        its chunks and its manifest)."""
        return [c for c in self._chunks.values() if not c.rows]

    def discard_unused(self, key: bytes) -> Chunk | None:
        """Drop a chunk no row uses; returns it (delete its file), else None."""
        chunk = self._chunks.get(key)
        if chunk is None or chunk.rows:
            return None
        self._drop(chunk)
        return chunk

    def mark_missing(self, key: bytes) -> Chunk | None:
        """The chunk's bytes are gone (corrupt, lost): keep the entry while rows use it."""
        chunk = self._chunks.get(key)
        if chunk is None or not chunk.is_stored:
            return None
        self._usage[chunk.tier] -= chunk.size  # type: ignore[index]
        chunk.tier, chunk.size = None, 0
        if not chunk.rows:
            self._drop(chunk)
        return chunk

    def move(self, key: bytes, tier: str) -> None:
        chunk = self._chunks[key]
        assert chunk.tier is not None
        self._usage[chunk.tier] -= chunk.size
        self._usage[tier] += chunk.size
        chunk.tier = tier

    def _drop(self, chunk: Chunk) -> None:
        self._chunks.pop(chunk.key, None)
        if chunk.is_stored:
            self._usage[chunk.tier] -= chunk.size  # type: ignore[index]
        kids = self._children.get(chunk.parent)
        if kids is not None:
            i = bisect.bisect_left(kids, (chunk.tokens_le, chunk.key))
            if i < len(kids) and kids[i][1] == chunk.key:
                del kids[i]
            if not kids:
                del self._children[chunk.parent]
