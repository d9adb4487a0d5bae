"""llama.cpp's per-sequence KV state, read and rewritten without llama.cpp.

``llama_state_seq_get_data`` packs one sequence's KV cells into a byte string; the cache
stores those bytes and ``llama_state_seq_set_data`` loads them back. This module parses that
format exactly (and refuses anything it does not recognise), so the cache can:

* store every payload as a **one-stream** state, whatever the context's stream count
  (with ``kv_unified = false`` a context has one KV stream per sequence and the state records
  how many; a one-stream payload loads under any ``n_seq_max`` once ``to_streams`` writes the
  loading context's count back);
* **cut** a payload to its first n cells (a prefix of the conversation), **split** it at cell
  bounds into chunks, and **concatenate** chunks back into one state.

The format, as llama.cpp 0.3.36's vendored source writes it (``llama-context.cpp``
``state_seq_get_data``, ``llama-kv-cache.cpp`` ``state_write``/``_meta``/``_data``). All
integers little-endian::

    offset 0   u32 magic 0xAF143CD8
           4   i32 seq_id of the source sequence (ignored on load)
           8   u32 n_stream
          12   for each stream s in 0..n_stream-1:
                 u32 cell_count                     0 for every stream but the seq's own
                 if cell_count > 0:
                   cell meta, cell_count times:     i32 pos, u32 n_seq_id (= 1),
                                                    [12-byte cell ext: M-RoPE x, y, token],
                                                    i32 seq_id
                   u32 v_trans, u32 n_layer
                   K, for each layer:               i32 type, u64 row_size,
                                                    cell_count × row_size bytes (one row a cell)
                   V, for each layer that has V:
                     v_trans = 0 (flash attention): i32 type, u64 row_size,
                                                    cell_count × row_size bytes
                     v_trans = 1:                   i32 type, u32 el_size, u32 n_embd_v,
                                                    n_embd_v rows of cell_count × el_size bytes

So a state holds, per layer, its cells' K rows and then (per layer) their V rows: cells
``[a, b)`` of every section are contiguous (for transposed V, within each of its rows), and a
prefix of the cells is a prefix of every section. That is what ``cut``/``split``/``concat``
rely on; they also require the cells to hold positions ``0 .. n-1`` in order (true for a
sequence in its own KV stream), and refuse anything else.

NOTE: other memory types (recurrent, hybrid, sliding-window pairs) write other layouts; they
fail ``parse`` with ``UnknownLayout`` and are stored whole, never cut or rewritten.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MAGIC = 0xAF143CD8
HEADER = struct.Struct("<IiI")  # magic, seq_id, n_stream
_U32 = struct.Struct("<I")
_K_HDR = struct.Struct("<iQ")  # type, row_size
_VT_HDR = struct.Struct("<iII")  # type, el_size, n_embd_v (transposed V)
CELL_EXT_SIZE = 12
MAX_LAYERS = 4096

Buffer = bytes | memoryview


class UnknownLayout(ValueError):
    """The bytes are not a per-sequence KV state this module understands."""


@dataclass(frozen=True, slots=True)
class Section:
    """One layer's K or V data: ``cells`` bytes per cell, from ``offset`` in the buffer.

    For a transposed V section, ``n_rows`` rows of ``n_cells × el_size`` bytes each follow
    ``offset`` and ``cell_bytes`` is ``el_size``; otherwise ``n_rows`` is 0.
    """

    type: int
    cell_bytes: int
    offset: int
    n_rows: int = 0

    @property
    def transposed(self) -> bool:
        return self.n_rows > 0


@dataclass(frozen=True, slots=True)
class SeqState:
    """Where everything is in one parsed state (offsets into the parsed buffer)."""

    seq_id: int
    n_stream: int
    stream: int  # the stream that holds the cells (0 when there are none)
    start: int  # offset of that stream's u32 cell_count
    end: int  # offset just past its data
    n_cells: int
    cell_meta_size: int  # 12, or 24 with the cell extension
    v_trans: bool
    k: tuple[Section, ...]
    v: tuple[Section, ...]

    @property
    def layout(self) -> tuple[Any, ...]:
        """What two states must share to be concatenated (types and row sizes)."""
        return (
            self.cell_meta_size,
            self.v_trans,
            tuple((s.type, s.cell_bytes, s.n_rows) for s in self.k),
            tuple((s.type, s.cell_bytes, s.n_rows) for s in self.v),
        )

    @property
    def bytes_per_cell(self) -> int:
        """KV bytes one cell costs in a payload (meta + K + V rows, all layers)."""
        kv = sum(s.cell_bytes * max(1, s.n_rows) for s in (*self.k, *self.v))
        return self.cell_meta_size + kv

    @property
    def meta_offset(self) -> int:
        return self.start + 4


# --------------------------------------------------------------------------- parsing


def parse(buf: Buffer) -> SeqState:
    """Parse a per-seq state; ``UnknownLayout`` unless every byte is accounted for."""
    view = memoryview(buf).cast("B")
    size = len(view)
    if size < HEADER.size:
        raise UnknownLayout(f"{size} bytes is too short for a sequence state")
    magic, seq_id, n_stream = HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise UnknownLayout(f"bad sequence state magic {magic:#x}")
    if not 1 <= n_stream <= 1 << 16:
        raise UnknownLayout(f"implausible stream count {n_stream}")
    pos = HEADER.size
    found: SeqState | None = None
    for s in range(n_stream):
        if pos + 4 > size:
            raise UnknownLayout("truncated stream list")
        (count,) = _U32.unpack_from(view, pos)
        if count == 0:
            pos += 4
            continue
        if found is not None:
            raise UnknownLayout("more than one stream holds cells")
        found = _parse_stream(view, seq_id, n_stream, s, pos, count)
        pos = found.end
    if pos != size:
        raise UnknownLayout(f"{size - pos} unexplained bytes after the last stream")
    if found is None:  # an empty sequence
        return SeqState(seq_id, n_stream, 0, HEADER.size, HEADER.size + 4, 0, 12, False, (), ())
    return found


def _parse_stream(view: memoryview, seq_id: int, n_stream: int, s: int, start: int, count: int) -> SeqState:
    errors = []
    for meta_size in (12, 12 + CELL_EXT_SIZE):
        try:
            return _parse_block(view, seq_id, n_stream, s, start, count, meta_size)
        except UnknownLayout as exc:
            errors.append(str(exc))
    raise UnknownLayout("; ".join(errors))


def _parse_block(
    view: memoryview, seq_id: int, n_stream: int, s: int, start: int, count: int, meta_size: int
) -> SeqState:
    size = len(view)
    pos = start + 4
    meta_end = pos + count * meta_size
    if meta_end + 8 > size:
        raise UnknownLayout("truncated cell metadata")
    meta = np.frombuffer(view, dtype="<i4", count=count * meta_size // 4, offset=pos)
    meta = meta.reshape(count, meta_size // 4)
    if not (meta[:, 1] == 1).all():
        raise UnknownLayout("a cell belongs to more than one sequence")
    v_trans, n_layer = struct.unpack_from("<II", view, meta_end)
    if v_trans > 1 or not 0 < n_layer <= MAX_LAYERS:
        raise UnknownLayout(f"implausible v_trans={v_trans} / n_layer={n_layer}")
    pos = meta_end + 8
    k: list[Section] = []
    for _ in range(n_layer):
        section, pos = _row_section(view, pos, count)
        k.append(section)
    # V: one section per layer that has V (all of them, or none for models without a V cache).
    # Whatever follows the stream must be the other streams' zero counts.
    tail_after = (n_stream - 1 - s) * 4
    for n_v in (n_layer, 0):
        v: list[Section] = []
        vpos = pos
        try:
            for _ in range(n_v):
                section, vpos = (_trans_section if v_trans else _row_section)(view, vpos, count)
                v.append(section)
        except UnknownLayout:
            continue
        if vpos + tail_after == size and not any(view[vpos:size]):
            return SeqState(seq_id, n_stream, s, start, vpos, count, meta_size, bool(v_trans), tuple(k), tuple(v))
    raise UnknownLayout("the V sections do not end the stream")


def _row_section(view: memoryview, pos: int, count: int) -> tuple[Section, int]:
    if pos + _K_HDR.size > len(view):
        raise UnknownLayout("truncated layer header")
    type_, row = _K_HDR.unpack_from(view, pos)
    end = pos + _K_HDR.size + count * row
    if not 0 <= type_ < 1024 or not 0 < row < 1 << 24 or end > len(view):
        raise UnknownLayout(f"implausible layer (type {type_}, row size {row})")
    return Section(type_, row, pos + _K_HDR.size), end


def _trans_section(view: memoryview, pos: int, count: int) -> tuple[Section, int]:
    if pos + _VT_HDR.size > len(view):
        raise UnknownLayout("truncated transposed-V header")
    type_, el, n_rows = _VT_HDR.unpack_from(view, pos)
    end = pos + _VT_HDR.size + n_rows * count * el
    if not 0 <= type_ < 1024 or not 0 < el <= 64 or not 0 < n_rows < 1 << 20 or end > len(view):
        raise UnknownLayout(f"implausible transposed V (type {type_}, el {el}, rows {n_rows})")
    return Section(type_, el, pos + _VT_HDR.size, n_rows), end


def positions(buf: Buffer, st: SeqState) -> np.ndarray[Any, np.dtype[np.int32]]:
    """The position of every cell, in cell order."""
    meta = np.frombuffer(memoryview(buf).cast("B"), dtype="<i4", count=st.n_cells * st.cell_meta_size // 4, offset=st.meta_offset)
    return meta.reshape(st.n_cells, st.cell_meta_size // 4)[:, 0].copy()


def is_in_order(buf: Buffer, st: SeqState) -> bool:
    """Do the cells hold positions 0, 1, …, n-1 in that order (what cutting needs)?"""
    pos = positions(buf, st)
    return bool((pos == np.arange(st.n_cells, dtype=np.int32)).all())


# --------------------------------------------------------------------------- rewriting


def header(seq_id: int, n_stream: int) -> bytes:
    return HEADER.pack(MAGIC, seq_id, n_stream)


def one_stream_span(st: SeqState) -> tuple[int, int]:
    """``(a, b)``: with ``header(seq_id, 1)`` written at ``a``, ``buf[a:b]`` is the state as a
    one-stream payload — no copy needed (the header lands on the zero counts and the old
    header that precede the stream's block)."""
    return st.start - HEADER.size, st.end


def to_one_stream(buf: Buffer) -> bytes:
    """The same state as a one-stream payload (a copy; see ``one_stream_span`` for none)."""
    st = parse(buf)
    if st.n_stream == 1:
        return bytes(buf)
    view = memoryview(buf).cast("B")
    return header(st.seq_id, 1) + view[st.start : st.end]


def to_streams(buf: Buffer, n_stream: int) -> Buffer:
    """A one-stream payload rewritten for a context with ``n_stream`` streams: the block
    first, then an empty count for every other stream (llama.cpp loads the cells into the
    target sequence's own stream whichever slot they come in). Unchanged (no copy) when it
    already has ``n_stream`` streams (a restore assembled for the context, ``Lookup.find``)."""
    st = parse(buf)
    if st.n_stream == n_stream:
        return buf
    if st.n_stream != 1:
        raise UnknownLayout(f"expected a one-stream payload, got {st.n_stream} streams")
    view = memoryview(buf).cast("B")
    return b"".join((header(st.seq_id, n_stream), view[st.start : st.end], bytes(4 * (n_stream - 1))))


def cut(buf: Buffer, n_cells: int, n_stream: int = 1, *, into: Callable[[int], memoryview] | None = None) -> Buffer:
    """The first ``n_cells`` cells (positions ``0 .. n_cells-1``) as a state of its own:
    new bytes, or with ``into`` a read-only view of the memory ``into(size)`` gives."""
    if into is None:
        return split(buf, [0, n_cells], n_stream=n_stream)[0]
    view, st = _in_order(buf, [0, n_cells])
    return memoryview(_assemble_many([view], [st], n_stream, [(0, n_cells)], into=into)).toreadonly()


def split(buf: Buffer, bounds: Sequence[int], *, n_stream: int = 1) -> list[bytes]:
    """Pieces ``[bounds[i], bounds[i+1])`` of an in-order state, each a valid state holding
    its cells at their original positions (``concat`` puts them back together)."""
    view, st = _in_order(buf, bounds)
    return [_assemble(view, st, [(a, b)], n_stream) for a, b in zip(bounds, bounds[1:], strict=False)]


def _in_order(buf: Buffer, bounds: Sequence[int]) -> tuple[memoryview, SeqState]:
    """``buf`` parsed, checked to hold its cells in position order and to have every one of
    the sorted cell ``bounds``."""
    st = parse(buf)
    if list(bounds) != sorted(bounds) or bounds[0] < 0 or bounds[-1] > st.n_cells:
        raise ValueError(f"bad cell bounds {list(bounds)} for {st.n_cells} cells")
    if not is_in_order(buf, st):
        raise UnknownLayout("the cells are not in position order; cannot cut")
    return memoryview(buf).cast("B"), st


def concat(
    parts: Sequence[Buffer],
    *,
    n_stream: int = 1,
    n_cells: int | None = None,
    keep: Sequence[int] | None = None,
    into: Callable[[int], memoryview] | None = None,
) -> Buffer:
    """One state from pieces whose cells follow each other (positions 0..n-1 overall);
    with ``n_cells``, only the first ``n_cells`` of them (a cut, without a second copy);
    with ``keep``, only the first ``keep[i]`` cells of piece ``i`` (a chunk a row branches
    off inside of: the next piece continues after its head). With ``into``, written into
    the view ``into(size)`` gives (``StateMemory.lend``: memory used before) and returned
    as that view; else new bytes."""
    if not parts:
        raise ValueError("nothing to concatenate")
    if keep is not None and (len(keep) != len(parts) or min(keep) < 0):
        raise ValueError(f"bad cell counts {list(keep)} for {len(parts)} pieces")
    views = [memoryview(p).cast("B") for p in parts]
    states = [parse(v) for v in views]
    counts = [st.n_cells for st in states] if keep is None else [min(k, st.n_cells) for k, st in zip(keep, states, strict=True)]
    layout = states[0].layout
    expected = 0
    for v, st, k in zip(views, states, counts, strict=True):
        if st.n_cells and st.layout != layout:
            raise UnknownLayout("the pieces have different layouts")
        pos = positions(v, st)[:k]
        if not (pos == np.arange(expected, expected + k, dtype=np.int32)).all():
            raise UnknownLayout(f"a piece does not continue at position {expected}")
        expected += k
    if keep is None and (n_cells is None or n_cells >= expected):
        return _assemble_many(views, states, n_stream, into=into)
    if n_cells is not None and n_cells < 0:
        raise ValueError(f"cannot keep {n_cells} cells")
    total = expected if n_cells is None else min(n_cells, expected)
    ranges, start = [], 0
    for k in counts:
        ranges.append((0, max(0, min(k, total - start))))
        start += k
    return _assemble_many(views, states, n_stream, ranges, into=into)


def _assemble(view: memoryview, st: SeqState, ranges: list[tuple[int, int]], n_stream: int) -> bytes:
    return bytes(_assemble_many([view] * len(ranges), [st] * len(ranges), n_stream, ranges))


def _assemble_many(
    views: Sequence[memoryview],
    states: Sequence[SeqState],
    n_stream: int,
    ranges: Sequence[tuple[int, int]] | None = None,
    into: Callable[[int], memoryview] | None = None,
) -> Buffer:
    """Build one state from cell ranges of parsed states (all of one layout); ``into``: see
    ``concat``."""
    spans = ranges or [(0, st.n_cells) for st in states]
    n = sum(b - a for a, b in spans)
    lead = next((st for st in states if st.n_cells), states[0])
    out: list[Any] = [header(lead.seq_id, n_stream), _U32.pack(n)]
    if n == 0:
        return b"".join(out[:1] + [bytes(4 * n_stream)])
    ms = lead.cell_meta_size
    out += [v[st.meta_offset + a * ms : st.meta_offset + b * ms] for v, st, (a, b) in zip(views, states, spans, strict=True)]
    out.append(struct.pack("<II", int(lead.v_trans), len(lead.k)))
    for i, sec in enumerate(lead.k):
        out.append(_K_HDR.pack(sec.type, sec.cell_bytes))
        out += [_rows(v, st.k[i], a, b) for v, st, (a, b) in zip(views, states, spans, strict=True)]
    for i, sec in enumerate(lead.v):
        if sec.transposed:
            out.append(_VT_HDR.pack(sec.type, sec.cell_bytes, sec.n_rows))
            blocks = [_trans_rows(v, st, st.v[i], a, b) for v, st, (a, b) in zip(views, states, spans, strict=True)]
            out.append(np.concatenate(blocks, axis=1).tobytes())
        else:
            out.append(_K_HDR.pack(sec.type, sec.cell_bytes))
            out += [_rows(v, st.v[i], a, b) for v, st, (a, b) in zip(views, states, spans, strict=True)]
    out.append(bytes(4 * (n_stream - 1)))
    if into is None:
        return b"".join(out)
    dest = into(sum(len(part) for part in out))
    at = 0
    for part in out:
        dest[at : at + len(part)] = part
        at += len(part)
    return dest


def _rows(view: memoryview, sec: Section, a: int, b: int) -> memoryview:
    return view[sec.offset + a * sec.cell_bytes : sec.offset + b * sec.cell_bytes]


def _trans_rows(view: memoryview, st: SeqState, sec: Section, a: int, b: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    el = sec.cell_bytes
    grid = np.frombuffer(view, dtype=np.uint8, count=sec.n_rows * st.n_cells * el, offset=sec.offset)
    return grid.reshape(sec.n_rows, st.n_cells * el)[:, a * el : b * el]
