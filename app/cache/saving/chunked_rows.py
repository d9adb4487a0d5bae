"""Chunked rows (KVC v2, ``app.cache.blobs.kvc_chunked``): a save becomes the chunks its chain does not
have yet plus a manifest; a restore reads a chain's chunks back into one per-seq state.

A save, on the writer thread with the store's ``io_lock`` held: the row's chain is laid
over the chunks already stored (``ChunkIndex.plan``: a branch inside a chunk uses its head)
and attached in the catalog first (so the chunks it will share count this row and no
eviction can take them), then the chunks no stored chunk serves are cut from the payload
(``seqstate.split``), room is made for their bytes and the manifest's, all of them are
published in one batch (chunks before the manifest; one directory fsync), the new chunks
supersede the partial ones they extend, and the row goes live. Chunks it shares with rows
in less lasting tiers then follow it (``Evictor.settle``).

A restore of ``n`` tokens pins the row, reads the chunks covering them (each checked: both
CRCs and its key), concatenates them and cuts the result to ``n`` cells. A chunk that fails
its checks is deleted and the restore stops before it: the rows that share it fall back to
what precedes it (the rest is prefilled, never served from bad bytes); a later save of the
same tokens stores it again. A chunk that vanished under the read (superseded or moved)
is looked up again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from app.cache.blobs import kvc_chunked, kvc_whole, seqstate
from app.cache.blobs.tiers import Buffer, Tier, blob_name
from app.cache.contents.catalog import Catalog
from app.cache.contents.chunk_index import Chunk, Link
from app.cache.contents.rows import Row
from app.cache.counters import Counters
from app.cache.db.journal import Journal
from app.cache.db.meta import STATUS_AVAILABLE, STATUS_WRITING
from app.cache.saving.whole_rows import SaveJob
from app.cache.space.eviction import Evictor

log = logging.getLogger(__name__)


def links_for(row_tokens_le: bytes, root: bytes, chunk_size: int) -> list[Link]:
    """A token string's chain on the fixed grid: one link per ``chunk_size`` tokens (what
    ``ChunkIndex.plan`` gives when nothing is stored yet)."""
    links: list[Link] = []
    parent = root
    step = chunk_size * 4
    for a in range(0, len(row_tokens_le), step):
        tokens = row_tokens_le[a : a + step]
        key = kvc_chunked.chunk_key(parent, tokens)
        links.append(Link(key, parent, a // 4, tokens))
        parent = key
    return links


def root_of(job_or_row: SaveJob | Row, chunk_size: int) -> bytes:
    if isinstance(job_or_row, SaveJob):
        meta = job_or_row.meta
        return kvc_chunked.chain_root(meta.fingerprint, meta.quant_type, meta.ctx_params_hash, chunk_size)
    r = job_or_row
    return kvc_chunked.chain_root(bytes.fromhex(r.fingerprint), r.quant_type, bytes.fromhex(r.ctx_hash), chunk_size)


def is_cuttable(payload: Buffer, n_tokens: int) -> bool:
    """Can this payload be stored as chunks (a state ``seqstate`` parses, one cell a token,
    in position order)?"""
    try:
        st = seqstate.parse(payload)
        return st.n_cells == n_tokens > 0 and seqstate.is_in_order(payload, st)
    except (seqstate.UnknownLayout, ValueError):
        return False


@dataclass(frozen=True, slots=True)
class Restored:
    """What a restore gave: ``payload`` holds the first ``n`` cells (None when n is 0);
    ``corrupt``: a damaged or lost chunk cut it short."""

    payload: Buffer | None
    n: int
    corrupt: bool = False


class ChunkedRows:
    def __init__(
        self,
        catalog: Catalog,
        tiers: dict[str, Tier],
        evictor: Evictor,
        journal: Journal,
        counters: Counters,
        io_lock: threading.RLock,
        chunk_size: int = kvc_chunked.CHUNK_TOKENS,
    ) -> None:
        self._catalog = catalog
        self._tiers = tiers
        self._evictor = evictor
        self._journal = journal
        self._counters = counters
        self._io_lock = io_lock
        self.chunk_size = chunk_size

    # -- saving (writer thread) -------------------------------------------------------------

    def write(self, job: SaveJob) -> Row | None:
        """Store ``job`` as chunks and a manifest; the published row, or None."""
        c = self.chunk_size
        root = root_of(job, c)
        row: Row | None = None
        with self._io_lock:
            with self._catalog.lock:
                links = self._catalog.chunks.plan(root, job.tokens_le, c)
                had_chain = self._catalog.chunks.has_row(job.key)  # a damaged row saved again
                self._catalog.chunks.attach(job.key, links)  # a reservation: see the docstring
                missing = [ln for ln in links if self._catalog.chunks.resolve(ln) is None]
            try:
                row = self._write_locked(job, links, missing)
            finally:
                if row is None and not had_chain:  # not published: release the reservation
                    with self._catalog.lock:
                        orphans = self._catalog.chunks.detach(job.key)
                    self._evictor.delete_chunk_files(orphans)
            if row is not None:
                self._evictor.settle(row)
        return row

    def convert(self, job: SaveJob) -> Row | None:
        """Writer thread: a v1 row (``job.converts``) stored again as chunks, its blob then
        deleted; hits, last use and the user pin carry over. None when it is gone meanwhile."""
        with self._io_lock:
            old = self._catalog.get(job.key)
            if old is None or old.format != 1:  # deleted, or converted, meanwhile
                return None
            row = self.write(replace(job, tier=old.tier))
            if row is None:
                return None
            self._tiers[old.tier].remove(blob_name(job.key))
            row = replace(row, hits=old.hits, last_used=old.last_used, pinned=old.pinned)
            self._catalog.add(row)
            self._journal.update(job.key, hits=row.hits, last_used=row.last_used, pinned=row.pinned)
        self._counters.add("rows_converted")
        return row

    def _write_locked(self, job: SaveJob, links: list[Link], missing: list[Link]) -> Row | None:
        now = time.time()
        files, new_chunks = self._new_chunk_files(job, missing, now)
        manifest = kvc_chunked.build_row(
            kvc_chunked.RowManifest(
                fingerprint=job.meta.fingerprint, quant_type=job.meta.quant_type,
                ctx_params_hash=job.meta.ctx_params_hash, tokens_le=job.tokens_le,
                chunk_size=self.chunk_size, save_reason=job.reason, created=int(now),
                context_size=job.context_size, quant_bits=job.quant_bits,
                model_id=job.model_id, session_id=job.session_id, preview=job.prompt_text,
            )
        )  # fmt: skip
        size = sum(len(h) + len(p) for _, (h, p) in files) + len(manifest)
        tier = self._evictor.place(job.tier, size, frozenset({job.key}))
        if tier is None:
            return None
        name = kvc_chunked.row_name(job.key)
        row = job.row(
            tier=tier, size=size, status=STATUS_WRITING, created=now, format=2,
            chunk_size=self.chunk_size, location=self._tiers[tier].location(name),
        )  # fmt: skip
        self._journal.put(row)
        try:
            self._tiers[tier].put([*files, (name, (manifest,))])
        except (OSError, kvc_whole.CorruptBlob) as exc:
            self._evictor.write_failed(exc, f"saving to the {tier} tier")
            self._journal.delete([job.key])
            return None
        gone: list[Chunk] = []
        with self._catalog.lock:
            for chunk in new_chunks:
                chunk.tier = tier
                gone += self._catalog.chunks.put(chunk)
            row = replace(row, status=STATUS_AVAILABLE, size=self._row_bytes(job.key, len(manifest)))
            self._catalog.add(row, own_size=len(manifest), links=links)
        self._evictor.delete_chunk_files(gone)
        self._journal.put_chunks(new_chunks)
        self._journal.update(job.key, status=STATUS_AVAILABLE, size=row.size)
        return row

    def _new_chunk_files(
        self, job: SaveJob, missing: list[Link], now: float
    ) -> tuple[list[tuple[str, tuple[bytes, bytes]]], list[Chunk]]:
        files: list[tuple[str, tuple[bytes, bytes]]] = []
        chunks: list[Chunk] = []
        if not missing:
            return files, chunks
        bounds = sorted({ln.start for ln in missing} | {ln.start + len(ln.tokens_le) // 4 for ln in missing})
        pieces = dict(zip(bounds, seqstate.split(job.payload, bounds), strict=False))
        for ln in missing:
            piece = pieces[ln.start]
            header = kvc_chunked.ChunkHeader(
                key=ln.key, parent=ln.parent, start=ln.start, tokens_le=ln.tokens_le,
                chunk_size=self.chunk_size, fingerprint=job.meta.fingerprint,
                quant_type=job.meta.quant_type, ctx_params_hash=job.meta.ctx_params_hash,
                created=int(now),
            )  # fmt: skip
            head = kvc_chunked.build_chunk(header, piece)
            files.append((kvc_chunked.chunk_name(ln.key), (head, piece)))
            chunks.append(
                Chunk(ln.key, ln.parent, ln.start, ln.tokens_le, self.chunk_size,
                      tier="pending", size=len(head) + len(piece), created=now)  # fmt: skip
            )
        return files, chunks

    def _row_bytes(self, row_key: bytes, own: int) -> int:
        """A chunked row's size as shown: its manifest plus every chunk it uses."""
        total = own
        for key in self._catalog.chunks.chain(row_key):
            chunk = self._catalog.chunks.get(key)
            total += chunk.size if chunk is not None else 0
        return total

    # -- restoring ---------------------------------------------------------------------------

    def restore(
        self, row: Row, n: int, n_stream: int = 1, into: Callable[[int], memoryview] | None = None
    ) -> Restored:
        """The first ``n`` cells of a chunked row, as far as its chunks are sound, as a state
        for a context with ``n_stream`` KV streams. With ``into`` (``StateMemory.lend``), the
        chunk files are read into one view it gives and the state is written into another
        (``seqstate.concat``)."""
        if self._catalog.pin_load(row.key) is None:
            return Restored(None, 0)
        try:
            for _ in range(3):
                pieces, covered, corrupt, retry = self._read_chain(row, n, into)
                if not retry:
                    break
        finally:
            self._catalog.unpin_load(row.key)
        m = min(n, covered)
        if m <= 0:
            return Restored(None, 0, corrupt)
        payloads = [p for p, _ in pieces]
        return Restored(
            seqstate.concat(payloads, n_stream=n_stream, n_cells=m, keep=[k for _, k in pieces], into=into),
            m, corrupt,
        )  # fmt: skip

    def _read_chain(
        self, row: Row, n: int, into: Callable[[int], memoryview] | None = None
    ) -> tuple[list[tuple[Buffer, int]], int, bool, bool]:
        """Read the chunks covering ``n`` tokens: ((payload, cells it serves) each, cells
        covered, corrupt, retry). With ``into``, the files are read one after another into
        one view it gives (``_Arena``).

        Each chunk serves the row from its start to the next link's start (the row may
        branch off inside it: only its head is used), the last one up to ``n``."""
        with self._catalog.lock:
            chain = [self._catalog.chunks.get(k) for k in self._catalog.chunks.chain(row.key)]
            needed = [(c.key, c.tier, c.start, c.size) for c in chain if c is not None and c.start < n]
        ends = [start for _, _, start, _ in needed[1:]] + [n] if needed else []  # [] (evicted meanwhile)
        arena = None if into is None else _Arena(into, sum(size for *_, size in needed))
        pieces: list[tuple[Buffer, int]] = []
        covered = 0
        for (key, tier, start, _), end in zip(needed, ends, strict=True):
            if tier is None or start != covered:
                # a lost link (found damaged earlier, or gone with the RAM tier): what precedes
                # it is all that can be restored; a miss here says "corrupt"
                return pieces, covered, True, False
            try:
                header, payload = kvc_chunked.read_chunk(self._tiers[tier], key, arena)
            except FileNotFoundError as exc:
                with self._catalog.lock:
                    now = self._catalog.chunks.get(key)
                if now is None or now.tier != tier:  # superseded or moved meanwhile
                    return pieces, covered, False, True
                with self._io_lock:
                    self._evictor.drop_chunk(key, exc)
                break
            except kvc_whole.CorruptBlob as exc:
                with self._io_lock:
                    self._evictor.drop_chunk(key, exc)
                return pieces, covered, True, False
            used = min(header.n, end - start)
            if header.tokens_le[: 4 * used] != row.tokens_le[4 * start : 4 * (start + used)]:
                # NOTE: never seen; the chain is built from these very tokens. Checked anyway
                # (a byte compare) because serving another prefix's KV would be silent.
                log.error("chunk %s does not hold row %s's tokens", key.hex()[:12], row.key.hex()[:12])
                return pieces, covered, True, False
            pieces.append((payload, used))
            covered = start + used
        return pieces, covered, False, False

    # -- verification ------------------------------------------------------------------------

    def verify_chunk(self, chunk: Chunk) -> bool:
        """Re-check one stored chunk; a bad one is dropped (its rows fall back before it)."""
        if chunk.tier is None:
            return True
        try:
            kvc_chunked.read_chunk(self._tiers[chunk.tier], chunk.key)
            return True
        except FileNotFoundError:
            with self._catalog.lock:
                now = self._catalog.chunks.get(chunk.key)
            if now is None or now.tier != chunk.tier:
                return True  # superseded or moved meanwhile
            with self._io_lock:
                self._evictor.drop_chunk(chunk.key, FileNotFoundError("chunk file is gone"))
            return False
        except kvc_whole.CorruptBlob as exc:
            with self._io_lock:
                self._evictor.drop_chunk(chunk.key, exc)
            return False


class _Arena:
    """The chunk files of one restore, read one after another into one view of ``lend``
    (``StateMemory.lend``), taken at the first file read (a RAM tier reads none); a file
    larger than the catalog said gets new memory of its own."""

    def __init__(self, lend: Callable[[int], memoryview], size: int) -> None:
        self._lend = lend
        self._size = size
        self._view: memoryview | None = None
        self._at = 0

    def __call__(self, n: int) -> memoryview:
        if self._view is None:
            self._view = self._lend(max(self._size, n))
        if self._at + n > len(self._view):
            return memoryview(bytearray(n))
        part = self._view[self._at : self._at + n]
        self._at += n
        return part
