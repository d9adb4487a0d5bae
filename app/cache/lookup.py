"""Finding what a prompt can reuse: the longest prefix it shares with anything the cache
holds, cut to exactly the shared cells — or, on a miss, why nothing could be reused.

Candidates, best first by the number of prompt tokens they give (ties in this order):

1. **exact** — the row keyed on exactly the prompt;
2. **resume** — the row named by ``parent_key`` (the previous turn's save), if the prompt
   extends it;
3. **longest_prefix** — the row sharing the longest common prefix with the prompt
   (``lcp.PrefixIndex``): a row the prompt extends, or one *longer* than the prompt or
   diverging from it (regenerate, edit, branch), cut to the shared part; and the longest
   whole row that is a prefix of the prompt (``RowIndex``), for rows that cannot be cut.

Published rows and saves still in the writer's queue are candidates alike: a save is
served from memory until its files exist (read-your-writes). A restore that fails (a row
deleted meanwhile, a damaged chunk or blob, dropped as it is found) leads to the next
best candidate; a damaged chunk in the middle of a chain still gives what precedes it.

Misses say why (``NotFound.reason``): ``nothing_shared``; ``too_short`` (what is shared
here is too little to be worth a restore); ``evicted`` (the prompt shared more with a row
the quotas evicted); ``other_identity`` (it shares more with rows of another model,
adapter set or context parameters); ``corrupt`` (the best candidate was damaged).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Literal

from app.cache.blobs import kvc_chunked, seqstate
from app.cache.blobs.state_buffers import StateMemory
from app.cache.blobs.tiers import Buffer, Tier, touch_blob
from app.cache.contents.catalog import Catalog, namespace_of
from app.cache.contents.rows import Row
from app.cache.counters import Counters
from app.cache.db.journal import Journal
from app.cache.keys import KeyMeta, encode_tokens
from app.cache.saving.chunked_rows import ChunkedRows
from app.cache.saving.whole_rows import Blobs

Source = Literal["exact", "resume", "longest_prefix"]
MissReason = Literal["nothing_shared", "evicted", "other_identity", "corrupt", "too_short"]
_RANK = {"exact": 0, "resume": 1, "longest_prefix": 2}


@dataclass(frozen=True, slots=True)
class Candidate:
    """A row and how many leading prompt tokens it can give."""

    row: Row
    n: int
    source: Source


def _kept(payload: Buffer) -> None:
    """``Found.release`` of a payload that is nobody's to reuse."""


@dataclass(frozen=True, slots=True)
class Found:
    """``payload`` is a per-seq state holding exactly the prompt's first ``n`` cells.
    ``release(payload)`` once it is loaded: its memory may serve the next restore or save,
    and the view must not be read after (``StateMemory.give``)."""

    source: Source
    n: int
    payload: Buffer
    row: Row  # the row it was cut from (its tokens, session id, …)
    release: Callable[[Buffer], None] = _kept


@dataclass(frozen=True, slots=True)
class NotFound:
    reason: MissReason
    tokens_shared: int  # the longest prefix the prompt shares with anything held or known


class Lookup:
    def __init__(
        self,
        catalog: Catalog,
        tiers: dict[str, Tier],
        blobs: Blobs,
        chunked: ChunkedRows,
        journal: Journal,
        counters: Counters,
        memory: StateMemory,
    ) -> None:
        self._catalog = catalog
        self._tiers = tiers
        self._blobs = blobs
        self._chunked = chunked
        self._journal = journal
        self._counters = counters
        self._memory = memory
        self.on_whole_read: Callable[[Row, Buffer], None] = lambda row, payload: None
        self.later: Callable[[Callable[[], None]], None] = lambda work: work()
        """Runs a restore's bookkeeping writes (a file header, the database) off the path to
        the first token: the store hands them to its writer (``WriteJobs.later``)."""

    def candidates(self, meta: KeyMeta, prompt: Sequence[int], parent_key: bytes | None = None) -> list[Candidate]:
        """Every kind of candidate for ``prompt``, best first (no bytes are read)."""
        prompt_le = encode_tokens(prompt)
        return self._candidates(meta, prompt, prompt_le, parent_key)

    def _candidates(
        self, meta: KeyMeta, prompt: Sequence[int], prompt_le: bytes, parent_key: bytes | None
    ) -> list[Candidate]:
        ns = namespace_of(meta)
        found: list[Candidate] = []
        cat = self._catalog
        row = cat.find(meta.key(prompt_le))
        if row is not None and row.tokens_le == prompt_le:
            found.append(Candidate(row, row.n_tokens, "exact"))
        if parent_key is not None:
            row = cat.find(parent_key)
            if row is not None and row.namespace == ns and prompt_le.startswith(row.tokens_le):
                found.append(Candidate(row, row.n_tokens, "resume"))
        with cat.lock:
            n, key = cat.cuttable.best(ns, prompt_le)
            row = cat.find(key) if key is not None else None
        if row is not None and n > 0:
            found.append(Candidate(row, n, "longest_prefix"))
        row = cat.longest_prefix(meta, prompt, len(prompt), whole_only=True)
        if row is not None:
            found.append(Candidate(row, row.n_tokens, "longest_prefix"))
        found.sort(key=lambda c: (-c.n, _RANK[c.source]))
        return found

    def find(
        self,
        meta: KeyMeta,
        prompt: Sequence[int],
        *,
        parent_key: bytes | None = None,
        min_tokens: int = 2,
        n_stream: int = 1,
    ) -> Found | NotFound:
        """The longest reusable prefix of ``prompt`` (at least ``min_tokens``), restored.

        A payload this assembles (chunks put together, a pending save cut) is built for a
        context with ``n_stream`` KV streams (``seqstate``), so loading it needs no second
        copy; one read whole (a blob, a pending save's own payload) keeps its stored layout.
        NOTE: B9's first turns after a restart assembled 2,100 tokens' chunks (37 MB) and
        ``kv_unpack`` then copied all of it again to add the second stream's empty count:
        that unpack took 30.8 ms, 4.0 ms for the payload assembled as two streams
        (SmolLM2, median of 12 alternated, load average 4.6, 2026-12-03)."""
        t0 = time.perf_counter_ns()
        prompt_le = encode_tokens(prompt)
        corrupt = False
        shared_here = 0
        try:
            for _ in range(4):  # each failed restore drops what failed; look again
                cands = self._candidates(meta, prompt, prompt_le, parent_key)
                if not cands:
                    break
                shared_here = max(shared_here, cands[0].n)
                best = cands[0]
                if best.n < min_tokens:
                    break
                payload, n, damaged, release = self._restore(best, n_stream)
                corrupt |= damaged
                if payload is not None and n >= min_tokens:
                    self.note_use(best.row)
                    return Found(best.source if n == best.n else "longest_prefix", n, payload, best.row, release)
                if payload is not None:
                    release(payload)
            return self._why(meta, prompt_le, shared_here, corrupt)
        finally:
            self._counters.add("longest_prefix_probes")
            self._counters.add("longest_prefix_ns", time.perf_counter_ns() - t0)

    def _restore(
        self, cand: Candidate, n_stream: int = 1
    ) -> tuple[Buffer | None, int, bool, Callable[[Buffer], None]]:
        """(payload of the first n cells, n, whether damage cut it short, its release)."""
        pending = self._catalog.pending(cand.row.key)
        if pending is not None:  # still in the writer's queue: from memory
            job = pending.job
            if cand.n == job.n_tokens:
                return job.payload, cand.n, False, _kept
            if pending.cuttable:
                return seqstate.cut(job.payload, cand.n, n_stream, into=self._memory.lend), cand.n, False, self._give
            return None, 0, False, _kept
        row = self._catalog.get(cand.row.key)
        if row is None:
            return None, 0, False, _kept  # deleted, or its save failed, meanwhile
        if row.format == 2:
            got = self._chunked.restore(row, cand.n, n_stream, into=self._memory.lend)
            # assembled into a view the pool lent (new bytes only when it holds no cell)
            return got.payload, got.n, got.corrupt, self._give
        if cand.n != row.n_tokens:
            return None, 0, False, _kept  # a whole-row blob cannot be cut
        before = self._counters.get("corrupt_files")
        payload = self._blobs.read_valid(row)
        if payload is not None:
            self.on_whole_read(row, payload)
        damaged = self._counters.get("corrupt_files") > before
        return payload, (cand.n if payload is not None else 0), damaged, _kept

    def _give(self, payload: Buffer) -> None:
        """``Found.release`` of a payload the pool lent (new bytes, when it holds no cell:
        nothing to give)."""
        if isinstance(payload, memoryview):
            self._memory.give(payload)

    def prepare(self, meta: KeyMeta) -> int:
        """A model loaded: make the memory its largest chunked row would be read and
        assembled into now, not at its first restore (``StateMemory.reserve``: two buffers).
        The bytes made (0: no such row, one over the pool's limit, or the pool holds such
        buffers already)."""
        ns = namespace_of(meta)
        size = max((r.size for r in self._catalog.rows() if r.format == 2 and r.namespace == ns), default=0)
        return self._memory.reserve(size, count=2)

    def load(self, row: Row) -> Buffer | None:
        """A row's whole payload, checked; None when it is gone or damaged (damaged files
        are dropped and counted). A save still being written is served from memory."""
        t0 = time.perf_counter_ns()
        pending = self._catalog.pending(row.key)
        if pending is not None:
            payload: Buffer | None = pending.job.payload
        else:
            cur = self._catalog.get(row.key)
            if cur is None:
                return None
            if cur.format == 2:
                got = self._chunked.restore(cur, cur.n_tokens)
                payload = got.payload if got.n == cur.n_tokens else None
            elif self._catalog.pin_load(row.key) is None:
                return None
            else:
                try:
                    payload = self._blobs.read_valid(cur)
                finally:
                    self._catalog.unpin_load(row.key)
                if payload is not None:
                    self.on_whole_read(cur, payload)
        if payload is None:
            return None
        self._counters.add("loads")
        # NOTE: not load_total_ns: the engine times the whole restore (read + unpack)
        # and adds it there through count(); this is the read + check alone.
        self._counters.add("blob_read_ns", time.perf_counter_ns() - t0)
        self.note_use(row)
        return payload

    def note_use(self, row: Row) -> None:
        """A row was restored: count the hit, record when, in memory now, in the file's
        header and the database ``later``.

        NOTE: the database update alone took ~2.6 ms a restore (SQLAlchemy, 16 restores in
        B8's trace), inside the restoring request's time to first token."""
        with self._catalog.lock:
            cur = self._catalog.get(row.key)
            if cur is None:
                return  # still being written: its row is not published yet
            cur = replace(cur, last_used=time.time(), hits=cur.hits + 1)
            self._catalog.add(cur)
        self._journal.emit("updated", cur)
        self.later(partial(self._record_use, cur))

    def _record_use(self, cur: Row) -> None:
        tier = self._tiers[cur.tier]
        if cur.format == 2:
            kvc_chunked.touch_row(tier, cur.key, cur.hits, int(cur.last_used))
        else:
            touch_blob(tier, cur.key, cur.hits, int(cur.last_used))
        self._journal.update(cur.key, last_used=cur.last_used, hits=cur.hits)

    def _why(self, meta: KeyMeta, prompt_le: bytes, shared_here: int, corrupt: bool) -> NotFound:
        ns = namespace_of(meta)
        with self._catalog.lock:
            here = max(shared_here, self._catalog.everything.best(ns, prompt_le)[0])
            evicted = self._catalog.tombstones.best(ns, prompt_le)[0]
            elsewhere = self._catalog.everything.best_elsewhere(ns, prompt_le)[0]
        shared = max(here, evicted, elsewhere)
        if corrupt:
            return NotFound("corrupt", shared)
        if shared == 0:
            return NotFound("nothing_shared", 0)
        if here >= shared:
            return NotFound("too_short", shared)
        if evicted >= shared:
            return NotFound("evicted", shared)
        return NotFound("other_identity", shared)
