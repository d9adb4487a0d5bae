"""Saves as they travel to the writer (``SaveJob``), and whole-row KVC v1 blobs: how a job
becomes a blob file and a published row, and how a blob is read back fully validated.

v1 blobs hold what chunks cannot: payloads whose layout ``app.cache.blobs.seqstate`` does not
recognise, and blobs written before KVC v2 (they keep working; a v1 row whose payload can
be cut is converted to chunks the first time it is loaded).

Order of a save, with the store's ``io_lock`` held so quotas hold: choose the tier (the
wanted one, else disk when the blob is larger than the wanted tier's quota), make room
there, record the row as ``writing`` in the database, write the blob atomically (the tier's
publish protocol), then mark it ``available`` and add it to the catalog. A crash at any
point leaves either no file (the row is dropped at start-up) or a complete one (published
at start-up). A blob that fails validation on a read is deleted with its row and counted
(``corrupt_files``); the read is then a miss.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from app.cache.blobs import kvc_whole
from app.cache.blobs.tiers import Buffer, Tier, blob_name, read_blob_parts, write_blob
from app.cache.contents.catalog import Catalog
from app.cache.contents.rows import Row, make_row
from app.cache.counters import Counters
from app.cache.db.journal import Journal
from app.cache.db.meta import STATUS_AVAILABLE, STATUS_WRITING
from app.cache.keys import KeyMeta, decode_tokens
from app.cache.space.eviction import Evictor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SaveJob:
    """One save, from the scheduler thread to the writer thread."""

    key: bytes
    model_id: str
    meta: KeyMeta
    tokens_le: bytes
    n_tokens: int
    payload: Buffer  # may be a read-only view; never written to
    reason: str
    tier: str
    context_size: int
    prompt_text: str
    quant_bits: int
    session_id: str = ""
    cuttable: bool = False  # ``seqstate`` parses the payload: store it as chunks
    converts: str = ""  # a v1 row being converted to chunks: the tier of its blob

    def row(self, **where: Any) -> Row:
        """The row this job describes (``where``: tier, size, status, created, location…)."""
        return make_row(
            key=self.key, model_id=self.model_id, fingerprint=self.meta.fingerprint,
            quant_type=self.meta.quant_type, ctx_hash=self.meta.ctx_params_hash,
            tokens_le=self.tokens_le, save_reason=self.reason,
            context_size=self.context_size, prompt_text=self.prompt_text,
            session_id=self.session_id, **where,
        )  # fmt: skip

    def pending_row(self) -> Row:
        """The job as a ``writing`` row: listed and found while it is in flight."""
        return self.row(
            tier=self.tier, size=len(self.payload), status=STATUS_WRITING, created=time.time(),
            format=2 if self.cuttable else 1,
        )  # fmt: skip


class Blobs:
    def __init__(
        self,
        catalog: Catalog,
        tiers: dict[str, Tier],
        evictor: Evictor,
        journal: Journal,
        counters: Counters,
        io_lock: threading.RLock,
    ) -> None:
        self._catalog = catalog
        self._tiers = tiers
        self._evictor = evictor
        self._journal = journal
        self._counters = counters
        self._io_lock = io_lock

    def write(self, job: SaveJob) -> Row | None:
        """Store ``job`` as a KVC v1 blob; the published row, or None when not stored."""
        meta = kvc_whole.BlobMeta(
            fingerprint=job.meta.fingerprint,
            quant_type=job.meta.quant_type,
            ctx_params_hash=job.meta.ctx_params_hash,
            tokens=tuple(decode_tokens(job.tokens_le)),
            save_reason=job.reason,
            quant_bits=job.quant_bits,
            context_size=job.context_size,
            prompt_text=job.prompt_text,
            model_id=job.model_id,
            session_id=job.session_id,
        )
        prefix = kvc_whole.build(meta, job.payload)
        size = len(prefix) + len(job.payload)
        with self._io_lock:
            tier = self._evictor.place(job.tier, size)
            if tier is None:
                return None
            row = job.row(
                tier=tier, size=size, status=STATUS_WRITING, created=time.time(),
                location=self._tiers[tier].location(blob_name(job.key)),
                checksum=kvc_whole.payload_crc_of(prefix),
            )  # fmt: skip
            self._journal.put(row)
            try:
                write_blob(self._tiers[tier], job.key, prefix, job.payload)
            except (OSError, kvc_whole.CorruptBlob) as exc:
                self._evictor.write_failed(exc, f"saving to the {tier} tier")
                self._journal.delete([job.key])
                return None
            row = replace(row, status=STATUS_AVAILABLE)
            self._journal.update(job.key, status=STATUS_AVAILABLE)
            self._catalog.add(row)
        return row

    def read_valid(self, row: Row) -> Buffer | None:
        """Read and fully validate a row's blob; drop it as corrupt if that fails."""
        for _ in range(3):  # a concurrent move changes the tier under us: follow it
            try:
                prefix, payload = read_blob_parts(self._tiers[row.tier], row.key)
                kvc_whole.parse_parts(prefix, payload, row.key)
                return payload
            except (OSError, kvc_whole.CorruptBlob) as exc:
                now = self._catalog.get(row.key)
                if now is None:
                    return None  # deleted meanwhile: a plain miss
                if now.tier != row.tier:
                    row = now
                    continue
                with self._io_lock:
                    still = self._catalog.get(row.key)
                    if still is not None and still.tier == row.tier:
                        log.warning("dropping corrupt cache blob %s: %s", row.key.hex(), exc)
                        self._counters.add("corrupt_files")
                        self._evictor.remove(still)
                return None
        return None
