"""The catalog of published rows: the in-memory index, the bytes each tier holds, and the
load pins. The invariant ``usage[tier] == sum of the sizes of the rows in tier`` lives
here and nowhere else: every change of the row set goes through ``add`` / ``remove``.

Thread-safe: every method takes ``lock`` (re-entrant), which callers also hold when a few
calls must be atomic together (the store's condition variable is built on it).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Sequence

from app.cache.index import RowIndex, prefix_keys
from app.cache.keys import KeyMeta, encode_tokens, quant_byte
from app.cache.rows import Row
from app.cache.tiers import TIERS


class Catalog:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.index = RowIndex()
        self.load_pins: Counter[bytes] = Counter()
        self._usage = dict.fromkeys(TIERS, 0)

    def __len__(self) -> int:
        with self.lock:
            return len(self.index)

    def __contains__(self, key: object) -> bool:
        with self.lock:
            return key in self.index

    def get(self, key: bytes) -> Row | None:
        with self.lock:
            return self.index.get(key)

    def rows(self) -> list[Row]:
        with self.lock:
            return list(self.index.values())

    def add(self, row: Row) -> None:
        """Insert a row, or replace the one with its key (moving its bytes between tiers)."""
        with self.lock:
            old = self.index.get(row.key)
            if old is not None:
                self._usage[old.tier] -= old.size
            self.index.put(row)
            self._usage[row.tier] += row.size

    def add_all(self, rows: Iterable[Row]) -> None:
        with self.lock:
            for row in rows:
                self.add(row)

    def remove(self, key: bytes) -> Row | None:
        with self.lock:
            row = self.index.remove(key)
            if row is not None:
                self._usage[row.tier] -= row.size
            return row

    def usage(self, tier: str) -> int:
        with self.lock:
            return self._usage[tier]

    def usage_all(self) -> dict[str, int]:
        with self.lock:
            return dict(self._usage)

    def longest_prefix(self, meta: KeyMeta, tokens: Sequence[int], limit: int) -> Row | None:
        """The longest row whose tokens are ``tokens[:n]`` for some ``n <= limit``, verified
        token for token. Linear in the prompt (``RowIndex.candidate_lengths``)."""
        ns = (meta.fingerprint.hex(), quant_byte(meta.quant_type), meta.ctx_params_hash.hex())
        with self.lock:
            lengths = self.index.candidate_lengths(ns, tokens, limit)
        if not lengths:
            return None
        token_bytes = encode_tokens(tokens[: lengths[-1]])
        keys = prefix_keys(meta.hasher(), token_bytes, lengths)
        with self.lock:
            for n, key in zip(reversed(lengths), reversed(keys), strict=True):
                row = self.index.get(key)
                # NOTE: equal keys imply equal tokens unless sha256 collides; the check is
                # cheap (one bytes compare) and makes "verified before use" literal.
                if row is not None and row.tokens_le == token_bytes[: n * 4]:
                    return row
        return None

    def lru(self, tier: str) -> list[Row]:
        """The rows of a tier, least recently used first."""
        with self.lock:
            rows = [r for r in self.index.values() if r.tier == tier]
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
