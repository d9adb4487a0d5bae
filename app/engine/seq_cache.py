"""A seq's cells to and from the cache: the one home of packing a seq into a save and of
loading a hit back into a seq, for the scheduler's saves and restores (``scheduling.saves``,
``scheduling.reuse``) and a draft model's (``speculation.draft_model``).

A save packs into memory an earlier save or restore used once nothing reads it any more
(the cache's ``StateMemory``: fresh pages cost more than the copy, docs/latency.md), on the
thread that owns the seq, while the seq holds exactly the saved tokens (or more, then
``cut``); the file write runs on the cache's writer thread.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from app.cache.blobs import seqstate
from app.cache.keys import KeyMeta
from app.engine.backend import Backend
from app.engine.cache_hooks import CacheHooks, Hit, SaveReason


def save_seq(
    backend: Backend, cache: CacheHooks, meta: KeyMeta, seq_id: int, tokens: Sequence[int], reason: SaveReason,
    session_id: str | None = None, *, cut: bool = False,
) -> bytes | None:
    """Pack ``seq_id`` and queue its save as ``tokens``, tagged with the session that made it
    (so the row can be named by its conversation); returns the key, or None when the cache
    dropped it. ``cut``: the seq holds more than ``tokens``; the payload is cut to them.
    What the pack raises propagates (each caller says what a failed save means to it)."""
    t0 = time.perf_counter_ns()
    payload = backend.kv_pack(seq_id, into=cache.memory.lend)
    if cut:
        payload = seqstate.cut(payload, len(tokens), into=cache.memory.lend)
    return cache.save(meta, tokens, payload, reason, time.perf_counter_ns() - t0, session_id)


def load_hit(backend: Backend, seq_id: int, hit: Hit, keep: int) -> bool:
    """Load ``hit`` into the empty ``seq_id`` and keep its first ``keep`` cells (a prompt's
    last token is read again for fresh logits); the hit's memory is released either way.
    False, with the seq emptied, when llama.cpp did not take the state; what the load raises
    propagates."""
    try:
        ok = backend.kv_unpack(seq_id, hit.payload)
    finally:
        hit.release()
    if not ok:
        backend.seq_rm(seq_id, 0)
        return False
    if keep < len(hit.tokens):
        backend.seq_rm(seq_id, keep)
    return True
