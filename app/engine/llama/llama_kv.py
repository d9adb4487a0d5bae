"""A sequence's KV cells in and out of llama.cpp: the per-seq state read and loaded as bytes.

``SeqKv`` is the part of ``LlamaBackend`` that implements the Backend's KV calls (``seq_rm``,
``can_trim``, ``seq_cp``, ``seq_pos_max``, ``kv_pack``, ``kv_unpack``; mixed into the backend
class, whose context it uses); ``memory_caps`` says what the model's memory allows (docs/design.md §8). ``pack`` reads a seq's state as ONE-STREAM bytes (``app.cache.blobs.seqstate``'s
format, loadable under any ``n_seq_max``) without copying it on the scheduler thread;
``unpack`` loads such bytes into a seq, rewriting the stream count for this context. Only
the scheduler thread calls them.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
from collections.abc import Callable
from typing import Any

import llama_cpp
import numpy as np

from app.cache.blobs import seqstate
from app.engine.backend import MemoryCaps
from app.engine.errors import InvalidRequest, NotSupported
from app.engine.llama.native_log import detail, native_errors

log = logging.getLogger(__name__)


def memory_caps(model: Any) -> MemoryCaps:
    """What the model's memory can do with a sequence's state (``MemoryCaps``).

    NOTE: llama.cpp rolls a recurrent state back only through per-token snapshots
    (``n_rs_seq``, for a few architectures such as LFM2 and Qwen3.5), bounded to a few
    tokens and single-use; Hearth leaves it at 0 and treats every recurrent or hybrid state
    as whole, so no path depends on a rollback that may be refused (llama.cpp #26695:
    ``seq_rm`` returned true and left the state unrestored).
    """
    n_swa = int(llama_cpp.llama_model_n_swa(model))
    if llama_cpp.llama_model_is_hybrid(model):
        return MemoryCaps("hybrid", cut_states=False, trim_tail=False, n_swa=n_swa)
    if llama_cpp.llama_model_is_recurrent(model):
        return MemoryCaps("recurrent", cut_states=False, trim_tail=False)
    if n_swa > 0:
        return MemoryCaps("sliding_window", cut_states=False, trim_tail=True, n_swa=n_swa)
    return MemoryCaps()


def pack(ctx: Any, seq_id: int, into: Callable[[int], memoryview] | None = None) -> bytes | memoryview:
    """The seq's KV as a one-stream state; empty when the seq holds nothing. ``into(size)``:
    a writable view to pack into (``StateMemory.lend``: memory used before); the result is
    then a read-only view of it. Else new bytes.

    A layout ``seqstate`` does not recognise (recurrent or sliding-window memory) is
    returned as llama.cpp wrote it; it then loads only into a context with the same
    stream count (llama.cpp refuses it otherwise, and a refused payload is a miss).
    """
    size = llama_cpp.llama_state_seq_get_size(ctx, seq_id)
    if size == 0:
        return b""
    if into is None:
        # NOTE: llama.cpp writes straight into a new bytes object. It runs on the scheduler
        # thread between ticks, and for a 14 MB state this takes 1.6 ms where a bytearray
        # plus a copy to bytes took 11 ms (page faults and two passes over fresh memory).
        # Safe because the object is brand new (``bytes(n)`` for n > 0 is never shared or
        # cached), nothing else holds it, and nothing hashes or reads it before it is filled.
        out = bytes(size)
        addr = ctypes.cast(ctypes.c_char_p(out), ctypes.c_void_p).value or 0
        view = memoryview(out)
    else:
        writable = into(size)
        if writable.readonly or writable.nbytes != size:
            raise ValueError(f"into({size}) gave {writable.nbytes} bytes, read-only={writable.readonly}")
        addr = ctypes.addressof(ctypes.c_uint8.from_buffer(writable))
        view = writable.toreadonly()
    n = llama_cpp.llama_state_seq_get_data(ctx, ctypes.cast(addr, ctypes.POINTER(ctypes.c_uint8)), size, seq_id)
    view = view[:n]
    try:
        st = seqstate.parse(view)
    except seqstate.UnknownLayout as exc:
        log.debug("seq state layout not recognised (%s); stored as written", exc)
        return view
    if st.n_stream == 1:
        return view
    # NOTE: the one-stream form without a copy (a 46 MB copy of fresh memory took
    # 40-60 ms here): the stream's block is already contiguous, so the one-stream header
    # is written over the bytes just before it and the payload is a view of the rest.
    start, end = seqstate.one_stream_span(st)
    ctypes.memmove(addr + start, seqstate.header(st.seq_id, 1), seqstate.HEADER.size)
    return view[start:end]


def unpack(ctx: Any, seq_id: int, payload: bytes | memoryview, n_stream: int) -> bool:
    """Load a packed state into an EMPTY seq of a context with ``n_stream`` KV streams.
    False, never an exception, when it cannot be loaded (the seq is left empty)."""
    if not payload:
        return False
    data: seqstate.Buffer = payload
    if n_stream > 1:
        # A layout seqstate does not know is loaded as stored; llama.cpp checks it.
        with contextlib.suppress(seqstate.UnknownLayout):
            data = seqstate.to_streams(payload, n_stream)
    buf = np.frombuffer(data, dtype=np.uint8)
    src = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
    with native_errors() as errors:
        n = llama_cpp.llama_state_seq_set_data(ctx, src, len(buf), seq_id)
    if n == 0:
        log.info("seq state refused by llama.cpp%s", detail(errors))
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), seq_id, -1, -1)
        return False
    return True


class SeqKv:
    """The Backend's per-sequence KV calls on one llama.cpp context (a mixin of ``LlamaBackend``)."""

    _ctx: Any
    _mem: Any
    _rows: dict[int, int]  # seq id -> batch row of its newest logits (see LlamaBackend)
    _kv_unified: bool
    n_seq_max: int
    n_stream: int
    memory: MemoryCaps

    def _check_seq(self, seq_id: int) -> None:
        """llama.cpp aborts the process on an out-of-range seq id; refuse it here instead."""
        if not 0 <= seq_id < self.n_seq_max:
            raise InvalidRequest(f"seq id {seq_id} is outside 0..{self.n_seq_max - 1}")

    def seq_rm(self, seq_id: int, start: int = 0) -> None:
        self._check_seq(seq_id)
        if start > 0 and not self.can_trim(seq_id, start):
            # NOTE: never handed to llama.cpp: a recurrent memory may answer true and leave
            # its state unrestored (llama.cpp #26695), and the caller must know it failed.
            raise NotSupported(f"the {self.memory.kind} state of seq {seq_id} cannot be cut at position {start}")
        if not llama_cpp.llama_memory_seq_rm(self._mem, seq_id, start, -1):
            raise NotSupported(f"llama.cpp cannot remove positions >= {start} of seq {seq_id}")
        if start <= 0:
            self._rows.pop(seq_id, None)

    def can_trim(self, seq_id: int, n_keep: int) -> bool:
        """Would ``seq_rm(seq_id, n_keep)`` leave exactly the state of the first ``n_keep``
        tokens? Yes for attention; for a recurrent or hybrid state only when nothing is
        dropped; for a sliding window only while the cells the next token attends to are
        still held (a state restored from a save holds just the last window)."""
        self._check_seq(seq_id)
        held = self.seq_pos_max(seq_id) + 1
        if n_keep <= 0 or n_keep >= held:
            return True
        caps = self.memory
        if not caps.trim_tail:
            return False
        if caps.n_swa > 0:
            # The next token, at position n_keep, attends to positions > n_keep - n_swa
            # (llama.cpp's is_masked_swa; a chunked window needs a subset of those).
            oldest = int(llama_cpp.llama_memory_seq_pos_min(self._mem, seq_id))
            return oldest <= max(0, n_keep - caps.n_swa + 1)
        return True

    def seq_cp(self, src: int, dst: int, n_tokens: int) -> None:
        """Give ``dst`` a copy of ``src``'s positions ``0 .. n_tokens-1``.

        NOTE: with one KV stream per sequence, llama.cpp's ``llama_memory_seq_cp`` copies only
        whole streams (a partial range aborts the process: "only supported for full KV
        buffers"), so the head is packed, cut to ``n_tokens`` cells and loaded into ``dst``.
        With a unified buffer the cells are shared instead (no compute, no memory). A state
        that cannot be cut (``MemoryCaps.cut_states``) is copied only whole.
        """
        self._check_seq(src)
        self._check_seq(dst)
        if src == dst:
            raise InvalidRequest("seq_cp needs two different sequences")
        if self._kv_unified and self.memory.cut_states:
            llama_cpp.llama_memory_seq_cp(self._mem, src, dst, 0, n_tokens)
            return
        if not self.memory.cut_states:
            held = self.seq_pos_max(src) + 1
            if n_tokens != held:
                raise NotSupported(
                    f"the {self.memory.kind} state of seq {src} holds {held} tokens and cannot be cut to {n_tokens}"
                )
            if not self.kv_unpack(dst, self.kv_pack(src)):
                raise NotSupported(f"llama.cpp refused the state of seq {src} in seq {dst}")
            return
        try:
            head = seqstate.cut(self.kv_pack(src), n_tokens)
        except (seqstate.UnknownLayout, ValueError) as exc:
            raise NotSupported(f"cannot copy the first {n_tokens} cells of seq {src}: {exc}") from exc
        if not self.kv_unpack(dst, head):
            raise NotSupported(f"llama.cpp refused the first {n_tokens} cells of seq {src}")

    def seq_pos_max(self, seq_id: int) -> int:
        """Largest position held by the seq, -1 when empty (handy for invariant checks)."""
        self._check_seq(seq_id)
        return int(llama_cpp.llama_memory_seq_pos_max(self._mem, seq_id))

    def kv_pack(self, seq_id: int, into: Callable[[int], memoryview] | None = None) -> bytes | memoryview:
        """The seq's KV as a one-stream state (``app.cache.blobs.seqstate``), loadable under any
        ``n_seq_max``; empty when the seq holds nothing. See ``llama_kv.pack``."""
        self._check_seq(seq_id)
        return pack(self._ctx, seq_id, into)

    def kv_unpack(self, seq_id: int, payload: bytes | memoryview) -> bool:
        """Load a packed seq state (one-stream, or as written by this context's layout).
        False, never an exception, when it cannot be loaded."""
        self.seq_rm(seq_id)
        return unpack(self._ctx, seq_id, payload, self.n_stream)
