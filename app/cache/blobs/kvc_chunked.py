"""KVC v2: chunked, content-addressed KV storage. A saved prefix is a **row** (a small
manifest naming its tokens) over a **chain** of fixed-size token **chunks**, each stored once.

Chains. A row's tokens are laid over chunks of at most ``C`` tokens (the chunk size,
``CHUNK_TOKENS``), each holding the KV cells of the positions it covers. Every chunk is
keyed by a chained hash of what precedes it and its own tokens::

    root     = sha256("hearth-kvc2-root" ‖ fingerprint[32] ‖ quant byte[1] ‖ ctx hash[32]
                      ‖ u32 C)                         the model/adapter/context identity
    key      = sha256(parent key ‖ the chunk's tokens as u32 LE)     first parent = root

With nothing stored, a row is cut every ``C`` tokens (the grid; only its last chunk may be
partial). A later row is laid over what is stored (``ChunkIndex.plan``): it uses every
stored chunk it contains, and where it branches off *inside* a stored chunk it uses that
chunk's head (cut on restore) and continues with a chunk starting at the branch point,
whose parent is the key the head would have on its own::

    chat 1    t0 ......... t127 | s128 .. s199 a200 ...... a255 | a256 ..
              [ K0: 128, root  ] [ K1: 128, parent K0          ] [ ...
    chat 2    t0 ......... t127 | s128 .. s199 | b200 ......... b327 | ..
              uses K0            uses K1's head  [ K2: 128, parent = sha256(K0 ‖ s128..s199),
                                 (72 cells)        start 200 ]

So a shared system prompt, a regenerated reply or an edited message is stored once whatever
its length: a branch costs only its own tokens. A chunk's key covers all tokens up to its
end, so a key names one exact prefix, and equal prefixes laid the same way share keys.
A row's tail needs any stored chunk under the right parent whose tokens *start with* the
tail's tokens (cut on restore), so a longer chunk written later **supersedes** a partial
one it extends (a turn extending a partial tail writes a full step from the partial's
start): the rows move over to it and the partial is deleted. Under one parent no stored
chunk is a prefix of another. Restoring ``n`` tokens reads the chain's chunks, checks
each one's CRC, key and tokens, concatenates the cells each serves (``seqstate.concat``)
up to ``n`` and loads the result once. At start-up each row's chain is laid over the
indexed chunks the same way.

A chunk file, ``<hex key>.kvch`` (all integers little-endian)::

    offset  size  field
    ------  ----  --------------------------------------------------------------
         0     3  magic "KVC"
         3     1  version = 2
         4     1  kind = 0x43 ("C": chunk)
         5     3  reserved (0)
         8     4  u32 H = header size = 160 + 4·n (the payload starts here)
        12     4  u32 CRC32C of header bytes [16, H)
        16     8  u64 N = payload length
        24     4  u32 CRC32C of the payload
        28     4  u32 C = chunk size of the chain
        32     4  u32 start = position of the first cell
        36     4  u32 n = cells (= tokens) in this chunk, 1..C
        40     8  u64 created (unix seconds)
        48    32  fingerprint (effective: base model + adapters)
        80     1  quant byte (docs/design.md §4 table)
        81     7  reserved (0)
        88    32  ctx params hash
       120    32  parent key (the root when start = 0)
       152     8  reserved (0)
       160   4·n  token ids, u32 each
         H     N  payload: a one-stream llama per-seq state holding exactly the cells
                  [start, start + n), at those positions (``app.cache.blobs.seqstate``)

A chunk file never changes after publish. A reader checks the magic, the sizes, both CRCs,
that ``sha256(parent ‖ tokens)`` is the file's name and, for ``start = 0``, that the parent
is the root of the identity the header names.

A row manifest, ``<hex key>.kvr``, where key is the row key of docs/design.md §4
``sha256(fingerprint ‖ quant byte ‖ ctx hash ‖ tokens)`` — the same key a v1 blob has::

    offset  size  field
    ------  ----  --------------------------------------------------------------
         0     3  magic "KVC"
         3     1  version = 2
         4     1  kind = 0x52 ("R": row)
         5     1  save reason: 0 unknown, 1 cold, 2 continued, 3 evict, 4 shutdown,
                  5 finish (as in v1)
         6     2  reserved (0)
         8     4  u32 H = file size
        12     4  u32 CRC32C of bytes [4, 8) then [32, H)
        16     4  u32 hit count        ┐ the only fields changed after publish, patched
        20     4  reserved (0)         │ in place on a load (outside the CRC)
        24     8  u64 last used        ┘
        32     4  u32 C = chunk size
        36     4  u32 n = token count
        40     8  u64 created (unix seconds)
        48     4  u32 context size
        52     1  quant bits
        53     3  reserved (0)
        56    32  fingerprint
        88     1  quant byte
        89     7  reserved (0)
        96    32  ctx params hash
       128   4·n  token ids, u32 each
    128+4n     …  TLV records to the end: u8 tag, u32 length, value (UTF-8)
                    0x80 model id   0x81 session id   0x82 preview text
                  unknown tags are skipped (forward compatible)

Writes use the tiers' publish protocol (exclusive temp file, fsync, rename, fsync dir):
a save writes its new chunks first and its manifest last, so a crash leaves at worst
unreferenced chunks, which start-up deletes. Payloads whose layout ``seqstate`` does not
recognise are stored whole as KVC v1 blobs (``app.cache.blobs.kvc_whole``) instead.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass

from app.cache.blobs.kvc_whole import SAVE_REASONS, CorruptBlob, crc32c, iter_tlv
from app.cache.blobs.tiers import Buffer, Tier
from app.cache.keys import KEY_LEN, make_key, quant_byte, quant_name

# NOTE: 128 tokens, from measurements on this 2-core machine (SmolLM2-135M, q8_0 K/V,
# 12,252 bytes per token, ext4). Writing: an fsync'd file costs ~13-17 ms whatever its size
# below a few MB, so the first save of a 2,000-token chat took ~290 ms of writer time at 128
# (~890 ms at 64, ~230 ms at 256); later turns write only their new chunks. Restoring those
# 2,000 tokens (read, CRC, concatenate) took ~50-75 ms at 128 and 2-3x that at 64 (more
# files, more pieces). Space no longer depends on the size: on a fixed grid a branch
# re-stored the head of the chunk it branched off inside (B8's trace held 1.42 x its unique
# tokens at 128; replaying its 26 rows: 1.05 / 1.16 / 1.42 / 1.67 x at 16 / 64 / 128 / 256),
# while a row branching inside a chunk now uses that chunk's head (``ChunkIndex.plan``):
# B8 measured 18.55 MB for 1,508 unique tokens x 12,252 B = 1.004 x (file headers and
# manifests are the rest).
CHUNK_TOKENS = 128

MAGIC = b"KVC"
VERSION = 2
KIND_CHUNK = 0x43
KIND_ROW = 0x52
CHUNK_SUFFIX = ".kvch"
ROW_SUFFIX = ".kvr"

_CHUNK_HEAD = struct.Struct("<3sBBBHII QIIII Q 32sB7x 32s 32s 8x")
CHUNK_FIXED = 160
_ROW_HEAD = struct.Struct("<3sBBBHII I4xQ IIQ IB3x 32sB7x 32s")
ROW_FIXED = 128
HITS_OFFSET, HITS_FIELD = 16, struct.Struct("<I")
LAST_USED_OFFSET, LAST_USED_FIELD = 24, struct.Struct("<Q")
_TLV_HEAD = struct.Struct("<BI")
assert _CHUNK_HEAD.size == CHUNK_FIXED and _ROW_HEAD.size == ROW_FIXED

TAG_MODEL_ID, TAG_SESSION_ID, TAG_PREVIEW = 0x80, 0x81, 0x82
_REASON_NAMES = {v: k for k, v in SAVE_REASONS.items()}


def chain_root(fingerprint: bytes, quant_type: str, ctx_params_hash: bytes, chunk_size: int) -> bytes:
    """The key every chain of this model/adapter/context identity hangs from."""
    h = hashlib.sha256(b"hearth-kvc2-root")
    h.update(fingerprint)
    h.update(bytes((quant_byte(quant_type),)))
    h.update(ctx_params_hash)
    h.update(struct.pack("<I", chunk_size))
    return h.digest()


def chunk_key(parent: bytes, tokens_le: bytes | memoryview) -> bytes:
    return hashlib.sha256(bytes(parent) + bytes(tokens_le)).digest()


def chain_keys(root: bytes, tokens_le: bytes, chunk_size: int) -> list[bytes]:
    """The keys of a token string's chunks: full ones, then the partial tail if any."""
    keys: list[bytes] = []
    parent = root
    step = chunk_size * 4
    for a in range(0, len(tokens_le), step):
        parent = chunk_key(parent, tokens_le[a : a + step])
        keys.append(parent)
    return keys


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    """Everything a chunk file says besides its payload."""

    key: bytes
    parent: bytes
    start: int
    tokens_le: bytes
    chunk_size: int
    fingerprint: bytes
    quant_type: str
    ctx_params_hash: bytes
    created: int
    payload_length: int = 0
    payload_crc32c: int = 0

    @property
    def n(self) -> int:
        return len(self.tokens_le) // 4

    @property
    def header_size(self) -> int:
        return CHUNK_FIXED + len(self.tokens_le)


def build_chunk(h: ChunkHeader, payload: bytes | memoryview) -> bytes:
    """The chunk file's header (``header + payload`` is the file)."""
    body = _CHUNK_HEAD.pack(
        MAGIC, VERSION, KIND_CHUNK, 0, 0, h.header_size, 0,
        len(payload), crc32c(payload), h.chunk_size, h.start, h.n,
        h.created, h.fingerprint, quant_byte(h.quant_type), h.ctx_params_hash, h.parent,
    ) + h.tokens_le  # fmt: skip
    crc = crc32c(body[16:])
    return body[:12] + struct.pack("<I", crc) + body[16:]


def chunk_header_size(lead: bytes) -> int:
    """The header size from a chunk file's first 16 bytes."""
    if len(lead) < 16 or lead[:3] != MAGIC or lead[3] != VERSION or lead[4] != KIND_CHUNK:
        raise CorruptBlob("not a KVC v2 chunk (bad magic, version or kind)")
    size: int = struct.unpack_from("<I", lead, 8)[0]
    if size < CHUNK_FIXED or (size - CHUNK_FIXED) % 4:
        raise CorruptBlob(f"implausible chunk header size {size}")
    return size


def parse_chunk_header(head: bytes, total_size: int, expected_key: bytes) -> ChunkHeader:
    """Validate a chunk file's header (CRC, sizes, key); ``CorruptBlob`` if anything is off."""
    size = chunk_header_size(head[:16])
    if len(head) < size:
        raise CorruptBlob("truncated chunk header")
    (_m, _v, _k, _f, _r, _h, crc, n_payload, payload_crc, chunk_size, start, n, created,
     fingerprint, qbyte, ctx_hash, parent) = _CHUNK_HEAD.unpack_from(head, 0)  # fmt: skip
    if crc32c(head[16:size]) != crc:
        raise CorruptBlob("chunk header CRC32C mismatch")
    if size != CHUNK_FIXED + 4 * n or size + n_payload != total_size:
        raise CorruptBlob("chunk sizes do not add up")
    if not 0 < n <= chunk_size:
        raise CorruptBlob(f"implausible chunk: {n} tokens at {start}, chunk size {chunk_size}")
    tokens_le = bytes(head[CHUNK_FIXED:size])
    quant = quant_name(qbyte)
    if chunk_key(parent, tokens_le) != expected_key:
        raise CorruptBlob("chunk key mismatch: the file describes other tokens")
    if start == 0 and parent != chain_root(fingerprint, quant, ctx_hash, chunk_size):
        raise CorruptBlob("a first chunk whose parent is not its identity's root")
    return ChunkHeader(
        key=expected_key, parent=parent, start=start, tokens_le=tokens_le,
        chunk_size=chunk_size, fingerprint=fingerprint, quant_type=quant,
        ctx_params_hash=ctx_hash, created=created, payload_length=n_payload,
        payload_crc32c=payload_crc,
    )  # fmt: skip


def check_chunk_payload(h: ChunkHeader, payload: bytes | memoryview) -> None:
    if len(payload) != h.payload_length or crc32c(payload) != h.payload_crc32c:
        raise CorruptBlob("chunk payload CRC32C mismatch")


@dataclass(frozen=True, slots=True)
class RowManifest:
    """Everything a row manifest says."""

    fingerprint: bytes
    quant_type: str
    ctx_params_hash: bytes
    tokens_le: bytes
    chunk_size: int
    save_reason: str = "unknown"
    created: int = 0
    last_used: int = 0
    hits: int = 0
    context_size: int = 0
    quant_bits: int = 0
    model_id: str = ""
    session_id: str = ""
    preview: str = ""

    @property
    def key(self) -> bytes:
        return make_key(self.fingerprint, self.quant_type, self.ctx_params_hash, self.tokens_le)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens_le) // 4


def build_row(m: RowManifest) -> bytes:
    """The whole manifest file."""
    tlv = b"".join(
        _TLV_HEAD.pack(tag, len(raw)) + raw
        for tag, text in ((TAG_MODEL_ID, m.model_id), (TAG_SESSION_ID, m.session_id),
                          (TAG_PREVIEW, m.preview))  # fmt: skip
        if (raw := text.encode("utf-8", "replace"))
    )
    size = ROW_FIXED + len(m.tokens_le) + len(tlv)
    body = _ROW_HEAD.pack(
        MAGIC, VERSION, KIND_ROW, SAVE_REASONS[m.save_reason], 0, size, 0,
        min(m.hits, 0xFFFFFFFF), m.last_used or m.created, m.chunk_size, m.n_tokens,
        m.created, m.context_size, m.quant_bits & 0xFF, m.fingerprint,
        quant_byte(m.quant_type), m.ctx_params_hash,
    ) + m.tokens_le + tlv  # fmt: skip
    return body[:12] + struct.pack("<I", _row_crc(body)) + body[16:]


def _row_crc(data: bytes) -> int:
    return crc32c(data[4:8] + data[32:])


def parse_row(data: bytes, expected_key: bytes) -> RowManifest:
    """Validate a manifest (framing, CRC, key); ``CorruptBlob`` if anything is off."""
    if len(data) < ROW_FIXED or data[:3] != MAGIC or data[3] != VERSION or data[4] != KIND_ROW:
        raise CorruptBlob("not a KVC v2 row manifest")
    (_m, _v, _k, reason, _r, size, crc, hits, last_used, chunk_size, n, created, context_size,
     quant_bits, fingerprint, qbyte, ctx_hash) = _ROW_HEAD.unpack_from(data, 0)  # fmt: skip
    if size != len(data) or _row_crc(data) != crc:
        raise CorruptBlob("row manifest size or CRC32C mismatch")
    if reason not in _REASON_NAMES or not 0 < chunk_size < 1 << 20:
        raise CorruptBlob("implausible row manifest fields")
    end = ROW_FIXED + 4 * n
    if end > size:
        raise CorruptBlob("row manifest tokens run past its end")
    texts = _decode_tlv(data[end:])
    m = RowManifest(
        fingerprint=fingerprint, quant_type=quant_name(qbyte), ctx_params_hash=ctx_hash,
        tokens_le=bytes(data[ROW_FIXED:end]), chunk_size=chunk_size,
        save_reason=_REASON_NAMES[reason], created=created, last_used=last_used, hits=hits,
        context_size=context_size, quant_bits=quant_bits, model_id=texts.get(TAG_MODEL_ID, ""),
        session_id=texts.get(TAG_SESSION_ID, ""), preview=texts.get(TAG_PREVIEW, ""),
    )  # fmt: skip
    if len(expected_key) != KEY_LEN or m.key != expected_key:
        raise CorruptBlob("row key mismatch: the manifest describes other tokens or a model")
    return m


def _decode_tlv(tlv: bytes) -> dict[int, str]:
    return {tag: value.decode("utf-8", "replace") for tag, value in iter_tlv(tlv)}


# -- on a tier -------------------------------------------------------------------------------


def chunk_name(key: bytes) -> str:
    return key.hex() + CHUNK_SUFFIX


def row_name(key: bytes) -> str:
    return key.hex() + ROW_SUFFIX


def read_chunk(
    tier: Tier, key: bytes, into: Callable[[int], memoryview] | None = None
) -> tuple[ChunkHeader, Buffer]:
    """A chunk's header and payload, fully validated (both CRCs, the key); ``CorruptBlob``
    when anything is off, ``FileNotFoundError`` when it is absent. ``into``: a file tier
    reads the file into the view it gives (``Tier.get_parts``)."""
    parts = tier.get_parts(chunk_name(key), into)
    if len(parts) == 2:
        head, payload = bytes(parts[0]), parts[1]
        total = len(head) + len(payload)
    else:  # NOTE: the payload as a view of the bytes read, not a 1.5 MB slice copy
        data = memoryview(parts[0] if len(parts) == 1 else b"".join(parts))
        size = chunk_header_size(bytes(data[:16]))
        head, payload, total = bytes(data[:size]), data[size:], len(data)
    header = parse_chunk_header(head, total, key)
    check_chunk_payload(header, payload)
    return header, payload


def read_chunk_header(tier: Tier, key: bytes) -> tuple[ChunkHeader, int]:
    """A chunk's validated header (not its payload) and the file's size."""
    lead, size = tier.get_head(chunk_name(key), 16)
    head, _ = tier.get_head(chunk_name(key), chunk_header_size(lead))
    return parse_chunk_header(head, size, key), size


def read_row(tier: Tier, key: bytes) -> RowManifest:
    return parse_row(tier.get(row_name(key)), key)


def touch_row(tier: Tier, key: bytes, hits: int, last_used: int) -> None:
    """Best effort: record a load in a manifest's header (hit count, last-used time)."""
    tier.patch(row_name(key), HITS_OFFSET, HITS_FIELD.pack(min(hits, 0xFFFFFFFF)))
    tier.patch(row_name(key), LAST_USED_OFFSET, LAST_USED_FIELD.pack(last_used))
