"""``CacheStore.verify``: re-check every file the cache holds — v1 blobs, v2 manifests and
v2 chunks (both CRCs and the key) — deleting what fails, then every chunked row's chain
(each link stored, following the previous one, holding the row's tokens).

A bad blob or manifest takes its row with it. A bad or missing chunk is dropped and every row
that shares it keeps what precedes it: those rows restore up to the damage and the rest is
prefilled (``rows_damaged``), and the next save of the same tokens stores the chunk again. A
row left with nothing to restore (its first chunk gone) is removed (``rows_dropped_no_chunks``).
Nothing damaged is ever served.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from app.cache.blobs import kvc_chunked, kvc_whole
from app.cache.blobs.tiers import Tier
from app.cache.contents.catalog import Catalog
from app.cache.counters import Counters
from app.cache.db.meta import STATUS_AVAILABLE
from app.cache.saving.chunked_rows import ChunkedRows
from app.cache.saving.whole_rows import Blobs
from app.cache.space.eviction import Evictor

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class VerifyReport:
    checked: int  # rows checked
    ok: int  # rows that restore in full
    removed: tuple[str, ...]  # hex keys of the bad blobs, manifests and chunks deleted
    chunks_checked: int = 0
    rows_damaged: int = 0  # chunked rows that now restore only up to a lost chunk


def verify_all(
    catalog: Catalog,
    tiers: dict[str, Tier],
    blobs: Blobs,
    chunked: ChunkedRows,
    evictor: Evictor,
    counters: Counters,
    io_lock: threading.RLock,
    progress: ProgressFn | None = None,
) -> VerifyReport:
    rows = [r for r in catalog.rows() if r.status == STATUS_AVAILABLE]
    removed: list[str] = []
    checked: set[bytes] = set()  # chunks, each once however many rows share it
    bad_rows = 0
    for i, row in enumerate(rows):  # NOTE: progress counts rows, a row's chunks in its step
        if progress:
            progress(i, len(rows))
        if catalog.get(row.key) is None:
            continue
        if row.format == 1:
            if blobs.read_valid(row) is None:
                removed.append(row.key.hex())
                bad_rows += 1
            continue
        try:
            kvc_chunked.read_row(tiers[row.tier], row.key)
        except (OSError, kvc_whole.CorruptBlob):
            with io_lock:
                if catalog.get(row.key) is not None:
                    counters.add("corrupt_files")
                    evictor.remove(row)
            removed.append(row.key.hex())
            bad_rows += 1
            continue
        with catalog.lock:
            chain = [c for k in catalog.chunks.chain(row.key) if (c := catalog.chunks.get(k)) is not None]
        for chunk in chain:
            if chunk.key not in checked and chunk.is_stored:
                checked.add(chunk.key)
                if not chunked.verify_chunk(chunk):
                    removed.append(chunk.key.hex())
    if progress:
        progress(len(rows), len(rows))
    for row in catalog.rows():
        if row.format == 2 and catalog.served(row.key) == 0:
            with io_lock:
                evictor.remove(row)
            counters.add("rows_dropped_no_chunks")
            removed.append(row.key.hex())
            bad_rows += 1
    damaged = sum(catalog.is_damaged(row.key) for row in catalog.rows())  # chains: see is_damaged
    return VerifyReport(
        checked=len(rows), ok=len(rows) - bad_rows - damaged, removed=tuple(removed),
        chunks_checked=len(checked), rows_damaged=damaged,
    )  # fmt: skip
