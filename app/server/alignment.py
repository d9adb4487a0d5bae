"""Give a re-sent conversation the exact tokens the engine already holds for it.

Clients send text, and re-tokenizing a reply does not always give the ids the model sampled
(the same text can split into other merges: " Paris" sampled as " Par" + "is"). The engine
recognises a conversation by its tokens (longest common prefix, docs/design.md §4), so one
different id early in the reply would throw away everything after it. The server therefore
remembers what it generated recently — prompt plus sampled ids, exactly what the engine's
KV holds — and when a new prompt's *bytes* start with one of those sequences it reuses that
sequence's ids for the shared part and keeps its own tokenization for the rest.

Token pieces are compared as bytes (special tokens as their text, e.g. ``<|im_end|>``), and a
remembered sequence is only used up to a point that is a token boundary in both, so the
result always detokenizes to exactly the prompt the client sent.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

DEFAULT_CAPACITY = 64
"""NOTE: an agent keeps one growing conversation per client; 64 covers dozens of clients
while the scan over candidates stays well under a millisecond per request."""
_PROBE = 64
"""A remembered sequence is only considered when it shares its first 64 bytes with the
prompt (a cheap filter; sharing less would save a few tokens at most)."""


@dataclass(frozen=True, slots=True)
class _Held:
    tokens: tuple[int, ...]
    text: bytes
    ends: tuple[int, ...]
    """``ends[i]``: byte offset after token i."""


class TokenMemo:
    """The recent token sequences of one model; thread-safe."""

    def __init__(self, piece: Callable[[int], bytes], capacity: int = DEFAULT_CAPACITY) -> None:
        self._piece = piece
        self._pieces: dict[int, bytes] = {}
        self._held: OrderedDict[tuple[int, ...], _Held] = OrderedDict()
        self.capacity = capacity
        self._tool_texts: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def _bytes(self, tokens: Sequence[int]) -> tuple[bytes, tuple[int, ...]]:
        parts, ends, end = [], [], 0
        for t in tokens:
            p = self._pieces.get(t)
            if p is None:
                p = self._pieces[t] = self._piece(t)
            parts.append(p)
            end += len(p)
            ends.append(end)
        return b"".join(parts), tuple(ends)

    def remember(self, tokens: Sequence[int]) -> None:
        """Record a sequence the engine now holds (prompt + generated ids)."""
        key = tuple(int(t) for t in tokens)
        if not key:
            return
        text, ends = self._bytes(key)
        with self._lock:
            self._held[key] = _Held(key, text, ends)
            self._held.move_to_end(key)
            while len(self._held) > self.capacity:
                self._held.popitem(last=False)

    def align(self, tokens: Sequence[int]) -> list[int]:
        """``tokens`` with its longest remembered head replaced by the remembered ids."""
        fresh = list(tokens)
        text, ends = self._bytes(fresh)
        boundaries = set(ends)
        with self._lock:
            candidates = list(reversed(self._held.values()))
        best_end = 0
        best: tuple[int, ...] = ()
        for held in candidates:
            probe = min(_PROBE, len(held.text), len(text))
            if held.text[:probe] != text[:probe]:
                continue
            n = _common_bytes(held.text, text)
            k = bisect.bisect_right(held.ends, n)
            while k > 0 and held.ends[k - 1] not in boundaries:
                k -= 1
            end = held.ends[k - 1] if k else 0
            if end > best_end:
                best_end, best = end, held.tokens[:k]
        if not best:
            return fresh
        j = ends.index(best_end) + 1
        return [*best, *fresh[j:]]

    # Tool calls: the exact text the model wrote for a reply, by the ids of its calls, so an
    # assistant message that comes back with ``tool_calls`` renders as the model wrote it.

    def remember_tool_text(self, call_ids: Sequence[str], text: str) -> None:
        with self._lock:
            for call_id in call_ids:
                self._tool_texts[call_id] = text
            while len(self._tool_texts) > 8 * self.capacity:
                self._tool_texts.popitem(last=False)

    def tool_text(self, call_id: str) -> str | None:
        with self._lock:
            return self._tool_texts.get(call_id)


def _common_bytes(a: bytes, b: bytes) -> int:
    """Length of the common prefix of ``a`` and ``b`` (binary search over slice compares)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
