"""CacheStore: the KV cache the engine talks to — saves, lookups, loads, tiers and quotas.

The store owns the in-memory index (``app.cache.index``), the tiers (``app.cache.tiers``),
the background writer (``app.cache.writer``) and the SQLite metadata (``app.cache.meta``).

Threads. Any thread may call any method. ``submit_save`` never blocks: the blob is built,
written and published on the writer thread. Three locks, always taken in this order:
``_io_lock`` serialises everything that changes tier contents (publish, demote, evict,
move, delete, gc), so quotas hold; ``_lock`` guards the index, in-flight saves, load pins,
usage and counters and is only held briefly (never during file I/O or hashing);
``_db_lock`` serialises the database. Change notifications (``subscribe``) are called on
whichever thread made the change — the writer thread for ``published`` — with ``_lock``
not held, so a callback may call back into the store.

Quotas. Each tier has a byte quota on whole blob files. Before a blob lands in a tier,
least-recently-used rows that are neither user-pinned nor being loaded make room: from
``ram``/``ram_file`` they are demoted to ``disk`` (``demotions``), from ``disk`` deleted
(``evictions``). A blob larger than its tier's quota goes to ``disk`` when it fits there,
else it is not stored (``saves_rejected``).

Start-up reconciliation (in the constructor): leftover temp files are removed, ``ram`` rows
dropped (they died with the last process), rows whose file is gone dropped, ``writing`` rows
whose file is complete published, files without a row re-registered from their KVC headers,
and a corrupt database moved aside and rebuilt from the blob files (user pins are lost).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.cache import kvc
from app.cache.index import Row, RowIndex, prefix_keys
from app.cache.keys import KeyMeta, decode_tokens, encode_tokens, quant_byte
from app.cache.meta import STATUS_AVAILABLE, STATUS_WRITING, MetaDB, row_fields
from app.cache.reconcile import reconcile
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

__all__ = ["CacheStore", "KeyMeta", "Row", "VerifyReport", "SAVE_REASONS", "COUNTER_NAMES"]

GiB = 1 << 30
DEFAULT_QUOTAS = {TIER_RAM: 1 * GiB, TIER_RAM_FILE: 2 * GiB, TIER_DISK: 20 * GiB}
SAVE_REASONS = ("cold", "continued", "finish", "evict", "shutdown")
DB_NAME = "kvcache.sqlite"
PREVIEW_CHARS = 200

COUNTER_NAMES = (
    "hits_exact", "hits_resume", "hits_longest_prefix", "hits_sticky", "misses",
    "saves_cold", "saves_continued", "saves_finish", "saves_evict", "saves_shutdown",
    "saves_dropped", "duplicate_dropped", "evictions", "demotions", "corrupt_files",
    "pack_total_ns", "load_total_ns", "longest_prefix_probes", "longest_prefix_ns",
    "bytes_ram", "bytes_ram_file", "bytes_disk",
)  # fmt: skip
# Beyond SPEC §4: failed writes, saves that fit no tier, blob reads, start-up repairs.
EXTRA_COUNTERS = (
    "save_errors", "saves_rejected", "loads", "blob_read_ns", "temp_files_removed",
    "rows_dropped_missing", "rows_reregistered",
)  # fmt: skip

Subscriber = Callable[[str, Any], None]
ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class VerifyReport:
    checked: int
    ok: int
    removed: tuple[str, ...]  # hex keys of the bad blobs that were deleted


@dataclass(frozen=True, slots=True)
class _SaveJob:
    key: bytes
    model_id: str
    meta: KeyMeta
    tokens_le: bytes
    n_tokens: int
    payload: bytes
    reason: str
    tier: str
    context_size: int
    prompt_text: str
    quant_bits: int


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
        self._quotas = dict(DEFAULT_QUOTAS)
        for tier, quota in (quotas or {}).items():
            self._check_quota(tier, quota)
            self._quotas[tier] = quota
        self._ram = RamTier()
        self._file_tiers = {
            TIER_RAM_FILE: FileTier(
                TIER_RAM_FILE, ram_file_dir or default_ram_file_dir(self.data_dir)
            ),
            TIER_DISK: FileTier(TIER_DISK, self.data_dir / "kv"),
        }
        self._tiers: dict[str, Tier] = {TIER_RAM: self._ram, **self._file_tiers}
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._io_lock = threading.RLock()
        self._db_lock = threading.Lock()
        self._index = RowIndex()
        self._inflight: dict[bytes, _SaveJob] = {}
        self._load_pins: Counter[bytes] = Counter()
        self._usage = dict.fromkeys(TIERS, 0)
        self._counters = dict.fromkeys(COUNTER_NAMES + EXTRA_COUNTERS, 0)
        self._subscribers: list[Subscriber] = []
        self._closed = False
        self._db = MetaDB(self.data_dir / DB_NAME)
        self.db_rebuilt = self._db.rebuilt
        with self._io_lock:
            reconcile(self)
            self._gc_locked()
        self._writer: Writer[_SaveJob] = Writer(
            self._write_job, maxsize=writer_queue, on_error=self._on_write_error
        )

    # -- saving -------------------------------------------------------------------------

    def submit_save(
        self,
        *,
        model_id: str,
        meta: KeyMeta,
        tokens: Sequence[int],
        payload: bytes,
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
        job = _SaveJob(
            key, model_id, meta, tokens_le, len(tokens_le) // 4, bytes(payload), reason,
            tier, context_size, prompt_text, quant_bits,
        )  # fmt: skip
        with self._lock:
            self._counters[f"saves_{reason}"] += 1
            if key in self._index or key in self._inflight:
                self._counters["duplicate_dropped"] += 1
                return key
            if self._closed:
                self._counters["saves_dropped"] += 1
                return None
            self._inflight[key] = job
            if not self._writer.submit(job):
                del self._inflight[key]
                self._counters["saves_dropped"] += 1
                return None
        return key

    def _write_job(self, job: _SaveJob) -> None:
        """Writer thread: build the blob, make room, write atomically, publish."""
        meta = kvc.BlobMeta(
            fingerprint=job.meta.fingerprint,
            quant_type=job.meta.quant_type,
            ctx_params_hash=job.meta.ctx_params_hash,
            tokens=tuple(decode_tokens(job.tokens_le)),
            save_reason=job.reason,
            quant_bits=job.quant_bits,
            context_size=job.context_size,
            prompt_text=job.prompt_text,
            model_id=job.model_id,
        )
        prefix = kvc.build(meta, job.payload)
        size = len(prefix) + len(job.payload)
        row: Row | None = None
        with self._io_lock:
            try:
                tier = self._tier_for(job.tier, size)
                if tier is None or not self._make_room(tier, size):
                    log.warning("cache save of %d bytes fits no tier; not stored", size)
                    self._count("saves_rejected")
                    return
                now = time.time()
                row = Row(
                    key=job.key, model_id=job.model_id, fingerprint=job.meta.fingerprint.hex(),
                    quant_type=job.meta.quant_type, ctx_hash=job.meta.ctx_params_hash.hex(),
                    n_tokens=job.n_tokens, tokens_le=job.tokens_le, tier=tier, size=size,
                    save_reason=job.reason, created=now, last_used=now,
                    status=STATUS_WRITING, location=self._tiers[tier].location(job.key),
                    checksum=kvc.payload_crc_of(prefix), context_size=job.context_size,
                    prompt_preview=job.prompt_text[:PREVIEW_CHARS],
                )  # fmt: skip
                self._db_call(self._db.put, row_fields(row))
                try:
                    self._tiers[tier].write(job.key, prefix, job.payload)
                except (OSError, kvc.CorruptBlob) as exc:
                    log.error("cache save to %s failed: %s", tier, exc)
                    self._count("save_errors")
                    self._db_call(self._db.delete, [job.key.hex()])
                    row = None
                    return
                row = replace(row, status=STATUS_AVAILABLE)
                self._db_call(self._db.update, job.key.hex(), status=STATUS_AVAILABLE)
                with self._lock:
                    self._index.put(row)
                    self._usage[tier] += size
            finally:
                with self._cond:
                    self._inflight.pop(job.key, None)
                    self._cond.notify_all()
        if row is not None:
            self._emit("published", row)

    def _on_write_error(self, job: _SaveJob, exc: BaseException) -> None:
        self._count("save_errors")
        with self._cond:
            self._inflight.pop(job.key, None)
            self._cond.notify_all()

    def _tier_for(self, wanted: str, size: int) -> str | None:
        if size <= self._quotas[wanted]:
            return wanted
        if size <= self._quotas[TIER_DISK]:
            return TIER_DISK
        return None

    # -- lookups ------------------------------------------------------------------------

    def lookup_exact(self, meta: KeyMeta, tokens: Sequence[int]) -> Row | None:
        """The published row for exactly these tokens, or None."""
        key = meta.key(tokens)
        with self._lock:
            return self._index.get(key)

    def get(self, key: bytes) -> Row | None:
        """The published row for a key, or None."""
        with self._lock:
            return self._index.get(key)

    def wait_for(self, key: bytes, timeout_ms: int) -> Row | None:
        """The row for ``key``; if its save is queued or being written, wait for the publish
        up to ``timeout_ms``. None when it is neither published nor in flight, or on timeout."""
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        with self._cond:
            while True:
                row = self._index.get(key)
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
        ns = (meta.fingerprint.hex(), quant_byte(meta.quant_type), meta.ctx_params_hash.hex())
        with self._lock:
            lengths = self._index.candidate_lengths(ns, tokens, limit)
        best: Row | None = None
        if lengths:
            token_bytes = encode_tokens(tokens[: lengths[-1]])
            keys = prefix_keys(meta.hasher(), token_bytes, lengths)
            with self._lock:
                for n, key in zip(reversed(lengths), reversed(keys), strict=True):
                    row = self._index.get(key)
                    # NOTE: equal keys imply equal tokens unless sha256 collides; the check
                    # is cheap (one bytes compare) and makes "verified before use" literal.
                    if row is not None and row.tokens_le == token_bytes[: n * 4]:
                        best = row
                        break
        with self._lock:
            self._counters["longest_prefix_probes"] += 1
            self._counters["longest_prefix_ns"] += time.perf_counter_ns() - t0
        return best

    # -- loading ------------------------------------------------------------------------

    def load(self, row: Row) -> bytes | None:
        """The row's payload, CRC- and key-checked; None (a miss) if it is gone or bad.

        The row is pinned against eviction while it is read. A corrupt, torn or missing
        blob is deleted, its row dropped and ``corrupt_files`` counted.
        """
        t0 = time.perf_counter_ns()
        with self._lock:
            cur = self._index.get(row.key)
            if cur is None:
                return None
            self._load_pins[row.key] += 1
        try:
            payload = self._read_valid(cur)
        finally:
            with self._lock:
                self._load_pins[row.key] -= 1
                if self._load_pins[row.key] <= 0:
                    del self._load_pins[row.key]
        if payload is None:
            return None
        updated = None
        with self._lock:
            cur = self._index.get(row.key)
            if cur is not None:
                updated = replace(cur, last_used=time.time(), hits=cur.hits + 1)
                self._index.put(updated)
            self._counters["loads"] += 1
            # NOTE: not load_total_ns: the engine times the whole restore (read + unpack)
            # and adds it there through count(); this is the blob read + check alone.
            self._counters["blob_read_ns"] += time.perf_counter_ns() - t0
        if updated is not None:
            self._tiers[updated.tier].touch(updated.key, updated.hits, int(updated.last_used))
            self._db_call(
                self._db.update, updated.key.hex(), last_used=updated.last_used,
                hits=updated.hits,
            )  # fmt: skip
            self._emit("updated", updated)
        return payload

    def _read_valid(self, row: Row) -> bytes | None:
        """Read and fully validate a row's blob; drop it as corrupt if that fails."""
        for _ in range(3):  # a concurrent move changes the tier under us: follow it
            try:
                prefix, payload = self._tiers[row.tier].read_parts(row.key)
                kvc.parse_parts(prefix, payload, row.key)
                return payload
            except (OSError, kvc.CorruptBlob) as exc:
                with self._lock:
                    now = self._index.get(row.key)
                if now is None:
                    return None  # deleted meanwhile: a plain miss
                if now.tier != row.tier:
                    row = now
                    continue
                with self._io_lock:
                    with self._lock:
                        still = self._index.get(row.key)
                    if still is not None and still.tier == row.tier:
                        log.warning("dropping corrupt cache blob %s: %s", row.key.hex(), exc)
                        self._count("corrupt_files")
                        self._remove(still)
                return None
        return None

    # -- counters -----------------------------------------------------------------------

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to a counter (the engine bumps hits, misses and pack time here)."""
        self._count(name, n)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + n

    def counters(self) -> dict[str, int]:
        """This process's counters: the SPEC §4 names, then extras; bytes_* are current."""
        with self._lock:
            out = dict(self._counters)
            for tier in TIERS:
                out[f"bytes_{tier}"] = self._usage[tier]
        return out

    def lifetime_counters(self) -> dict[str, int]:
        """Counters summed over every closed session of this data dir, plus this one."""
        with self._db_lock:
            saved = self._db.counters()
        out = self.counters()
        for name, value in saved.items():
            if not name.startswith("bytes_"):
                out[name] = out.get(name, 0) + value
        return out

    # -- tiers, quotas, management --------------------------------------------------------

    @staticmethod
    def _check_quota(tier: str, quota: int) -> None:
        if tier not in TIERS:
            raise ValueError(f"unknown cache tier {tier!r}; expected one of {TIERS}")
        if not isinstance(quota, int) or quota < 0:
            raise ValueError(f"quota for {tier} must be a byte count >= 0, got {quota!r}")

    def set_quota(self, tier: str, quota: int) -> None:
        """Change a tier's quota and apply it now."""
        self._check_quota(tier, quota)
        with self._io_lock:
            self._quotas[tier] = quota
            self._gc_locked()

    def tier_usage(self) -> dict[str, tuple[int, int]]:
        """``{tier: (used bytes, quota bytes)}``."""
        with self._lock:
            return {t: (self._usage[t], self._quotas[t]) for t in TIERS}

    def rows(self, model_id: str | None = None) -> list[Row]:
        """Snapshots of every row (published, then in-flight ones with status ``writing``)."""
        with self._lock:
            out = [r for r in self._index.values() if model_id is None or r.model_id == model_id]
            for job in self._inflight.values():
                if model_id is None or job.model_id == model_id:
                    out.append(_inflight_row(job))
        return out

    def pin(self, key: bytes) -> bool:
        """User pin: quotas never evict or demote the row. Persistent."""
        return self._set_pinned(key, True)

    def unpin(self, key: bytes) -> bool:
        return self._set_pinned(key, False)

    def _set_pinned(self, key: bytes, pinned: bool) -> bool:
        with self._lock:
            row = self._index.get(key)
            if row is None:
                return False
            row = replace(row, pinned=pinned)
            self._index.put(row)
        self._db_call(self._db.update, key.hex(), pinned=pinned)
        self._emit("updated", row)
        return True

    def evict(self, key: bytes) -> bool:
        """Demote a ram/ram_file row to disk, or delete a disk row."""
        with self._io_lock:
            row = self.get(key)
            if row is None:
                return False
            if row.tier == TIER_DISK:
                self._count("evictions")
                self._remove(row)
                return True
            return self._demote(row)

    def delete(self, key: bytes) -> bool:
        with self._io_lock:
            row = self.get(key)
            if row is None:
                return False
            self._remove(row)
            return True

    def move(self, key: bytes, tier: str) -> bool:
        """Move a row to another tier (making room there under its quota)."""
        if tier not in TIERS:
            raise ValueError(f"unknown cache tier {tier!r}; expected one of {TIERS}")
        with self._io_lock:
            row = self.get(key)
            if row is None:
                return False
            return row.tier == tier or self._relocate(row, tier) is not None

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
                self._remove(row)
                n += 1
        return n

    def gc(self) -> int:
        """Apply the quotas now; returns how many rows were demoted or deleted."""
        with self._io_lock:
            return self._gc_locked()

    def _gc_locked(self) -> int:
        before = self._counters["evictions"] + self._counters["demotions"]
        for tier in TIERS:
            self._make_room(tier, 0)
        return self._counters["evictions"] + self._counters["demotions"] - before

    def verify(self, progress: ProgressFn | None = None) -> VerifyReport:
        """Re-check the CRC and key of every blob; bad ones are deleted and counted."""
        rows = [r for r in self.rows() if r.status == STATUS_AVAILABLE]
        removed: list[str] = []
        for i, row in enumerate(rows):
            if progress:
                progress(i, len(rows))
            if self.get(row.key) is not None and self._read_valid(row) is None:
                removed.append(row.key.hex())
        if progress:
            progress(len(rows), len(rows))
        return VerifyReport(len(rows), len(rows) - len(removed), tuple(removed))

    # -- eviction machinery (callers hold _io_lock) --------------------------------------

    def _make_room(self, tier: str, size: int, protect: frozenset[bytes] = frozenset()) -> bool:
        """Evict/demote LRU unpinned rows until ``size`` more bytes fit in ``tier``.

        ``protect``: rows being moved by a caller up the stack. A demotion makes room on disk
        in turn, and must not evict the very row whose move started it.
        """
        quota = self._quotas[tier]
        if size > quota:
            return False
        if self._usage[tier] + size <= quota:
            return True
        with self._lock:
            candidates = sorted(
                (r for r in self._index.values() if r.tier == tier),
                key=lambda r: (r.last_used, r.created),
            )
        for cand in candidates:
            if self._usage[tier] + size <= quota:
                break
            with self._lock:
                row = self._index.get(cand.key)
                busy = row is None or row.pinned or self._load_pins[cand.key] > 0
            if busy or row is None or row.tier != tier or row.key in protect:
                continue
            if tier == TIER_DISK or not self._demote(row, protect):
                if tier != TIER_DISK:
                    log.warning("cache row %s could not be demoted; deleting", row.key.hex())
                self._count("evictions")
                self._remove(row)
        return self._usage[tier] + size <= quota

    def _demote(self, row: Row, protect: frozenset[bytes] = frozenset()) -> bool:
        if self._relocate(row, TIER_DISK, protect) is None:
            return False
        self._count("demotions")
        return True

    def _relocate(self, row: Row, dest: str, protect: frozenset[bytes] = frozenset()) -> Row | None:
        """Copy a row's blob to ``dest`` (validated), switch the row over, drop the old copy."""
        try:
            prefix, payload = self._tiers[row.tier].read_parts(row.key)
            kvc.parse_parts(prefix, payload, row.key)
        except (OSError, kvc.CorruptBlob) as exc:
            log.warning("dropping corrupt cache blob %s: %s", row.key.hex(), exc)
            self._count("corrupt_files")
            self._remove(row)
            return None
        if not self._make_room(dest, row.size, protect | {row.key}):
            return None
        try:
            location = self._tiers[dest].write(row.key, prefix, payload)
        except (OSError, kvc.CorruptBlob) as exc:
            log.error("moving cache row %s to %s failed: %s", row.key.hex(), dest, exc)
            self._count("save_errors")
            return None
        with self._lock:  # re-read: a load or pin may have updated the row meanwhile
            new = replace(self._index.get(row.key) or row, tier=dest, location=location)
            self._index.put(new)
            self._usage[row.tier] -= row.size
            self._usage[dest] += row.size
        self._tiers[row.tier].delete(row.key)
        self._db_call(self._db.update, row.key.hex(), tier=dest, location=location)
        self._emit("updated", new)
        return new

    def _remove(self, row: Row) -> None:
        with self._lock:
            if self._index.remove(row.key) is not None:
                self._usage[row.tier] -= row.size
        try:
            self._tiers[row.tier].delete(row.key)
        except OSError as exc:
            log.error("could not delete cache blob %s: %s", row.key.hex(), exc)
        self._db_call(self._db.delete, [row.key.hex()])
        self._emit("removed", row.key)

    # -- notifications, db, lifecycle ------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(kind, row_or_key)`` on every change: ``published`` (Row),
        ``updated`` (Row) or ``removed`` (key bytes). Runs on the thread that made the change
        (often the writer thread); keep it short. Returns an unsubscribe function."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def _emit(self, kind: str, obj: Any) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(kind, obj)
            except Exception:
                log.exception("cache subscriber failed on %s", kind)

    def _db_call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a database call; the index in memory stays authoritative if it fails."""
        try:
            with self._db_lock:
                return fn(*args, **kwargs)
        except Exception as exc:  # SQLAlchemyError, OSError: the next start-up rebuilds
            log.error("cache database write failed: %s", exc)
            self._count("save_errors")
            return None

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
        self._db_call(self._db.add_counters, totals)
        with self._db_lock:
            self._db.close()
        ram_file_dir = self._file_tiers[TIER_RAM_FILE].dir
        with contextlib.suppress(OSError):  # leave no empty per-data-dir folders in /dev/shm
            ram_file_dir.rmdir()

    def __enter__(self) -> CacheStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _inflight_row(job: _SaveJob) -> Row:
    return Row(
        key=job.key, model_id=job.model_id, fingerprint=job.meta.fingerprint.hex(),
        quant_type=job.meta.quant_type, ctx_hash=job.meta.ctx_params_hash.hex(),
        n_tokens=job.n_tokens, tokens_le=job.tokens_le, tier=job.tier, size=len(job.payload),
        save_reason=job.reason, created=0.0, last_used=0.0, status=STATUS_WRITING,
        context_size=job.context_size, prompt_preview=job.prompt_text[:PREVIEW_CHARS],
    )  # fmt: skip
