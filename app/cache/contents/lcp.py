"""The longest common prefix of a prompt with *any* held token string, in logarithmic time.

``PrefixIndex`` keeps, per key namespace, the token strings (u32 little-endian bytes) sorted.
Of all strings in a sorted set, the one sharing the longest prefix with a query is one of
the query's two neighbours in that order: any string between the query and a third one
shares at least as long a prefix with the query as that third string does. So a lookup is
one bisect over the namespace and two prefix comparisons — no scan, whatever the number of
rows, and it finds rows *longer* than the prompt and rows that diverge from it (a
regenerated reply, an edited message, a branch) as readily as rows the prompt extends.

``Tombstones`` remember the token strings of recently evicted rows (bounded), so a miss can
say "evicted" instead of "nothing shared".

Not thread-safe; the catalog's lock guards both.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Hashable

from app.cache.prefix import common_prefix_bytes

Match = tuple[int, bytes | None]  # (tokens shared, key of the string that shares them)


class PrefixIndex:
    def __init__(self) -> None:
        self._by_ns: dict[Hashable, list[tuple[bytes, bytes]]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_ns.values())

    def add(self, ns: Hashable, tokens_le: bytes, key: bytes) -> None:
        bisect.insort(self._by_ns.setdefault(ns, []), (tokens_le, key))

    def remove(self, ns: Hashable, tokens_le: bytes, key: bytes) -> None:
        entries = self._by_ns.get(ns)
        if not entries:
            return
        i = bisect.bisect_left(entries, (tokens_le, key))
        if i < len(entries) and entries[i] == (tokens_le, key):
            del entries[i]
            if not entries:
                del self._by_ns[ns]

    def best(self, ns: Hashable, query_le: bytes) -> Match:
        """The longest prefix ``query_le`` shares with a string of ``ns``, and its key.

        Ties go to the shorter string (it sorts first), which has the fewest cells to read.
        """
        entries = self._by_ns.get(ns)
        if not entries:
            return 0, None
        i = bisect.bisect_left(entries, (query_le, b""))
        best: Match = (0, None)
        for j in (i - 1, i):
            if 0 <= j < len(entries):
                n = common_prefix_bytes(query_le, entries[j][0])
                if n > best[0]:
                    best = (n, entries[j][1])
        return best

    def best_elsewhere(self, ns: Hashable, query_le: bytes) -> Match:
        """The best match in any namespace but ``ns`` (another model, adapter set or
        context parameters)."""
        best: Match = (0, None)
        for other in self._by_ns:
            if other != ns:
                found = self.best(other, query_le)
                if found[0] > best[0]:
                    best = found
        return best


class Tombstones:
    """The token strings of the last evicted rows, per namespace, within a byte budget."""

    def __init__(self, max_entries: int = 4096, max_bytes: int = 16 << 20) -> None:
        self._index = PrefixIndex()
        self._order: deque[tuple[Hashable, bytes, bytes]] = deque()
        self._bytes = 0
        self._max_entries = max_entries
        self._max_bytes = max_bytes

    def add(self, ns: Hashable, tokens_le: bytes, key: bytes) -> None:
        self._index.add(ns, tokens_le, key)
        self._order.append((ns, tokens_le, key))
        self._bytes += len(tokens_le)
        while self._order and (len(self._order) > self._max_entries or self._bytes > self._max_bytes):
            old_ns, old_tokens, old_key = self._order.popleft()
            self._index.remove(old_ns, old_tokens, old_key)
            self._bytes -= len(old_tokens)

    def discard(self, ns: Hashable, tokens_le: bytes, key: bytes) -> None:
        """A row saved again is no longer evicted (its entry ages out of the deque)."""
        self._index.remove(ns, tokens_le, key)

    def best(self, ns: Hashable, query_le: bytes) -> Match:
        return self._index.best(ns, query_le)
