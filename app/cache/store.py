"""CacheStore: the KV cache the engine talks to — saves, lookups, loads and management.

It composes the parts: ``catalog`` (rows, chunks, bytes per tier), ``tiers``, ``eviction``
(quotas, LRU demotion and eviction), ``blobs`` (whole rows, KVC v1) and ``chunked`` (KVC v2,
every save whose payload ``seqstate`` understands), ``lookup``, ``manage`` (pins, moves,
deletes), ``writer``, ``journal`` (SQLite metadata, change notifications) and ``startup``
(applies ``reconcile``'s plan; a corrupt database is rebuilt from the files, losing only
user pins).

Read-your-writes: a save is in the catalog the moment ``submit_save`` returns, served from
memory until the writer has published it, so the next request finds it however busy the
disk is.

Writes wait for a prefill (``hold_writes``, ``app.cache.saving.write_hold``); lookups are
unaffected: a queued save is served from memory.

Threads. Any thread may call any method. ``submit_save`` never blocks: the files are built,
written and published on the writer thread. Locks, always taken in this order:
``_io_lock`` serialises everything that changes tier contents (publish, demote, evict,
move, delete, gc), so quotas hold; ``_lock`` (the catalog's) guards the catalog and pins
and is only held briefly (never during file I/O or hashing); the journal's lock serialises
the database. Change notifications (``subscribe``) are called on whichever thread made the
change — the writer thread for ``published`` — with ``_lock`` not held, so a callback may
call back into the store.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.cache.blobs import kvc_chunked
from app.cache.blobs.state_buffers import StateMemory
from app.cache.blobs.tiers import (
    TIER_DISK,
    TIER_RAM,
    TIER_RAM_FILE,
    TIERS,
    Buffer,
    FileTier,
    RamTier,
    Tier,
    default_ram_file_dir,
)
from app.cache.contents.catalog import Catalog, Pending
from app.cache.contents.rows import PREVIEW_CHARS, Row
from app.cache.contents.tree import TreeNode, build_tree
from app.cache.counters import COUNTER_NAMES, EXTRA_COUNTERS, Counters
from app.cache.db.journal import Journal, Subscriber
from app.cache.db.meta import MetaDB
from app.cache.errors import Problem, Problems
from app.cache.keys import KeyMeta, encode_tokens
from app.cache.lookup import Candidate, Found, Lookup, NotFound
from app.cache.repair.startup import open_files
from app.cache.repair.verify import VerifyReport, verify_all
from app.cache.saving.chunked_rows import ChunkedRows, is_cuttable
from app.cache.saving.whole_rows import Blobs, SaveJob
from app.cache.saving.write_hold import WriteHold
from app.cache.saving.write_jobs import Later, WriteJobs
from app.cache.saving.writer import Writer
from app.cache.space.eviction import DEFAULT_QUOTAS, Evictor, check_quota
from app.cache.space.manage import Management

log = logging.getLogger(__name__)

__all__ = [
    "CacheStore", "KeyMeta", "Row", "VerifyReport", "SAVE_REASONS", "COUNTER_NAMES",
    "EXTRA_COUNTERS", "DEFAULT_QUOTAS", "PREVIEW_CHARS", "Found", "NotFound",
]  # fmt: skip

SAVE_REASONS = ("cold", "continued", "finish", "evict", "shutdown")
DB_NAME = "kvcache.sqlite"

ProgressFn = Callable[[int, int], None]


class CacheStore:
    def __init__(
        self,
        data_dir: Path,
        *,
        quotas: dict[str, int] | None = None,
        ram_file_dir: Path | None = None,
        writer_queue: int = 32,
        chunk_tokens: int = kvc_chunked.CHUNK_TOKENS,
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
        self._lock = self._catalog.lock
        self._cond = threading.Condition(self._lock)
        self._io_lock = threading.RLock()
        self._counters = Counters()
        self._problems = Problems()
        self._closed = False
        self._db = MetaDB(self.data_dir / DB_NAME)
        self.db_rebuilt = self._db.rebuilt
        self._unwritable = self._probe()
        self._journal = Journal(self._db, self._counters, self._problems)
        cat, tiers, journal, counters = self._catalog, self._tiers, self._journal, self._counters
        self._evictor = Evictor(cat, tiers, journal, counters, self._problems, quotas)
        evictor, io_lock = self._evictor, self._io_lock
        self._blobs = Blobs(cat, tiers, evictor, journal, counters, io_lock)
        self._chunked = ChunkedRows(cat, tiers, evictor, journal, counters, io_lock, chunk_tokens)
        self.memory = StateMemory()
        """Memory every save's pack, restore's reads and assembly pass through, reused
        (``app.cache.blobs.state_buffers``): the engine's saves lend from it too. It lives inside
        the RAM tier's quota: the tier's rows get what the pool leaves."""
        memory = self.memory
        memory.limit = self._evictor.quotas[TIER_RAM]
        self._evictor.held = lambda tier: memory.kept_bytes if tier == TIER_RAM else 0
        self._lookup = Lookup(cat, tiers, self._blobs, self._chunked, journal, counters, self.memory)
        self._jobs = WriteJobs(self)
        self._lookup.on_whole_read = self._jobs.convert
        self._manage = Management(cat, evictor, journal, counters, io_lock)
        with self._io_lock:
            open_files(self._file_tiers, self._db, self._catalog, self._evictor, self._journal, self._counters)
            self._evictor.gc()
        self._hold = WriteHold(lambda: self._closed)
        self._writer: Writer[SaveJob | Later] = Writer(
            self._jobs.write, maxsize=writer_queue, on_error=self._jobs.on_error, gate=self._hold.wait
        )
        self._lookup.later = self._jobs.later

    def _probe(self) -> set[str]:
        """File tiers this process cannot write (read-only dir): noted as Problems."""
        out = set()
        if self._db.unusable is not None:
            self._problems.note(self._db.unusable, "opening the cache database; it lives in memory")
        for name, tier in self._file_tiers.items():
            exc = tier.probe_writable()
            if exc is not None:
                out.add(name)
                self._problems.note(exc, f"the {name} tier at {tier.dir}; saves go elsewhere")
        return out

    def writable(self, tier: str) -> bool:
        """Can saves land in this tier (the RAM tier always; a file tier if its directory
        takes files)? The engine sends saves elsewhere when not, and says so."""
        return tier not in self._unwritable

    # the catalog's parts under their historical names (tests and benchmarks reach in)
    @property
    def _index(self) -> Any:
        return self._catalog.index

    @property
    def _load_pins(self) -> Any:
        return self._catalog.load_pins

    def _emit(self, kind: str, obj: Any) -> None:
        self._journal.emit(kind, obj)

    # -- saving -------------------------------------------------------------------------

    def submit_save(
        self,
        *,
        model_id: str,
        meta: KeyMeta,
        tokens: Sequence[int],
        payload: Buffer,
        reason: str,
        tier: str,
        context_size: int = 0,
        prompt_text: str = "",
        quant_bits: int = 0,
        session_id: str | None = None,
    ) -> bytes | None:
        """Queue a save; the key when queued or already present, None when dropped.

        Never blocks. A queued save is found by lookups at once (served from memory until
        it is written). Counts ``saves_<reason>`` for every call, and ``duplicate_dropped``
        or ``saves_dropped`` when nothing new is queued.
        """
        if reason not in SAVE_REASONS:
            raise ValueError(f"unknown save reason {reason!r}; expected one of {SAVE_REASONS}")
        if tier not in TIERS:
            raise ValueError(f"unknown cache tier {tier!r}; expected one of {TIERS}")
        tokens_le = encode_tokens(tokens)
        n_tokens = len(tokens_le) // 4
        key = meta.key(tokens_le)
        job = SaveJob(
            key, model_id, meta, tokens_le, n_tokens, payload, reason, tier, context_size,
            prompt_text, quant_bits, session_id or "", is_cuttable(payload, n_tokens),
        )  # fmt: skip
        with self._lock:
            self._counters.add(f"saves_{reason}")
            known = key in self._catalog and not (job.cuttable and self._catalog.is_damaged(key))
            if known or self._catalog.is_pending(key):  # a damaged row saved again is repaired
                self._counters.add("duplicate_dropped")
                return key
            if self._closed:
                self._counters.add("saves_dropped")
                return None
            self._catalog.add_pending(Pending(job.pending_row(), job, job.cuttable))
            if not self._writer.submit(job):
                self._catalog.drop_pending(key)
                self._counters.add("saves_dropped")
                return None
        return key

    def hold_writes(self, holder: object, on: bool) -> None:
        """``holder`` (an engine's model) has a request waiting for its first token (``on``),
        or no longer: queued saves wait while any holder holds (``app.cache.saving.write_hold``)."""
        self._hold.hold(holder, on)

    # -- lookups ------------------------------------------------------------------------

    def find(
        self,
        meta: KeyMeta,
        prompt: Sequence[int],
        *,
        parent_key: bytes | None = None,
        min_tokens: int = 2,
        n_stream: int = 1,
    ) -> Found | NotFound:
        """The longest prefix of ``prompt`` shared with anything held (exact row, the
        ``parent_key`` row, or any row longer, shorter or diverging), restored and cut to
        exactly the shared cells; or why there is none (``lookup`` says how). ``n_stream``:
        the KV streams of the context it will be loaded into (see ``Lookup.find``)."""
        return self._lookup.find(meta, prompt, parent_key=parent_key, min_tokens=min_tokens, n_stream=n_stream)

    def prepare_restores(self, meta: KeyMeta) -> int:
        """A model of ``meta`` loaded: the memory its restores are assembled into is made
        now, off the path to its first token (``Lookup.prepare``); the bytes made."""
        return self._lookup.prepare(meta)

    def match(
        self, meta: KeyMeta, prompt: Sequence[int], *, parent_key: bytes | None = None
    ) -> Candidate | None:
        """The best candidate ``find`` would restore (no bytes read): for benchmarks."""
        cands = self._lookup.candidates(meta, prompt, parent_key)
        return cands[0] if cands else None

    def lookup_exact(self, meta: KeyMeta, tokens: Sequence[int]) -> Row | None:
        """The row for exactly these tokens (published, or still being written), or None."""
        return self._catalog.find(meta.key(tokens))

    def get(self, key: bytes) -> Row | None:
        """The published row for a key, or None."""
        return self._catalog.get(key)

    def wait_for(self, key: bytes, timeout_ms: int) -> Row | None:
        """The row for ``key``, published or still being written (a save is found the
        moment it is submitted, so this never needs to wait any more); None if unknown."""
        return self._catalog.find(key)

    def longest_prefix(
        self, meta: KeyMeta, tokens: Sequence[int], *, max_len: int | None = None
    ) -> Row | None:
        """The longest row (published or being written) whose tokens are a prefix of
        ``tokens`` (any length from 1 to ``max_len``), verified token for token."""
        t0 = time.perf_counter_ns()
        limit = len(tokens) if max_len is None else min(max_len, len(tokens))
        best = self._catalog.longest_prefix(meta, tokens, limit)
        self._counters.add("longest_prefix_probes")
        self._counters.add("longest_prefix_ns", time.perf_counter_ns() - t0)
        return best

    # -- loading ------------------------------------------------------------------------

    def load(self, row: Row) -> Buffer | None:
        """The row's whole payload, checked; None (a miss) if it is gone or damaged. A save
        still being written is served from memory."""
        return self._lookup.load(row)

    # -- counters -----------------------------------------------------------------------

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to a counter (the engine bumps hits, misses and pack time here)."""
        self._counters.add(name, n)

    def counters(self) -> dict[str, int]:
        """This process's counters: the docs/design.md §4 names, then extras; bytes_* are current."""
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
            if tier == TIER_RAM:
                self.memory.limit = quota
                if self.memory.kept_bytes > quota:
                    self.memory.release_free()
            self._evictor.gc()

    def tier_usage(self) -> dict[str, tuple[int, int]]:
        """``{tier: (used bytes, quota bytes)}``, chunks shared by many rows counted once."""
        usage = self._catalog.usage_all()
        return {t: (usage[t], self._evictor.quotas[t]) for t in TIERS}

    def served_tokens(self, key: bytes) -> int | None:
        """How many of a row's tokens its files still restore (fewer than ``n_tokens`` after
        a chunk was lost); None for an unknown row."""
        return self._catalog.served(key)

    def rows(self, model_id: str | None = None) -> list[Row]:
        """Snapshots of every row (published, then in-flight ones with status ``writing``)."""
        with self._lock:
            out = self._catalog.rows() + self._catalog.pending_rows()
        return [r for r in out if model_id is None or r.model_id == model_id]

    def tree(self, model_id: str | None = None) -> list[TreeNode]:
        """What the cache holds as a tree of shared prefixes (``tree``): a system prompt
        shared by many conversations is one node with them below."""
        return build_tree(r for r in self._catalog.rows() if model_id is None or r.model_id == model_id)

    def pin(self, key: bytes) -> bool:
        """User pin: quotas never evict or demote the row. Persistent."""
        return self._manage.set_pinned(key, True)

    def unpin(self, key: bytes) -> bool:
        return self._manage.set_pinned(key, False)

    def evict(self, key: bytes) -> bool:
        """Demote a ram/ram_file row to disk, or delete a disk row."""
        return self._manage.evict(key)

    def delete(self, key: bytes) -> bool:
        return self._manage.delete(key)

    def move(self, key: bytes, tier: str) -> bool:
        """Move a row to another tier (making room there under its quota)."""
        return self._manage.move(key, tier)

    def clear(
        self, model_id: str | None = None, older_than: float | None = None, *, include_pinned: bool = False
    ) -> int:
        """Delete rows (of one model / unused for ``older_than`` seconds); user-pinned rows
        are kept unless ``include_pinned``. Returns how many were deleted."""
        return self._manage.clear(model_id, older_than, include_pinned)

    def gc(self) -> int:
        """Apply the quotas now; returns how many rows were demoted or deleted."""
        with self._io_lock:
            return self._evictor.gc()

    def verify(self, progress: ProgressFn | None = None) -> VerifyReport:
        """Re-check every blob, manifest and chunk (CRCs and keys); bad ones are deleted and
        counted. Rows sharing a bad chunk keep what precedes it (``rows_damaged``)."""
        return verify_all(
            self._catalog, self._tiers, self._blobs, self._chunked, self._evictor,
            self._counters, self._io_lock, progress,
        )  # fmt: skip

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
