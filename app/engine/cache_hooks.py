"""The scheduler's view of the KV cache: look up on admission, save at the five moments.

``NullCache`` always misses and never saves (cache off). ``StoreCache`` adapts an
``app.cache.store.CacheStore`` for one model: it owns the hit/miss counters and the policy
gates, while the scheduler owns the KV (it packs and unpacks, between ticks).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from app.cache.keys import KeyMeta
from app.cache.policy import CachePolicy, cold_save_split, should_continued_save, should_finish_save
from app.cache.prefix import is_prefix

if TYPE_CHECKING:
    from app.cache.rows import Row
    from app.cache.store import CacheStore

log = logging.getLogger(__name__)

SaveReason = Literal["cold", "continued", "finish", "evict", "shutdown"]


@dataclass(frozen=True, slots=True)
class Hit:
    """A cache row to restore: its tokens (a prefix of the prompt) and packed KV."""

    kind: Literal["exact", "partial"]
    source: Literal["exact", "resume", "longest_prefix"]
    tokens: tuple[int, ...]
    payload: bytes | memoryview


class CacheHooks(Protocol):
    policy: CachePolicy

    def lookup(self, meta: KeyMeta, prompt: Sequence[int], parent_key: bytes | None) -> Hit | None: ...

    def count_miss(self) -> None: ...

    def count_sticky(self) -> None: ...

    def count_load(self, ns: int) -> None: ...

    def save(self, meta: KeyMeta, tokens: Sequence[int], payload: bytes | memoryview, reason: SaveReason, pack_ns: int) -> bytes | None:
        """Queue a save; returns the key when queued or already present, None when dropped."""
        ...

    def cold_split(self, num_tokens: int) -> int: ...

    def wants_continued(self, live: int, last_saved: int) -> bool: ...

    def wants_finish(self, live: int) -> bool: ...


class NullCache:
    """Cache off: every lookup misses, nothing is saved."""

    def __init__(self, policy: CachePolicy | None = None) -> None:
        self.policy = policy or CachePolicy()

    def lookup(self, meta: KeyMeta, prompt: Sequence[int], parent_key: bytes | None) -> Hit | None:
        return None

    def count_miss(self) -> None:
        pass

    def count_sticky(self) -> None:
        pass

    def count_load(self, ns: int) -> None:
        pass

    def save(self, meta: KeyMeta, tokens: Sequence[int], payload: bytes | memoryview, reason: SaveReason, pack_ns: int) -> bytes | None:
        return None

    def cold_split(self, num_tokens: int) -> int:
        return 0

    def wants_continued(self, live: int, last_saved: int) -> bool:
        return False

    def wants_finish(self, live: int) -> bool:
        return False


class StoreCache:
    """One model's hooks into the shared CacheStore."""

    def __init__(
        self,
        store: CacheStore,
        *,
        model_id: str,
        policy: CachePolicy,
        tier: str,
        context_size: int,
        quant_bits: int,
    ) -> None:
        self.store = store
        self.model_id = model_id
        self.policy = policy
        self.tier = tier
        self.context_size = context_size
        self.quant_bits = quant_bits

    def lookup(self, meta: KeyMeta, prompt: Sequence[int], parent_key: bytes | None) -> Hit | None:
        """Exact key, then ``parent_key`` resume, then the longest cached prefix."""
        row = self.store.lookup_exact(meta, prompt)
        if row is not None:
            hit = self._restore(row, "exact", prompt)
            if hit is not None:
                return hit
        if parent_key is not None:
            row = self.store.wait_for(parent_key, self.policy.session_resume_wait_ms)
            if row is not None and is_prefix(row.tokens, prompt):
                hit = self._restore(row, "resume", prompt)
                if hit is not None:
                    return hit
        row = self.store.longest_prefix(meta, prompt)
        if row is not None:
            return self._restore(row, "longest_prefix", prompt)
        return None

    def _restore(self, row: Row, source: Literal["exact", "resume", "longest_prefix"], prompt: Sequence[int]) -> Hit | None:
        tokens = row.tokens
        payload = self.store.load(row)
        if payload is None:
            return None
        kind: Literal["exact", "partial"] = "exact" if len(tokens) == len(prompt) else "partial"
        self.store.count(f"hits_{source}")
        return Hit(kind, source, tokens, payload)

    def count_miss(self) -> None:
        self.store.count("misses")

    def count_sticky(self) -> None:
        self.store.count("hits_sticky")

    def count_load(self, ns: int) -> None:
        self.store.count("load_total_ns", ns)

    def save(self, meta: KeyMeta, tokens: Sequence[int], payload: bytes | memoryview, reason: SaveReason, pack_ns: int) -> bytes | None:
        self.store.count("pack_total_ns", pack_ns)
        return self.store.submit_save(
            model_id=self.model_id,
            meta=meta,
            tokens=tokens,
            payload=payload,
            reason=reason,
            tier=self.tier,
            context_size=self.context_size,
            quant_bits=self.quant_bits,
        )

    def cold_split(self, num_tokens: int) -> int:
        return cold_save_split(num_tokens, self.policy)

    def wants_continued(self, live: int, last_saved: int) -> bool:
        return should_continued_save(live, last_saved, self.policy)

    def wants_finish(self, live: int) -> bool:
        return should_finish_save(live, self.policy)

