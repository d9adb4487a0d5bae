"""A sequence's KV cells in and out of llama.cpp: the per-seq state read and loaded as bytes.

``SeqKv`` is the part of ``LlamaBackend`` that implements the Backend's KV calls (``seq_rm``,
``seq_cp``, ``seq_pos_max``, ``kv_pack``, ``kv_unpack``; mixed into the backend class, whose
context it uses). ``pack`` reads a seq's state as ONE-STREAM bytes (``app.cache.seqstate``'s
format, loadable under any ``n_seq_max``) without copying it on the scheduler thread;
``unpack`` loads such bytes into a seq, rewriting the stream count for this context. Only
the scheduler thread calls them.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
from typing import Any

import llama_cpp
import numpy as np

from app.cache import seqstate
from app.engine.errors import InvalidRequest, NotSupported
from app.engine.native_log import detail, native_errors

log = logging.getLogger(__name__)


def pack(ctx: Any, seq_id: int) -> bytes | memoryview:
    """The seq's KV as a one-stream state; empty when the seq holds nothing.

    A layout ``seqstate`` does not recognise (recurrent or sliding-window memory) is
    returned as llama.cpp wrote it; it then loads only into a context with the same
    stream count (llama.cpp refuses it otherwise, and a refused payload is a miss).
    """
    size = llama_cpp.llama_state_seq_get_size(ctx, seq_id)
    if size == 0:
        return b""
    # NOTE: llama.cpp writes straight into a new bytes object. It runs on the scheduler
    # thread between ticks, and for a 14 MB state this takes 1.6 ms where a bytearray
    # plus a copy to bytes took 11 ms (page faults and two passes over fresh memory).
    # Safe because the object is brand new (``bytes(n)`` for n > 0 is never shared or
    # cached), nothing else holds it, and nothing hashes or reads it before it is filled.
    out = bytes(size)
    dst = ctypes.cast(ctypes.c_char_p(out), ctypes.POINTER(ctypes.c_uint8))
    n = llama_cpp.llama_state_seq_get_data(ctx, dst, size, seq_id)
    view = memoryview(out)[:n]
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
    ctypes.memmove(ctypes.addressof(dst.contents) + start, seqstate.header(st.seq_id, 1), seqstate.HEADER.size)
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

    def _check_seq(self, seq_id: int) -> None:
        """llama.cpp aborts the process on an out-of-range seq id; refuse it here instead."""
        if not 0 <= seq_id < self.n_seq_max:
            raise InvalidRequest(f"seq id {seq_id} is outside 0..{self.n_seq_max - 1}")

    def seq_rm(self, seq_id: int, start: int = 0) -> None:
        self._check_seq(seq_id)
        if not llama_cpp.llama_memory_seq_rm(self._mem, seq_id, start, -1):
            raise NotSupported(f"llama.cpp cannot remove positions >= {start} of seq {seq_id}")
        if start <= 0:
            self._rows.pop(seq_id, None)

    def seq_cp(self, src: int, dst: int, n_tokens: int) -> None:
        """Give ``dst`` a copy of ``src``'s positions ``0 .. n_tokens-1``.

        NOTE: with one KV stream per sequence, llama.cpp's ``llama_memory_seq_cp`` copies only
        whole streams (a partial range aborts the process: "only supported for full KV
        buffers"), so the head is packed, cut to ``n_tokens`` cells and loaded into ``dst``.
        With a unified buffer the cells are shared instead (no compute, no memory).
        """
        self._check_seq(src)
        self._check_seq(dst)
        if src == dst:
            raise InvalidRequest("seq_cp needs two different sequences")
        if self._kv_unified:
            llama_cpp.llama_memory_seq_cp(self._mem, src, dst, 0, n_tokens)
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

    def kv_pack(self, seq_id: int) -> bytes | memoryview:
        """The seq's KV as a one-stream state (``app.cache.seqstate``), loadable under any
        ``n_seq_max``; empty when the seq holds nothing. See ``llama_kv.pack``."""
        self._check_seq(seq_id)
        return pack(self._ctx, seq_id)

    def kv_unpack(self, seq_id: int, payload: bytes | memoryview) -> bool:
        """Load a packed seq state (one-stream, or as written by this context's layout).
        False, never an exception, when it cannot be loaded."""
        self.seq_rm(seq_id)
        return unpack(self._ctx, seq_id, payload, self.n_stream)
