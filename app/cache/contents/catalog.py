"""The catalog: every row the cache holds, published or still being written, the chunks
under the chunked rows, and the bytes each tier holds. The invariant
``usage[tier] == bytes of the v1 blobs, v2 manifests and v2 chunks in tier`` lives here and
nowhere else: every change of the row or chunk set goes through these methods.

Indexes, all kept in step by ``add`` / ``remove`` / ``add_pending`` / ``drop_pending``:

* ``index`` (``RowIndex``): published rows by key, and the any-length "longest row that is a
  prefix of the prompt" lookup; ``pending_index`` the same for saves not yet written
  (read-your-writes: a save is found the moment it is submitted); ``whole`` and
  ``pending_whole`` the same for rows that cannot be cut (v1 blobs), the only ones a
  lookup still needs it for.
* ``cuttable`` / ``everything`` (``PrefixIndex``): the longest common prefix of a prompt with
  any row that can be cut (chunked rows and parseable pending saves) / with any row at
  all, which says how much a miss shared and with what; ``tombstones`` the same for
  recently evicted rows.
* ``chunks`` (``ChunkIndex``): the chunk tree and reference counts.

Thread-safe: every method takes ``lock`` (re-entrant), which callers also hold when a few
calls must be atomic together (the store's condition variable is built on it).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.cache.blobs.tiers import TIERS
from app.cache.contents.chunk_index import Chunk, ChunkIndex, Link
from app.cache.contents.index import RowIndex, prefix_keys
from app.cache.contents.lcp import PrefixIndex, Tombstones
from app.cache.contents.rows import Namespace, Row
from app.cache.keys import KeyMeta, encode_tokens, quant_byte


@dataclass(frozen=True, slots=True)
class Pending:
    """A submitted save the writer has not published yet, readable from memory."""

    row: Row
    job: Any  # the store's SaveJob (payload in memory)
    cuttable: bool  # its payload is a state ``seqstate`` can cut


def namespace_of(meta: KeyMeta) -> Namespace:
    return (meta.fingerprint.hex(), quant_byte(meta.quant_type), meta.ctx_params_hash.hex())


class Catalog:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.index = RowIndex()
        self.pending_index = RowIndex()
        self.whole = RowIndex()
        self.pending_whole = RowIndex()
        self.chunks = ChunkIndex()
        self.cuttable = PrefixIndex()
        self.everything = PrefixIndex()
        self.tombstones = Tombstones()
        self.load_pins: Counter[bytes] = Counter()
        self._pending: dict[bytes, Pending] = {}
        self._own: dict[bytes, tuple[str, int]] = {}  # row key → (tier, blob/manifest bytes)
        self._own_usage = dict.fromkeys(TIERS, 0)

    def __len__(self) -> int:
        with self.lock:
            return len(self.index)

    def __contains__(self, key: object) -> bool:
        with self.lock:
            return key in self.index

    def get(self, key: bytes) -> Row | None:
        """A published row."""
        with self.lock:
            return self.index.get(key)

    def find(self, key: bytes) -> Row | None:
        """A published row, else a pending one (status ``writing``)."""
        with self.lock:
            row = self.index.get(key)
            if row is None:
                pending = self._pending.get(key)
                row = pending.row if pending is not None else None
            return row

    def rows(self) -> list[Row]:
        with self.lock:
            return list(self.index.values())

    # -- published rows -------------------------------------------------------------------

    def add(self, row: Row, own_size: int | None = None, links: Sequence[Link] = ()) -> None:
        """Insert a row or replace the one with its key. ``own_size``: the bytes the row's
        own file takes (its blob, or its manifest); by default the row's size for a new
        row and the previous figure for a replaced one. ``links``: a chunked row's chain."""
        with self.lock:
            old = self.index.get(row.key)
            previous = self._own.pop(row.key, None)
            if previous is not None:
                self._own_usage[previous[0]] -= previous[1]
            size = own_size if own_size is not None else previous[1] if previous else row.size
            self._own[row.key] = (row.tier, size)
            self._own_usage[row.tier] += size
            self.index.put(row)
            if row.format == 1:
                self.whole.put(row)
            else:
                self.whole.remove(row.key)  # a v1 row converted to chunks
            if old is None:
                self.everything.add(row.namespace, row.tokens_le, row.key)
                self.tombstones.discard(row.namespace, row.tokens_le, row.key)
            if row.format == 2 and (old is None or old.format != 2):
                self.cuttable.add(row.namespace, row.tokens_le, row.key)
            if links:
                self.chunks.attach(row.key, list(links))

    def add_all(self, rows: Iterable[Row]) -> None:
        with self.lock:
            for row in rows:
                self.add(row)

    def remove(self, key: bytes, *, evicted: bool = False) -> tuple[Row | None, list[Chunk]]:
        """Forget a row; returns it and the chunks no row uses any more (delete their
        files). ``evicted``: remember its tokens so a later miss can say so."""
        with self.lock:
            row = self.index.remove(key)
            if row is None:
                return None, []
            self.whole.remove(key)
            tier, size = self._own.pop(key, (row.tier, 0))
            self._own_usage[tier] -= size
            self.everything.remove(row.namespace, row.tokens_le, row.key)
            self.cuttable.remove(row.namespace, row.tokens_le, row.key)
            if evicted:
                self.tombstones.add(row.namespace, row.tokens_le, row.key)
            return row, self.chunks.detach(key)

    def served(self, key: bytes) -> int | None:
        """How many of a row's tokens its files still serve (all, for a whole-row blob);
        None for an unknown row."""
        with self.lock:
            row = self.index.get(key)
            if row is None:
                return None
            return self.chunks.served(key, row.tokens_le) if row.format == 2 else row.n_tokens

    def is_damaged(self, key: bytes) -> bool:
        """A chunked row whose chain does not serve all its tokens (a chunk lost or found
        damaged: it restores only up to there)."""
        with self.lock:
            row = self.index.get(key)
            return row is not None and row.format == 2 and self.chunks.served(key, row.tokens_le) < row.n_tokens

    def own_size(self, key: bytes) -> int:
        with self.lock:
            return self._own.get(key, ("", 0))[1]

    # -- pending saves (read-your-writes) --------------------------------------------------

    def add_pending(self, pending: Pending) -> None:
        with self.lock:
            row = pending.row
            self._pending[row.key] = pending
            self.pending_index.put(row)
            if not pending.cuttable:
                self.pending_whole.put(row)
            self.everything.add(row.namespace, row.tokens_le, row.key)
            if pending.cuttable:
                self.cuttable.add(row.namespace, row.tokens_le, row.key)

    def pending(self, key: bytes) -> Pending | None:
        with self.lock:
            return self._pending.get(key)

    def is_pending(self, key: bytes) -> bool:
        with self.lock:
            return key in self._pending

    def pending_rows(self) -> list[Row]:
        with self.lock:
            return [p.row for p in self._pending.values()]

    def drop_pending(self, key: bytes) -> None:
        """The writer is done with a save (published, failed or rejected)."""
        with self.lock:
            pending = self._pending.pop(key, None)
            if pending is None:
                return
            row = pending.row
            self.pending_index.remove(key)
            self.pending_whole.remove(key)
            self.everything.remove(row.namespace, row.tokens_le, row.key)
            if pending.cuttable:  # NOTE: a published row has entries of its own (add)
                self.cuttable.remove(row.namespace, row.tokens_le, row.key)

    # -- lookups ----------------------------------------------------------------------------

    def longest_prefix(
        self, meta: KeyMeta, tokens: Sequence[int], limit: int, *, whole_only: bool = False
    ) -> Row | None:
        """The longest row (published or pending) whose tokens are ``tokens[:n]`` for some
        ``n <= limit``, verified token for token. Linear in the prompt. ``whole_only``:
        only rows that cannot be cut (the others are found by ``cuttable``)."""
        ns = namespace_of(meta)
        best: Row | None = None
        indexes = (self.whole, self.pending_whole) if whole_only else (self.index, self.pending_index)
        for index in indexes:
            with self.lock:
                lengths = index.candidate_lengths(ns, tokens, limit)
            lengths = [n for n in lengths if best is None or n > best.n_tokens]
            if not lengths:
                continue
            token_bytes = encode_tokens(tokens[: lengths[-1]])
            keys = prefix_keys(meta.hasher(), token_bytes, lengths)
            with self.lock:
                for n, key in zip(reversed(lengths), reversed(keys), strict=True):
                    row = index.get(key)
                    # NOTE: equal keys imply equal tokens unless sha256 collides; the check
                    # is cheap (one bytes compare) and makes "verified before use" literal.
                    if row is not None and row.tokens_le == token_bytes[: n * 4]:
                        best = row
                        break
        return best

    # -- tiers ------------------------------------------------------------------------------

    def usage(self, tier: str) -> int:
        with self.lock:
            return self._own_usage[tier] + self.chunks.usage(tier)

    def usage_all(self) -> dict[str, int]:
        with self.lock:
            return {t: self._own_usage[t] + self.chunks.usage(t) for t in TIERS}

    def occupants(self, tier: str) -> list[Row]:
        """Rows with bytes in ``tier`` (their own file, or a chunk they use), least
        recently used first."""
        with self.lock:
            keys = {k for k, (t, _) in self._own.items() if t == tier}
            for chunk in self.chunks:
                if chunk.tier == tier:
                    keys |= chunk.rows
            rows = [r for k in keys if (r := self.index.get(k)) is not None]
        return sorted(rows, key=lambda r: (r.last_used, r.created))

    # -- load pins: a row being read is never evicted or demoted ---------------------------

    def pin_load(self, key: bytes) -> Row | None:
        """Pin the published row for ``key`` against eviction; None (no pin) if it is gone."""
        with self.lock:
            row = self.index.get(key)
            if row is not None:
                self.load_pins[key] += 1
            return row

    def unpin_load(self, key: bytes) -> None:
        with self.lock:
            self.load_pins[key] -= 1
            if self.load_pins[key] <= 0:
                del self.load_pins[key]

    def is_busy(self, key: bytes) -> bool:
        """User-pinned or being loaded (or gone): quotas must leave it alone."""
        with self.lock:
            row = self.index.get(key)
            return row is None or row.pinned or self.load_pins[key] > 0
