"""What the cache's writer thread does with a job (``CacheStore``'s ``Writer``): write a
save's files and publish its row, convert a whole (KVC v1) row to chunks the first time it
is read, run bookkeeping (``Later``) held back like a save, make the memory the next
restore needs, and undo a failed save's bookkeeping."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from app.cache.blobs import seqstate
from app.cache.blobs.tiers import Buffer
from app.cache.contents.rows import Row
from app.cache.keys import KeyMeta
from app.cache.saving.chunked_rows import is_cuttable
from app.cache.saving.whole_rows import SaveJob

if TYPE_CHECKING:
    import threading

    from app.cache.blobs.state_buffers import StateMemory
    from app.cache.contents.catalog import Catalog
    from app.cache.db.journal import Journal
    from app.cache.saving.chunked_rows import ChunkedRows
    from app.cache.saving.whole_rows import Blobs
    from app.cache.saving.writer import Writer
    from app.cache.space.eviction import Evictor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Later:
    """Bookkeeping for the writer thread (``WriteJobs.later``), not a save."""

    work: Callable[[], None]


class StoreParts(Protocol):
    """The parts of ``CacheStore`` its writer's jobs work with (the store is the one that
    has them; named here so that this room does not import the store above it)."""

    _blobs: Blobs
    _catalog: Catalog
    _chunked: ChunkedRows
    _closed: bool
    _cond: threading.Condition
    _evictor: Evictor
    _journal: Journal
    _writer: Writer[SaveJob | Later]
    memory: StateMemory

    def writable(self, tier: str) -> bool: ...


class WriteJobs:
    def __init__(self, store: StoreParts) -> None:
        self.store = store

    def convert(self, row: Row, payload: Buffer) -> None:
        """A v1 blob was read and its payload can be cut: queue its conversion to chunks
        (KVC v1 files keep working; each is converted the first time it is used)."""
        if row.format != 1 or self.store._closed or not self.store.writable(row.tier):
            return
        if not is_cuttable(payload, row.n_tokens):
            return
        meta = KeyMeta(bytes.fromhex(row.fingerprint), row.quant_type, bytes.fromhex(row.ctx_hash))
        job = SaveJob(
            row.key, row.model_id, meta, row.tokens_le, row.n_tokens, payload, row.save_reason,
            row.tier, row.context_size, row.prompt_preview, 0, row.session_id, True, row.tier,
        )  # fmt: skip
        self.store._writer.submit(job)  # a full queue only postpones it to the next use

    def later(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the writer thread, held back like a save (after the grace, not
        while a request waits for its first token); at once when the queue is full or closed."""
        if self.store._closed or not self.store._writer.submit(Later(work)):
            work()

    def write(self, job: SaveJob | Later) -> None:
        """Writer thread: store the job, then let waiters and subscribers know."""
        if isinstance(job, Later):
            job.work()
            return
        if job.converts:
            converted = self.store._chunked.convert(job)
            if converted is not None:
                self.store._journal.emit("updated", converted)
            return
        row: Row | None = None
        try:
            if job.cuttable:
                try:
                    row = self.store._chunked.write(job)
                except seqstate.UnknownLayout as exc:  # parsed at submit; be safe anyway
                    log.warning("cache payload cannot be chunked (%s); stored whole", exc)
                    row = self.store._blobs.write(job)
            else:
                row = self.store._blobs.write(job)
        finally:
            with self.store._cond:
                self.store._catalog.drop_pending(job.key)
                self.store._cond.notify_all()
        if row is not None:
            self.store._journal.emit("published", row)
            if row.format == 2:  # once this save's payload is dropped: the memory to restore it
                size = max(row.size, len(job.payload))
                self.later(lambda: self.reserve_restore(size))

    def reserve_restore(self, size: int) -> None:
        """Writer thread: make (and touch) the memory a restore of ``size`` bytes reads its
        chunk files and assembles its state into, unless the pool holds it already
        (``StateMemory.reserve``: two buffers), so a store's first restore, and the first of
        a longer conversation, finds its memory made off the request's path. Not while
        closing: nothing will be restored."""
        if not self.store._closed:
            self.store.memory.reserve(size, count=2)

    def on_error(self, job: SaveJob | Later, exc: BaseException) -> None:
        if isinstance(job, Later):
            log.error("cache bookkeeping failed: %r", exc)
            return
        self.store._evictor.write_failed(exc, "saving to the cache")
        with self.store._cond:
            self.store._catalog.drop_pending(job.key)
            self.store._cond.notify_all()
