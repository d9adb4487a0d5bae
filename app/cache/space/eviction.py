"""Quotas and what enforces them: LRU demotion (``ram``/``ram_file`` → ``disk``) and
eviction (from ``disk``), moves between tiers, and removal of rows and chunks.

Each tier has a byte quota, counted in unique bytes: a chunk shared by twenty rows counts
once. Before bytes land in a tier, the least recently used rows that occupy it (their
own file, or a chunk they use) and are neither user-pinned nor being loaded make room:
from ``ram``/``ram_file`` they are demoted to ``disk`` (``demotions``), from ``disk``
deleted (``evictions``) — and a chunk is deleted only when no row uses it any more.

Where a chunked row's pieces live: its manifest in its own tier (the row's ``tier``), its
chunks in a tier at least as lasting (``tiers.PERSISTENCE``: ram < ram_file < disk), so a
row that outlives the process never leans on a chunk that does not. Demoting a row takes
its less lasting chunks along; moving a row to a faster tier takes only the chunks no more
lasting row needs.

Every method here runs with the store's ``io_lock`` held (it serialises all changes of tier
contents, so quotas hold); the catalog's lock is taken only for the brief in-memory updates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from app.cache.blobs import kvc_chunked, kvc_whole
from app.cache.blobs.tiers import (
    PERSISTENCE,
    TIER_DISK,
    TIERS,
    Tier,
    blob_name,
    read_blob_parts,
    write_blob,
)
from app.cache.contents.catalog import Catalog
from app.cache.contents.chunk_index import Chunk
from app.cache.contents.rows import Row
from app.cache.counters import Counters
from app.cache.db.journal import Journal
from app.cache.errors import Problems, is_environment_error

log = logging.getLogger(__name__)

GiB = 1 << 30
DEFAULT_QUOTAS = {"ram": 1 * GiB, "ram_file": 2 * GiB, TIER_DISK: 20 * GiB}
Protect = frozenset[bytes]


def check_quota(tier: str, quota: int) -> None:
    if tier not in TIERS:
        raise ValueError(f"unknown cache tier {tier!r}; expected one of {TIERS}")
    if not isinstance(quota, int) or isinstance(quota, bool) or quota < 0:
        raise ValueError(f"quota for {tier} must be a byte count >= 0, got {quota!r}")


def own_name(row: Row) -> str:
    """The file a row owns in its tier: its v1 blob or its v2 manifest."""
    return blob_name(row.key) if row.format == 1 else kvc_chunked.row_name(row.key)


class Evictor:
    def __init__(
        self,
        catalog: Catalog,
        tiers: dict[str, Tier],
        journal: Journal,
        counters: Counters,
        problems: Problems,
        quotas: dict[str, int] | None = None,
    ) -> None:
        self._catalog = catalog
        self._tiers = tiers
        self._journal = journal
        self._counters = counters
        self._problems = problems
        self.quotas = dict(DEFAULT_QUOTAS)
        for tier, quota in (quotas or {}).items():
            check_quota(tier, quota)
            self.quotas[tier] = quota
        self.held: Callable[[str], int] = lambda tier: 0
        """Bytes a tier's quota holds besides its rows: the RAM tier's share of the store's
        state memory pool (``CacheStore``), so rows and buffers together stay within it."""

    def room(self, tier: str) -> int:
        """What a tier's rows may take: its quota less what it holds besides them."""
        return max(0, self.quotas[tier] - self.held(tier))

    def tier_for(self, wanted: str, size: int) -> str | None:
        """Where ``size`` new bytes can go: the wanted tier, else disk, else nowhere."""
        if size <= self.room(wanted):
            return wanted
        if size <= self.quotas[TIER_DISK]:
            return TIER_DISK
        return None

    def place(self, wanted: str, size: int, protect: Protect = frozenset()) -> str | None:
        """The tier ``size`` new bytes of a save go to, room made; None (counted as
        ``saves_rejected``) when they fit nowhere."""
        tier = self.tier_for(wanted, size)
        if tier is None or not self.make_room(tier, size, protect):
            log.warning("cache save of %d bytes fits no tier; not stored", size)
            self._counters.add("saves_rejected")
            return None
        return tier

    def gc(self) -> int:
        """Apply every quota now; returns how many rows were demoted or evicted."""
        before = self._counters.get("evictions") + self._counters.get("demotions")
        for tier in TIERS:
            self.make_room(tier, 0)
        return self._counters.get("evictions") + self._counters.get("demotions") - before

    def make_room(self, tier: str, size: int, protect: Protect = frozenset()) -> bool:
        """Demote/evict LRU rows until ``size`` more bytes fit in ``tier``.

        ``protect``: rows being saved or moved by a caller up the stack. A demotion makes
        room on disk in turn, and must not evict the very row whose move started it.
        """
        quota = self.room(tier)
        if size > quota:
            return False
        for cand in self._catalog.occupants(tier):
            if self._catalog.usage(tier) + size <= quota:
                break
            row = self._catalog.get(cand.key)
            if row is None or row.key in protect or self._catalog.is_busy(row.key):
                continue
            if tier == TIER_DISK or not self.demote(row, protect):
                if tier != TIER_DISK:
                    log.warning("cache row %s could not be demoted; deleting", row.key.hex())
                self._counters.add("evictions")
                self.remove(row, evicted=True)
        return self._catalog.usage(tier) + size <= quota

    def demote(self, row: Row, protect: Protect = frozenset()) -> bool:
        if self.relocate(row, TIER_DISK, protect) is None:
            return False
        self._counters.add("demotions")
        return True

    def relocate(self, row: Row, dest: str, protect: Protect = frozenset()) -> Row | None:
        """Move a row to ``dest``: its own file (copied validated, then the old one dropped)
        and, for a chunked row, the chunks that must or may follow it."""
        protect = protect | {row.key}
        if row.tier != dest:
            row = self._move_own(row, dest, protect)  # type: ignore[assignment]
            if row is None:
                return None
        for chunk in self._chunks_to_move(row, dest):
            self.move_chunk(chunk.key, dest, protect)
        return row

    def _move_own(self, row: Row, dest: str, protect: Protect) -> Row | None:
        name = own_name(row)
        try:
            if row.format == 1:
                prefix, payload = read_blob_parts(self._tiers[row.tier], row.key)
                kvc_whole.parse_parts(prefix, payload, row.key)
                parts: tuple[bytes | memoryview, ...] = (prefix, payload)
            else:
                data = self._tiers[row.tier].get(name)
                kvc_chunked.parse_row(data, row.key)
                parts = (data,)
        except (OSError, kvc_whole.CorruptBlob) as exc:
            log.warning("dropping corrupt cache entry %s: %s", row.key.hex(), exc)
            self._counters.add("corrupt_files")
            self.remove(row)
            return None
        if not self.make_room(dest, sum(len(p) for p in parts), protect):
            return None
        try:
            if row.format == 1:
                location = write_blob(self._tiers[dest], row.key, parts[0], parts[1])  # type: ignore[arg-type]
            else:
                location = self._tiers[dest].put([(name, parts)])[0]
        except (OSError, kvc_whole.CorruptBlob) as exc:
            self.write_failed(exc, f"moving a cache entry to {dest}")
            return None
        with self._catalog.lock:  # re-read: a load or pin may have updated the row meanwhile
            new = replace(self._catalog.get(row.key) or row, tier=dest, location=location)
            self._catalog.add(new)
        self._tiers[row.tier].remove(name)
        self._journal.update(row.key, tier=dest, location=location)
        self._journal.emit("updated", new)
        return new

    def _chunks_to_move(self, row: Row, dest: str) -> list[Chunk]:
        """The row's stored chunks that must (less lasting than ``dest``) or may (no other
        row needs them more lasting) move to ``dest``."""
        out: list[Chunk] = []
        with self._catalog.lock:
            for key in self._catalog.chunks.chain(row.key):
                chunk = self._catalog.chunks.get(key)
                if chunk is None or chunk.tier is None or chunk.tier == dest:
                    continue
                if PERSISTENCE[chunk.tier] < PERSISTENCE[dest] or self._needed_at(chunk) <= PERSISTENCE[dest]:
                    out.append(chunk)
        return out

    def _needed_at(self, chunk: Chunk) -> int:
        homes = [r.tier for k in chunk.rows if (r := self._catalog.get(k)) is not None]
        return max((PERSISTENCE[t] for t in homes), default=0)

    def settle(self, row: Row) -> None:
        """After a save: the row's chunks that are less lasting than the row follow it."""
        for chunk in self._chunks_to_move(row, row.tier):
            if PERSISTENCE[chunk.tier] < PERSISTENCE[row.tier]:  # type: ignore[index]
                self.move_chunk(chunk.key, row.tier, frozenset({row.key}))

    def move_chunk(self, key: bytes, dest: str, protect: Protect = frozenset()) -> bool:
        with self._catalog.lock:
            chunk = self._catalog.chunks.get(key)
            source = chunk.tier if chunk is not None else None
        if chunk is None or source is None or source == dest:
            return source == dest
        try:
            header, payload = kvc_chunked.read_chunk(self._tiers[source], key)
        except (OSError, kvc_whole.CorruptBlob) as exc:
            self.drop_chunk(key, exc)
            return False
        head = kvc_chunked.build_chunk(header, payload)
        if not self.make_room(dest, len(head) + len(payload), protect):
            return False
        try:
            self._tiers[dest].put([(kvc_chunked.chunk_name(key), (head, payload))])
        except (OSError, kvc_whole.CorruptBlob) as exc:
            self.write_failed(exc, f"moving a cache chunk to {dest}")
            return False
        with self._catalog.lock:
            if self._catalog.chunks.get(key) is not chunk or chunk.tier != source:
                self._tiers[dest].remove(kvc_chunked.chunk_name(key))  # changed under us: undo
                return False
            self._catalog.chunks.move(key, dest)
        self._tiers[source].remove(kvc_chunked.chunk_name(key))
        self._journal.update_chunk(key, tier=dest)
        return True

    def drop_chunk(self, key: bytes, exc: BaseException) -> None:
        """A chunk failed validation (or vanished): delete it, keep the rows that use it
        (they restore up to it), count it."""
        with self._catalog.lock:
            chunk = self._catalog.chunks.get(key)
            tier = chunk.tier if chunk is not None else None
            if chunk is not None:
                self._catalog.chunks.mark_missing(key)
        if tier is None:
            return
        log.warning("dropping corrupt cache chunk %s: %s", key.hex(), exc)
        self._counters.add("corrupt_files")
        self._tiers[tier].remove(kvc_chunked.chunk_name(key))
        self._journal.delete_chunks([key])

    def remove(self, row: Row, *, evicted: bool = False) -> None:
        removed, orphans = self._catalog.remove(row.key, evicted=evicted)
        if removed is None:
            return
        try:
            self._tiers[removed.tier].remove(own_name(removed))
        except OSError as exc:
            log.error("could not delete cache file of %s: %s", row.key.hex(), exc)
        self.delete_chunk_files(orphans)
        self._journal.delete([row.key])
        self._journal.emit("removed", row.key)

    def delete_chunk_files(self, chunks: Iterable[Chunk]) -> None:
        """Delete the files of chunks already gone from the index (no row uses them)."""
        keys = []
        for chunk in chunks:
            keys.append(chunk.key)
            if chunk.tier is not None:
                try:
                    self._tiers[chunk.tier].remove(kvc_chunked.chunk_name(chunk.key))
                except OSError as exc:
                    log.error("could not delete cache chunk %s: %s", chunk.key.hex(), exc)
        self._journal.delete_chunks(keys)

    def write_failed(self, exc: BaseException, doing: str) -> None:
        """Count a failed write: the environment's (shown) or, if not, a bug (loud)."""
        if is_environment_error(exc) or isinstance(exc, kvc_whole.CorruptBlob):
            problem = self._problems.note(exc, doing)
            log.error("cache: %s: %s", problem.message, exc)
            self._counters.add("save_errors")
        else:
            log.error("bug while %s", doing, exc_info=exc)
            self._counters.add("internal_errors")
