"""CacheStore: the KV cache the engine talks to — saves, lookups, loads and management.

It composes the parts: the catalog of published rows and the bytes each tier holds
(``catalog``), the tiers (``tiers``), quotas with LRU demotion and eviction
(``eviction``), whole-row blob I/O (``blobs``), the background writer (``writer``), the
SQLite metadata and change notifications (``journal``), and start-up reconciliation of
the database with the files (``reconcile``, whose plan the constructor applies; a corrupt
database is moved aside and rebuilt from the files, losing only user pins).

Threads. Any thread may call any method. ``submit_save`` never blocks: the blob is built,
written and published on the writer thread. Locks, always taken in this order:
``_io_lock`` serialises everything that changes tier contents (publish, demote, evict,
move, delete, gc), so quotas hold; ``_lock`` (the catalog's) guards the catalog, in-flight
saves and load pins and is only held briefly (never during file I/O or hashing); the
journal's lock serialises the database. Change notifications (``subscribe``) are called
on whichever thread made the change — the writer thread for ``published`` — with ``_lock``
not held, so a callback may call back into the store.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.cache.blobs import Blobs, SaveJob
from app.cache.catalog import Catalog
from app.cache.counters import COUNTER_NAMES, EXTRA_COUNTERS, Counters
from app.cache.errors import Problem, Problems
from app.cache.eviction import DEFAULT_QUOTAS, Evictor, check_quota
from app.cache.journal import Journal, Subscriber
from app.cache.keys import KeyMeta, encode_tokens
from app.cache.meta import STATUS_AVAILABLE, MetaDB
from app.cache.reconcile import reconcile
from app.cache.rows import PREVIEW_CHARS, Row
from app.cache.tiers import (
    TIER_DISK,
    TIER_RAM,
    TIER_RAM_FILE,
    TIERS,
    FileTier,
    RamTier,
    Tier,
    default_ram_file_dir,
)
from app.cache.writer import Writer

log = logging.getLogger(__name__)

__all__ = [
    "CacheStore", "KeyMeta", "Row", "VerifyReport", "SAVE_REASONS", "COUNTER_NAMES",
    "EXTRA_COUNTERS", "DEFAULT_QUOTAS", "PREVIEW_CHARS",
]  # fmt: skip

SAVE_REASONS = ("cold", "continued", "finish", "evict", "shutdown")
DB_NAME = "kvcache.sqlite"

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class VerifyReport:
    checked: int
    ok: int
    removed: tuple[str, ...]  # hex keys of the bad blobs that were deleted


class CacheStore:
    def __init__(
        self,
        data_dir: Path,
        *,
        quotas: dict[str, int] | None = None,
        ram_file_dir: Path | None = None,
        writer_queue: int = 32,
    ) -> None:
        self.data_dir = Path(data_dir)
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a broken data dir costs the cache, never the app
            log.error("cache data dir %s is unusable: %s", self.data_dir, exc)
        self._ram = RamTier()
        self._file_tiers = {
            TIER_RAM_FILE: FileTier(
                TIER_RAM_FILE, ram_file_dir or default_ram_file_dir(self.data_dir)
            ),
            TIER_DISK: FileTier(TIER_DISK, self.data_dir / "kv"),
        }
        self._tiers: dict[str, Tier] = {TIER_RAM: self._ram, **self._file_tiers}
        self._catalog = Catalog()
        self._lock = self._catalog.lock  # guards the catalog, in-flight saves and pins
        self._cond = threading.Condition(self._lock)
        self._io_lock = threading.RLock()  # serialises every change of tier contents
        self._inflight: dict[bytes, SaveJob] = {}
        self._counters = Counters()
        self._problems = Problems()
        self._closed = False
        self._db = MetaDB(self.data_dir / DB_NAME)
        self.db_rebuilt = self._db.rebuilt
        self._journal = Journal(self._db, self._counters, self._problems)
        self._evictor = Evictor(
            self._catalog, self._tiers, self._journal, self._counters, self._problems, quotas
        )
        self._blobs = Blobs(
            self._catalog, self._tiers, self._evictor, self._journal, self._counters, self._io_lock
        )
        with self._io_lock:
            self._open_files()
            self._evictor.gc()
        self._writer: Writer[SaveJob] = Writer(
            self._write_job, maxsize=writer_queue, on_error=self._on_write_error
        )

    # the catalog's parts under their historical names (tests and benchmarks reach in)
    @property
    def _index(self) -> Any:
        return self._catalog.index

    @property
    def _load_pins(self) -> Any:
        return self._catalog.load_pins

    def _emit(self, kind: str, obj: Any) -> None:
        self._journal.emit(kind, obj)

    def _open_files(self) -> None:
        """Start-up: remove temp files, then apply ``reconcile``'s plan."""
        for tier in self._file_tiers.values():
            self._counters.add("temp_files_removed", tier.remove_temp_files())
        plan = reconcile(self._file_tiers, self._db)
        for tier_name, key in plan.delete_files:
            self._file_tiers[tier_name].delete(key)
        self._catalog.add_all(plan.rows.values())
        self._counters.add_all(plan.counters)
        self._journal.call("reconciling the database", self._db.delete, plan.drop_keys)
        self._journal.put_many(plan.put_rows)

    # -- saving -------------------------------------------------------------------------

    def submit_save(
        self,
        *,
        model_id: str,
        meta: KeyMeta,
        tokens: Sequence[int],
        payload: bytes | memoryview,
        reason: str,
        tier: str,
        context_size: int = 0,
        prompt_text: str = "",
        quant_bits: int = 0,
    ) -> bytes | None:
        """Queue a save; the key when queued or already present, None when dropped.

        Never blocks. Counts ``saves_<reason>`` for every call, and ``duplicate_dropped`` or
        ``saves_dropped`` when nothing new is queued.
        """
        if reason not in SAVE_REASONS:
            raise ValueError(f"unknown save reason {reason!r}; expected one of {SAVE_REASONS}")
        if tier not in TIERS:
            raise ValueError(f"unknown cache tier {tier!r}; expected one of {TIERS}")
        tokens_le = encode_tokens(tokens)
        key = meta.key(tokens_le)
        job = SaveJob(
            key, model_id, meta, tokens_le, len(tokens_le) // 4, payload, reason,
            tier, context_size, prompt_text, quant_bits,
        )  # fmt: skip
        with self._lock:
            self._counters.add(f"saves_{reason}")
            if key in self._catalog or key in self._inflight:
                self._counters.add("duplicate_dropped")
                return key
            if self._closed:
                self._counters.add("saves_dropped")
                return None
            self._inflight[key] = job
            if not self._writer.submit(job):
                del self._inflight[key]
                self._counters.add("saves_dropped")
                return None
        return key

    def _write_job(self, job: SaveJob) -> None:
        """Writer thread: store the job, then let waiters and subscribers know."""
        try:
            row = self._blobs.write(job)
        finally:
            with self._cond:
                self._inflight.pop(job.key, None)
                self._cond.notify_all()
        if row is not None:
            self._journal.emit("published", row)

    def _on_write_error(self, job: SaveJob, exc: BaseException) -> None:
        self._evictor.write_failed(exc, "saving to the cache")
        with self._cond:
            self._inflight.pop(job.key, None)
            self._cond.notify_all()

    # -- lookups ------------------------------------------------------------------------

    def lookup_exact(self, meta: KeyMeta, tokens: Sequence[int]) -> Row | None:
        """The published row for exactly these tokens, or None."""
        return self._catalog.get(meta.key(tokens))

    def get(self, key: bytes) -> Row | None:
        """The published row for a key, or None."""
        return self._catalog.get(key)

    def wait_for(self, key: bytes, timeout_ms: int) -> Row | None:
        """The row for ``key``; if its save is queued or being written, wait for the publish
        up to ``timeout_ms``. None when it is neither published nor in flight, or on timeout."""
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        with self._cond:
            while True:
                row = self._catalog.get(key)
                if row is not None or key not in self._inflight:
                    return row
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def longest_prefix(
        self, meta: KeyMeta, tokens: Sequence[int], *, max_len: int | None = None
    ) -> Row | None:
        """The longest published row whose tokens are a prefix of ``tokens`` (any length
        from 1 to ``max_len``), verified token for token. Linear in the prompt."""
        t0 = time.perf_counter_ns()
        limit = len(tokens) if max_len is None else min(max_len, len(tokens))
        best = self._catalog.longest_prefix(meta, tokens, limit)
        self._counters.add("longest_prefix_probes")
        self._counters.add("longest_prefix_ns", time.perf_counter_ns() - t0)
        return best

    # -- loading ------------------------------------------------------------------------

    def load(self, row: Row) -> bytes | memoryview | None:
        """The row's payload, CRC- and key-checked; None (a miss) if it is gone or bad.

        The row is pinned against eviction while it is read. A corrupt, torn or missing
        blob is deleted, its row dropped and ``corrupt_files`` counted.
        """
        t0 = time.perf_counter_ns()
        cur = self._catalog.pin_load(row.key)
        if cur is None:
            return None
        try:
            payload = self._blobs.read_valid(cur)
        finally:
            self._catalog.unpin_load(row.key)
        if payload is None:
            return None
        with self._lock:
            updated = self._catalog.get(row.key)
            if updated is not None:
                updated = replace(updated, last_used=time.time(), hits=updated.hits + 1)
                self._catalog.add(updated)
        self._counters.add("loads")
        # NOTE: not load_total_ns: the engine times the whole restore (read + unpack)
        # and adds it there through count(); this is the blob read + check alone.
        self._counters.add("blob_read_ns", time.perf_counter_ns() - t0)
        if updated is not None:
            self._tiers[updated.tier].touch(updated.key, updated.hits, int(updated.last_used))
            self._journal.update(updated.key, last_used=updated.last_used, hits=updated.hits)
            self._journal.emit("updated", updated)
        return payload

    # -- counters -----------------------------------------------------------------------

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to a counter (the engine bumps hits, misses and pack time here)."""
        self._counters.add(name, n)

    def counters(self) -> dict[str, int]:
        """This process's counters: the SPEC §4 names, then extras; bytes_* are current."""
        out = self._counters.snapshot()
        for tier, used in self._catalog.usage_all().items():
            out[f"bytes_{tier}"] = used
        return out

    def lifetime_counters(self) -> dict[str, int]:
        """Counters summed over every closed session of this data dir, plus this one."""
        saved = self._journal.counters()
        out = self.counters()
        for name, value in saved.items():
            if not name.startswith("bytes_"):
                out[name] = out.get(name, 0) + value
        return out

    def problems(self) -> tuple[Problem, ...]:
        """Environment failures met so far (disk full, read-only, …), in plain words."""
        return self._problems.all()

    # -- tiers, quotas, management --------------------------------------------------------

    def set_quota(self, tier: str, quota: int) -> None:
        """Change a tier's quota and apply it now."""
        check_quota(tier, quota)
        with self._io_lock:
            self._evictor.quotas[tier] = quota
            self._evictor.gc()

    def tier_usage(self) -> dict[str, tuple[int, int]]:
        """``{tier: (used bytes, quota bytes)}``."""
        usage = self._catalog.usage_all()
        return {t: (usage[t], self._evictor.quotas[t]) for t in TIERS}

    def rows(self, model_id: str | None = None) -> list[Row]:
        """Snapshots of every row (published, then in-flight ones with status ``writing``)."""
        with self._lock:
            out = [r for r in self._catalog.rows() if model_id is None or r.model_id == model_id]
            for job in self._inflight.values():
                if model_id is None or job.model_id == model_id:
                    out.append(job.pending_row())
        return out

    def pin(self, key: bytes) -> bool:
        """User pin: quotas never evict or demote the row. Persistent."""
        return self._set_pinned(key, True)

    def unpin(self, key: bytes) -> bool:
        return self._set_pinned(key, False)

    def _set_pinned(self, key: bytes, pinned: bool) -> bool:
        with self._lock:
            row = self._catalog.get(key)
            if row is None:
                return False
            row = replace(row, pinned=pinned)
            self._catalog.add(row)
        self._journal.update(key, pinned=pinned)
        self._journal.emit("updated", row)
        return True

    def evict(self, key: bytes) -> bool:
        """Demote a ram/ram_file row to disk, or delete a disk row."""
        with self._io_lock:
            row = self.get(key)
            if row is None:
                return False
            if row.tier == TIER_DISK:
                self._counters.add("evictions")
                self._evictor.remove(row)
                return True
            return self._evictor.demote(row)

    def delete(self, key: bytes) -> bool:
        with self._io_lock:
            row = self.get(key)
            if row is None:
                return False
            self._evictor.remove(row)
            return True

    def move(self, key: bytes, tier: str) -> bool:
        """Move a row to another tier (making room there under its quota)."""
        if tier not in TIERS:
            raise ValueError(f"unknown cache tier {tier!r}; expected one of {TIERS}")
        with self._io_lock:
            row = self.get(key)
            if row is None:
                return False
            return row.tier == tier or self._evictor.relocate(row, tier) is not None

    def clear(
        self,
        model_id: str | None = None,
        older_than: float | None = None,
        *,
        include_pinned: bool = False,
    ) -> int:
        """Delete rows (of one model / unused for ``older_than`` seconds); user-pinned rows
        are kept unless ``include_pinned``. Returns how many were deleted."""
        cutoff = None if older_than is None else time.time() - older_than
        n = 0
        with self._io_lock:
            for row in self.rows(model_id):
                if row.status != STATUS_AVAILABLE or (row.pinned and not include_pinned):
                    continue
                if cutoff is not None and row.last_used >= cutoff:
                    continue
                self._evictor.remove(row)
                n += 1
        return n

    def gc(self) -> int:
        """Apply the quotas now; returns how many rows were demoted or deleted."""
        with self._io_lock:
            return self._evictor.gc()

    def verify(self, progress: ProgressFn | None = None) -> VerifyReport:
        """Re-check the CRC and key of every blob; bad ones are deleted and counted."""
        rows = [r for r in self.rows() if r.status == STATUS_AVAILABLE]
        removed: list[str] = []
        for i, row in enumerate(rows):
            if progress:
                progress(i, len(rows))
            if self.get(row.key) is not None and self._blobs.read_valid(row) is None:
                removed.append(row.key.hex())
        if progress:
            progress(len(rows), len(rows))
        return VerifyReport(len(rows), len(rows) - len(removed), tuple(removed))

    # -- notifications, lifecycle -----------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(kind, row_or_key)`` on every change: ``published`` (Row),
        ``updated`` (Row) or ``removed`` (key bytes). Runs on the thread that made the change
        (often the writer thread); keep it short. Returns an unsubscribe function."""
        return self._journal.subscribe(callback)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued save has been written or failed; False on timeout."""
        return self._writer.flush(timeout)

    def close(self) -> None:
        """Drain the writer, persist counter totals, close the database. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._writer.close()
        totals = {k: v for k, v in self.counters().items() if not k.startswith("bytes_")}
        self._journal.add_counters(totals)
        self._journal.close()
        ram_file_dir = self._file_tiers[TIER_RAM_FILE].dir
        with contextlib.suppress(OSError):  # leave no empty per-data-dir folders in /dev/shm
            ram_file_dir.rmdir()

    def __enter__(self) -> CacheStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
