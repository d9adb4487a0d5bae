"""Memory reused from one restore to the next (``StateBuffers``), and from one save's pack
to the next (``SaveBuffers``, at the end).

A restore assembles a state of several megabytes (chunks concatenated, ``seqstate.concat``)
that llama.cpp copies into the seq and that is dropped right after. Written into fresh memory
every time, the assembly cost more in page faults than in copying: B8's restores after its
restart (≈ 400 tokens, 7 MB) took 3–7 ms to assemble into new bytes on a quiet VM, up to
39 ms on one short of free pages, and 0.8–1.8 ms into memory used before (SmolLM2,
2026-12-03; docs/benchmarks.md).

A buffer is **taken** for one restore and **given** back by whoever consumed it, once
llama.cpp has copied it (``Hit.release``). Giving back releases the caller's view, so a
late read of that view raises instead of seeing the next restore's bytes. A view never given
back is never reused, and neither is one that something still reads (a slice of the view,
an array over it: the buffer refuses to grow while its memory is exported). At most ``KEEP``
buffers, none over ``MAX_POOLED_BYTES``, are kept: at most one largest restore's worth of
memory in the usual case (one restore at a time), outside the cache's quotas.

A new buffer is made ``HEADROOM`` larger than asked, so the next restore of a conversation a
few turns longer, or of another one about as long, still fits it; and a model's load
**reserves** one (``reserve``) the size of the largest state it may restore, so the first
restore after a start does not pay for fresh memory either.

NOTE: B9 (two agents, ~2,100-token conversations restored from disk after a server restart,
2026-12-04 16:20): assembling into fresh memory took 95-119 ms of each 140-215 ms admission
(``bytearray(37 MB)``: every page faulted while two clients' requests were prepared beside
it), the second restore too, its state 14 cells larger than the first's buffer. With buffers
touched before the requests came, the same admissions took 28-30 ms.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

KEEP = 1
MAX_POOLED_BYTES = 64 << 20
HEADROOM = 8
"""A new buffer holds ``n + n // HEADROOM`` bytes (within ``MAX_POOLED_BYTES``)."""


class StateBuffers:
    def __init__(self, keep: int = KEEP, max_pooled_bytes: int = MAX_POOLED_BYTES) -> None:
        self._keep = keep
        self._max = max_pooled_bytes
        self._free: list[bytearray] = []
        self._lock = threading.Lock()

    def take(self, n: int) -> memoryview:
        """A writable view of ``n`` bytes: a kept buffer when one is large enough."""
        with self._lock:
            while self._free:
                buf = self._free.pop()
                if len(buf) >= n:
                    return memoryview(buf)[:n]
        return memoryview(bytearray(self._size_for(n)))[:n]

    def reserve(self, n: int) -> bool:
        """Make (and touch) a buffer for a restore of ``n`` bytes now, unless one is kept
        that holds it, ``n`` is over the pool's limit, or the pool is full. True if made."""
        if n <= 0 or n > self._max:
            return False
        with self._lock:
            if len(self._free) >= self._keep or any(len(b) >= n for b in self._free):
                return False
        buf = bytearray(self._size_for(n))  # zero-filled: every page is touched here
        with self._lock:
            if len(self._free) >= self._keep:
                return False
            self._free.append(buf)
        return True

    def _size_for(self, n: int) -> int:
        return _with_headroom(n, HEADROOM, self._max)

    def give(self, view: memoryview) -> None:
        """``view`` (from ``take``) is no longer read: keep its buffer for the next restore."""
        buf = view.obj
        with contextlib.suppress(BufferError):
            view.release()  # later reads of this very view raise
        if not isinstance(buf, bytearray) or len(buf) > self._max:
            return
        if not _unread(buf):  # anything still reads it (a slice, an array over it): never reused
            return
        with self._lock:
            if len(self._free) < self._keep:
                self._free.append(buf)

    @property
    def kept_bytes(self) -> int:
        with self._lock:
            return sum(len(b) for b in self._free)


SAVE_KEEP = 2
"""Buffers ``SaveBuffers`` keeps: the two saves a pair of replies ending together makes."""
SAVE_HEADROOM = 2
"""A new save buffer holds ``n + n // SAVE_HEADROOM`` bytes (within ``max_pooled_bytes``): a
conversation's state grows turn by turn, and memory no pack has written costs nothing."""


class SaveBuffers:
    """Memory reused from one save's pack to the next (``app.engine.saves``).

    A save's pack (``llama_state_seq_get_data``) written into fresh memory costs more in page
    faults than in copying: a 2,400-token SmolLM2 state (42 MB) took 17–24 ms to pack into new
    bytes, 2.1–2.7 ms into memory used before (2026-12-04; docs/benchmarks.md). It runs on the
    scheduler thread, so every finish, continued and cold save delays whatever waits for the
    next tick (B9: the first request of each pair waited for the other reply's finish save).

    The payload goes to the cache, which may keep it (queued, served from memory until
    written, a whole blob kept in the RAM tier), and nobody gives it back: a buffer is
    **lent**, and lent again only once nothing reads it — no view of it is alive anywhere (a
    ``bytearray`` refuses to shrink while any memoryview of it exists, ``_unread``). At most
    ``keep`` buffers are tracked, none over ``max_pooled_bytes``. A new buffer is not
    zero-filled (``_unwritten``): its pages cost only as the pack writes them, as the bytes of
    a pack without a pool did, so a pack that finds no free buffer large enough costs what it
    did before; one too small is replaced by a larger one. Used by one thread (the scheduler's).
    """

    def __init__(self, keep: int = SAVE_KEEP, max_pooled_bytes: int = MAX_POOLED_BYTES) -> None:
        self._keep = keep
        self._max = max_pooled_bytes
        self._bufs: list[bytearray] = []

    def lend(self, n: int) -> memoryview:
        """A writable view of ``n`` bytes (contents undefined): the smallest tracked buffer
        nobody reads that holds it; else new memory, tracked in place of a free buffer too
        small, or when fewer than ``keep`` are."""
        free = [i for i, buf in enumerate(self._bufs) if _unread(buf)]
        fits = [i for i in free if len(self._bufs[i]) >= n]
        if fits:
            return memoryview(self._bufs[min(fits, key=lambda i: len(self._bufs[i]))])[:n]
        size = _with_headroom(n, SAVE_HEADROOM, self._max)
        new = _unwritten(size)
        if size <= self._max:
            if free:
                self._bufs[free[0]] = new
            elif len(self._bufs) < self._keep:
                self._bufs.append(new)
        return memoryview(new)[:n]

    @property
    def kept_bytes(self) -> int:
        return sum(len(b) for b in self._bufs)


def _with_headroom(n: int, headroom: int, max_pooled: int) -> int:
    """A new buffer's size for ``n`` bytes: ``n + n // headroom``, within ``max_pooled``
    (``n`` itself over it: such a buffer is never kept)."""
    return n if n > max_pooled else min(max_pooled, n + n // headroom)


def _unread(buf: bytearray) -> bool:
    """No view of ``buf`` is alive: shrinking it is refused while one is. (Shrunk by its last
    byte and put back: never reallocated, where growing it by one may copy it all.)"""
    if not buf:
        return True
    last = buf[-1]
    try:
        del buf[-1]
    except BufferError:
        return False
    buf.append(last)
    return True


_bytearray_of_size = ctypes.pythonapi.PyByteArray_FromStringAndSize
_bytearray_of_size.restype = ctypes.py_object
_bytearray_of_size.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)


def _unwritten(size: int) -> bytearray:
    """A bytearray of ``size`` bytes whose memory nothing writes here. ``bytearray(size)``
    zero-fills it, faulting in every page (42 MB: 16–21 ms); this leaves each page to the
    pack that writes it, and the headroom untouched."""
    buf = _bytearray_of_size(None, size)
    assert isinstance(buf, bytearray) and len(buf) == size
    return buf
