"""The in-memory index of published cache rows: ``Row`` snapshots by key, and per key
namespace (fingerprint, quant byte, ctx hash) the sorted set of row lengths.

The lengths set is what makes the any-length longest-prefix lookup linear in the prompt:
one incremental sha256 pass over the prompt's token bytes, taking a digest only at lengths
some row has and whose last token matches the prompt's (``candidate_lengths``,
``prefix_keys``), then O(1) dict probes. No scan over rows.

Not thread-safe; the store guards it with its lock.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from app.cache.contents.rows import Namespace, Row

__all__ = ["Namespace", "Row", "RowIndex", "prefix_keys"]


class _Lengths:
    """Row lengths of one namespace, plus (length, last token) pairs as a cheap filter."""

    __slots__ = ("counts", "sorted", "tails")

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self.sorted: list[int] = []
        self.tails: Counter[int] = Counter()  # (n << 32) | token n-1

    def add(self, n: int, tail: int) -> None:
        self.tails[tail] += 1
        self.counts[n] += 1
        if self.counts[n] == 1:
            bisect.insort(self.sorted, n)

    def remove(self, n: int, tail: int) -> None:
        self.tails[tail] -= 1
        if self.tails[tail] <= 0:
            del self.tails[tail]
        self.counts[n] -= 1
        if self.counts[n] <= 0:
            del self.counts[n]
            i = bisect.bisect_left(self.sorted, n)
            if i < len(self.sorted) and self.sorted[i] == n:
                del self.sorted[i]


def _tail(row: Row) -> int:
    last = int.from_bytes(row.tokens_le[-4:], "little") if row.n_tokens else 0
    return (row.n_tokens << 32) | last


class RowIndex:
    def __init__(self) -> None:
        self._rows: dict[bytes, Row] = {}
        self._lengths: dict[Namespace, _Lengths] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def get(self, key: bytes) -> Row | None:
        return self._rows.get(key)

    def values(self) -> Iterator[Row]:
        return iter(list(self._rows.values()))

    def put(self, row: Row) -> None:
        """Insert or replace (same key ⇒ same tokens, so the lengths set is unchanged)."""
        if row.key not in self._rows:
            self._lengths.setdefault(row.namespace, _Lengths()).add(row.n_tokens, _tail(row))
        self._rows[row.key] = row

    def remove(self, key: bytes) -> Row | None:
        row = self._rows.pop(key, None)
        if row is not None:
            lengths = self._lengths.get(row.namespace)
            if lengths is not None:
                lengths.remove(row.n_tokens, _tail(row))
                if not lengths.counts:
                    del self._lengths[row.namespace]
        return row

    def lengths_upto(self, ns: Namespace, limit: int) -> list[int]:
        """Distinct row lengths in ``1..limit`` for a namespace, ascending (a copy)."""
        lengths = self._lengths.get(ns)
        if lengths is None:
            return []
        lo = bisect.bisect_left(lengths.sorted, 1)
        hi = bisect.bisect_right(lengths.sorted, limit)
        return lengths.sorted[lo:hi]

    def candidate_lengths(self, ns: Namespace, tokens: Sequence[int], limit: int) -> list[int]:
        """Lengths ``n`` in ``1..limit`` at which some row of the namespace has ``n`` tokens
        ending in ``tokens[n-1]`` — a superset of the prefix hits, ascending.

        NOTE: the (length, last token) filter spares a sha256 digest at nearly every length
        that cannot match; with 10k rows of other conversations it cuts the digests from
        thousands to a handful. Keys and tokens are still checked for every candidate.
        """
        lengths = self._lengths.get(ns)
        if lengths is None:
            return []
        tails = lengths.tails
        hi = bisect.bisect_right(lengths.sorted, limit)
        return [n for n in lengths.sorted[:hi] if n > 0 and (n << 32 | tokens[n - 1]) in tails]


def prefix_keys(hasher: Any, token_bytes: bytes, lengths: Sequence[int]) -> list[bytes]:
    """Keys of the prompt's prefixes at ``lengths`` (ascending), in one sha256 pass.

    ``hasher`` has already been fed the key head (fp ‖ quant ‖ ctx hash); each step feeds
    only the tokens between two candidate lengths, then digests a copy.
    """
    view = memoryview(token_bytes)
    keys: list[bytes] = []
    pos = 0
    for n in lengths:
        end = n * 4
        hasher.update(view[pos:end])
        pos = end
        keys.append(hasher.copy().digest())
    return keys
