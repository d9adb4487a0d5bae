"""Memory a state passes through, reused (``StateMemory``): one pool per cache store for
every save's pack, every chunk file a restore reads and every restore's assembly.

A state of several megabytes written into fresh memory costs more in page faults than in
copying: a 2,400-token SmolLM2 state (42 MB) packed in 17–24 ms into new bytes, 2.1–2.7 ms
into memory used before; B8's restores after its restart (≈ 400 tokens, 7 MB) took 3–7 ms
to assemble into new bytes on a quiet VM, up to 39 ms on one short of free pages, 0.8–1.8
ms into memory used before; its first restore of a run read its chunk files into new bytes
(20 ms) and assembled them into a new buffer (19 ms) while the request waited (SmolLM2,
2026-12-03 – 12-05; docs/history/benchmarks-2026-11-29-to-12-05.md).

Memory is **lent** (``lend``) and lent again only once nothing reads it: no view of it is
alive anywhere (a ``bytearray`` refuses to shrink while any memoryview of it exists,
``_unread``). Nobody has to give a save's payload back (the cache keeps it while queued,
serves it from memory, a RAM tier may keep a whole blob); a restore's payload is **given**
back (``give``) once llama.cpp has copied it, which releases the caller's view, so a late
read of it raises instead of seeing the next state's bytes. One pool serves saves and
restores, so a store's first restore finds the memory its saves packed into.

At most ``keep`` buffers are tracked, none over ``max_pooled_bytes``: two saves of replies
ending together, and a restore's chunk files and assembly. A new buffer is not zero-filled
(``_unwritten``): its pages cost only as they are written, as new bytes did, so a lend that
finds no free buffer large enough costs what it did before the pool; it is made half again
as large as asked, so a conversation that grows turn by turn keeps fitting it; a free one
too small is replaced. A model's load **reserves** buffers (``reserve``: made and touched
now) the size of the largest state it may restore, so the first restore after a start does
not pay for fresh memory either.

NOTE: B9 (two agents, ~2,100-token conversations restored from disk after a server restart,
2026-12-04 16:20): assembling into fresh memory took 95-119 ms of each 140-215 ms admission
(``bytearray(37 MB)``: every page faulted while two clients' requests were prepared beside
it). With buffers touched before the requests came, the same admissions took 28-30 ms.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

from app import latency

KEEP = 4
MAX_POOLED_BYTES = 64 << 20
HEADROOM = 2
"""A new buffer holds ``n + n // HEADROOM`` bytes (within ``MAX_POOLED_BYTES``): a
conversation's state grows turn by turn, and memory nothing has written costs nothing."""


class StateMemory:
    """The pool of the module doc. Any thread may call any method."""

    def __init__(self, keep: int = KEEP, max_pooled_bytes: int = MAX_POOLED_BYTES) -> None:
        self._keep = keep
        self._max = max_pooled_bytes
        self.limit: int | None = None
        """The most bytes all tracked buffers may hold together (the store sets its RAM tier's
        quota: the pool lives inside it); a buffer past it is lent once and not kept."""
        self._bufs: list[bytearray] = []
        self._lock = threading.Lock()

    def lend(self, n: int) -> memoryview:
        """A writable view of ``n`` bytes (contents undefined): the smallest tracked buffer
        nobody reads that holds it; else new memory, tracked in place of a free buffer too
        small, or when fewer than ``keep`` are."""
        if latency.off("state_pool"):
            return memoryview(_unwritten(n))[:n]
        with self._lock:
            fits, small = self._free(n)
            if fits:
                return memoryview(self._bufs[fits[0]])[:n]
            size = _with_headroom(n, HEADROOM, self._max)
            new = _unwritten(size)
            if size <= self._max and self._room_for(size):
                self._track(new, small)
            return memoryview(new)[:n]

    def give(self, view: memoryview) -> None:
        """A view from ``lend`` is no longer read: released, so that reading it raises and
        its buffer (unless something else still reads it) is free for the next lend."""
        with contextlib.suppress(BufferError):
            view.release()

    def reserve(self, n: int, count: int = 1) -> int:
        """Make (and touch) buffers now so that ``count`` free ones hold ``n`` bytes each, as
        far as the pool's limits allow (``n`` over ``max_pooled_bytes``: none). The bytes
        made."""
        if n <= 0 or n > self._max:
            return 0
        made = 0
        with self._lock:
            fits, small = self._free(n)
            for _ in range(count - len(fits)):
                if not self._room_for(_with_headroom(n, HEADROOM, self._max)):
                    break
                buf = _touched(_with_headroom(n, HEADROOM, self._max), n)
                if not self._track(buf, small):
                    break
                made += len(buf)
        return made

    def _free(self, n: int) -> tuple[list[int], list[int]]:
        """The tracked buffers nobody reads, smallest first: (those that hold ``n`` bytes,
        those too small). Under the lock."""
        free = sorted((i for i, buf in enumerate(self._bufs) if _unread(buf)), key=lambda i: len(self._bufs[i]))
        return [i for i in free if len(self._bufs[i]) >= n], [i for i in free if len(self._bufs[i]) < n]

    def _room_for(self, size: int) -> bool:
        """Another ``size`` bytes stay within ``limit``. Under the lock."""
        return self.limit is None or sum(len(b) for b in self._bufs) + size <= self.limit

    def _track(self, buf: bytearray, small: list[int]) -> bool:
        """Track ``buf`` in place of the first of ``small`` (free buffers too small; the one
        used is taken off), or beside the others while fewer than ``keep`` are; False when
        neither. Under the lock."""
        if small:
            self._bufs[small.pop(0)] = buf
        elif len(self._bufs) < self._keep:
            self._bufs.append(buf)
        else:
            return False
        return True

    def release_free(self) -> int:
        """Forget every tracked buffer nobody reads (memory short, ``app.engine.memory.memory_budget``):
        its memory goes back to the system as soon as nothing else holds it. The bytes let go;
        the next lend makes new memory, as before the pool."""
        with self._lock:
            free = [i for i, buf in enumerate(self._bufs) if _unread(buf)]
            freed = sum(len(self._bufs[i]) for i in free)
            self._bufs = [buf for i, buf in enumerate(self._bufs) if i not in free]
        return freed

    @property
    def kept_bytes(self) -> int:
        with self._lock:
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
    zero-fills it, faulting in every page (42 MB: 16–21 ms); this leaves each page to
    whatever writes it, and the headroom untouched."""
    buf = _bytearray_of_size(None, size)
    assert isinstance(buf, bytearray) and len(buf) == size
    return buf


def _touched(size: int, n: int) -> bytearray:
    """A bytearray of ``size`` bytes whose first ``n`` are written now (every page of them
    faulted in here, not by the state written there later); the rest left untouched."""
    buf = _unwritten(size)
    head = (ctypes.c_char * n).from_buffer(buf)
    ctypes.memset(head, 0, n)
    del head  # (the buffer's export)
    return buf
