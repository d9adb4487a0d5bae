"""KVC v1 blob files: one saved KV state, self-describing (docs/design.md §4, erllama's layout).

All integers are little-endian. The "trailer" sits right after the header, as in erllama,
so a reader learns the payload's offset, length and CRC from the first 72 bytes and the
files stay interchangeable with erllama's::

    offset  size  field
    ------  ----  ------------------------------------------------------------
         0     3  magic "KVC"
         3     1  version = 1
         4     1  quant_bits
         5     1  save_reason   0 unknown, 1 cold, 2 continued, 3 evict,
                                4 shutdown, 5 finish
         6     2  reserved (0)
         8     4  u32 token count
        12     4  u32 hit count
        16     4  u32 context size
        20     4  reserved (0)
        24     8  u64 created    (unix seconds)
        32     8  u64 last used  (unix seconds)
        40     8  u64 payload byte count
    ------  ----  ---- trailer (24 bytes) -------------------------------------
        48     8  u64 payload offset  (= start of the payload section below)
        56     8  u64 payload length  (= payload byte count)
        64     4  u32 CRC32C of the payload (Castagnoli)
        68     4  reserved (0)
    ------  ----  ---- prompt section ----------------------------------------
        72     4  u32 P = prompt text length
        76     P  prompt text, UTF-8 (observability only; never trusted)
    ------  ----  ---- TLV section -------------------------------------------
      76+P     4  u32 T = TLV bytes
      80+P     T  records: u8 tag, u32 length, value
                    0x01 fingerprint        32 bytes        required
                    0x02 fingerprint mode   1 byte          required (0 safe)
                    0x03 quant byte         1 byte          required
                    0x04 ctx params hash    32 bytes        required
                    0x05 host               UTF-8           optional
                    0x06 writer version     UTF-8           optional
                    0x07 save detail        UTF-8           optional
                    0x08 token count        u32             required
                    0x09 token ids          u32 × count     required
                    0x80 model id           UTF-8           Hearth extension
                    0x81 session id         UTF-8           Hearth extension
                  unknown tags are skipped (forward compatible)
    ------  ----  ---- payload ----------------------------------------------
    80+P+T     N  payload: opaque llama_state_seq bytes; the file ends here

The hit count (offset 12) and last-used time (offset 32) are the only fields ever changed
after publish: the store patches them in place on a load (outside the CRC and the key).

``build(meta, payload)`` returns the **prefix** (everything before the payload) so a writer
can stream a large payload without concatenating it; ``prefix + payload`` is the file.
``build_file`` returns the whole file. ``parse(data, expected_key)`` checks everything
(framing, lengths, CRC, the key recomputed from the TLVs); ``parse_meta`` checks framing
and TLVs only, and accepts just the prefix when given the file's ``total_size``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import google_crc32c
import numpy as np

from app.cache.keys import (
    CTX_HASH_LEN,
    FINGERPRINT_LEN,
    decode_tokens,
    encode_tokens,
    make_key,
    quant_byte,
    quant_name,
)

MAGIC = b"KVC"
VERSION = 1
HEADER_SIZE = 48
TRAILER_SIZE = 24
FIXED_SIZE = HEADER_SIZE + TRAILER_SIZE  # first 72 bytes: enough to find the payload

_HEADER = struct.Struct("<3sBBBHIIIIQQQ")
HITS_OFFSET, HITS_FIELD = 12, struct.Struct("<I")
LAST_USED_OFFSET, LAST_USED_FIELD = 32, struct.Struct("<Q")
_TRAILER = struct.Struct("<QQII")
_U32 = struct.Struct("<I")
_TLV_HEAD = struct.Struct("<BI")
assert _HEADER.size == HEADER_SIZE and _TRAILER.size == TRAILER_SIZE

SAVE_REASONS: dict[str, int] = {
    "unknown": 0,
    "cold": 1,
    "continued": 2,
    "evict": 3,
    "shutdown": 4,
    "finish": 5,
}
_REASON_NAMES = {v: k for k, v in SAVE_REASONS.items()}

TAG_FINGERPRINT = 0x01
TAG_FINGERPRINT_MODE = 0x02
TAG_QUANT = 0x03
TAG_CTX_HASH = 0x04
TAG_HOST = 0x05
TAG_VERSION = 0x06
TAG_DETAIL = 0x07
TAG_TOKEN_COUNT = 0x08
TAG_TOKEN_IDS = 0x09
TAG_MODEL_ID = 0x80  # Hearth extensions; erllama readers skip them as unknown tags
TAG_SESSION_ID = 0x81


class CorruptBlob(ValueError):
    """A blob that is torn, malformed, fails its CRC or does not match its key."""


def crc32c(data: bytes | memoryview) -> int:
    """CRC32C (Castagnoli), as stored in the trailer."""
    # NOTE: the C extension refuses a memoryview but takes a numpy view of it: no copy
    # (copying a 24 MB payload first took ~20 ms; the CRC itself takes ~2 ms).
    if isinstance(data, memoryview):
        return int(google_crc32c.value(np.frombuffer(data, dtype=np.uint8)))
    return int(google_crc32c.value(data))


@dataclass(frozen=True, slots=True)
class BlobMeta:
    """Everything a KVC file says about its payload.

    ``payload_offset``/``payload_length``/``payload_crc32c`` are filled by the parsers and
    ignored by ``build`` (which computes them).
    """

    fingerprint: bytes
    quant_type: str
    ctx_params_hash: bytes
    tokens: tuple[int, ...]
    save_reason: str = "unknown"
    quant_bits: int = 0
    context_size: int = 0
    created: int = 0
    last_used: int = 0
    hits: int = 0
    prompt_text: str = ""
    model_id: str = ""
    session_id: str = ""
    fingerprint_mode: int = 0
    host: str = ""
    version: str = ""
    detail: str = ""
    payload_offset: int = field(default=0, compare=False)
    payload_length: int = field(default=0, compare=False)
    payload_crc32c: int = field(default=0, compare=False)

    @property
    def key(self) -> bytes:
        """The key recomputed from fingerprint, quant, ctx hash and tokens."""
        return make_key(self.fingerprint, self.quant_type, self.ctx_params_hash, self.tokens)


def _tlv(tag: int, value: bytes) -> bytes:
    return _TLV_HEAD.pack(tag, len(value)) + value


def build(meta: BlobMeta, payload: bytes | memoryview) -> bytes:
    """The file prefix (header, trailer, prompt, TLVs); ``prefix + payload`` is the file."""
    if len(meta.fingerprint) != FINGERPRINT_LEN or len(meta.ctx_params_hash) != CTX_HASH_LEN:
        raise ValueError("fingerprint and ctx_params_hash must be 32 bytes each")
    if meta.save_reason not in SAVE_REASONS:
        raise ValueError(f"unknown save reason {meta.save_reason!r}")
    now = int(time.time())
    token_bytes = encode_tokens(meta.tokens)
    prompt = meta.prompt_text.encode("utf-8", "replace")
    records = [
        _tlv(TAG_FINGERPRINT, meta.fingerprint),
        _tlv(TAG_FINGERPRINT_MODE, bytes((meta.fingerprint_mode,))),
        _tlv(TAG_QUANT, bytes((quant_byte(meta.quant_type),))),
        _tlv(TAG_CTX_HASH, meta.ctx_params_hash),
        _tlv(TAG_TOKEN_COUNT, _U32.pack(len(meta.tokens))),
        _tlv(TAG_TOKEN_IDS, token_bytes),
    ]
    for tag, text in (
        (TAG_HOST, meta.host),
        (TAG_VERSION, meta.version),
        (TAG_DETAIL, meta.detail),
        (TAG_MODEL_ID, meta.model_id),
        (TAG_SESSION_ID, meta.session_id),
    ):
        if text:
            records.append(_tlv(tag, text.encode("utf-8")))
    tlv = b"".join(records)
    payload_len = len(payload)
    payload_offset = FIXED_SIZE + 4 + len(prompt) + 4 + len(tlv)
    header = _HEADER.pack(
        MAGIC,
        VERSION,
        meta.quant_bits & 0xFF,
        SAVE_REASONS[meta.save_reason],
        0,
        len(meta.tokens),
        meta.hits,
        meta.context_size,
        0,
        meta.created or now,
        meta.last_used or meta.created or now,
        payload_len,
    )
    trailer = _TRAILER.pack(payload_offset, payload_len, crc32c(payload), 0)
    return b"".join((header, trailer, _U32.pack(len(prompt)), prompt, _U32.pack(len(tlv)), tlv))


def build_file(meta: BlobMeta, payload: bytes) -> bytes:
    """The whole file: ``build(meta, payload) + payload``."""
    return build(meta, payload) + payload


def payload_offset_of(fixed: bytes) -> int:
    """The payload offset from a file's first 72 bytes (to read just the prefix)."""
    if len(fixed) < FIXED_SIZE or fixed[:3] != MAGIC:
        raise CorruptBlob("not a KVC file (bad magic or too short)")
    offset: int = _TRAILER.unpack_from(fixed, HEADER_SIZE)[0]
    return offset


def payload_crc_of(prefix: bytes) -> int:
    """The payload CRC32C recorded in a prefix built by ``build``."""
    crc: int = _TRAILER.unpack_from(prefix, HEADER_SIZE)[2]
    return crc


def _take_section(data: memoryview, pos: int, what: str) -> tuple[memoryview, int]:
    if pos + 4 > len(data):
        raise CorruptBlob(f"truncated before the {what} section")
    (n,) = _U32.unpack_from(data, pos)
    start = pos + 4
    if start + n > len(data):
        raise CorruptBlob(f"{what} section runs past the end")
    return data[start : start + n], start + n


def parse_meta(data: bytes | memoryview, total_size: int | None = None) -> BlobMeta:
    """Header, trailer, prompt and TLVs, without reading or checking the payload.

    ``data`` is the whole file, or at least its prefix when ``total_size`` (the file's size)
    is given. Raises ``CorruptBlob`` on any framing or consistency problem.
    """
    view = memoryview(data)
    size = len(view) if total_size is None else total_size
    if len(view) < FIXED_SIZE:
        raise CorruptBlob(f"truncated: {len(view)} bytes, header needs {FIXED_SIZE}")
    (
        magic,
        version,
        quant_bits,
        reason_byte,
        _r0,
        n_tokens,
        hits,
        context_size,
        _r1,
        created,
        last_used,
        payload_count,
    ) = _HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise CorruptBlob(f"bad magic {bytes(magic)!r}")
    if version != VERSION:
        raise CorruptBlob(f"unsupported KVC version {version}")
    if reason_byte not in _REASON_NAMES:
        raise CorruptBlob(f"unknown save reason byte {reason_byte}")
    payload_offset, payload_length, payload_crc, _r2 = _TRAILER.unpack_from(view, HEADER_SIZE)
    if payload_length != payload_count:
        raise CorruptBlob("payload length in trailer and header disagree")
    if payload_offset + payload_length != size:
        raise CorruptBlob(
            f"size mismatch: offset {payload_offset} + length {payload_length} != {size}"
        )
    if payload_offset > len(view):
        raise CorruptBlob("prefix is shorter than the payload offset")
    prefix = view[:payload_offset]
    prompt, pos = _take_section(prefix, FIXED_SIZE, "prompt")
    tlv, pos = _take_section(prefix, pos, "TLV")
    if pos != payload_offset:
        raise CorruptBlob("payload offset does not follow the TLV section")
    fields_ = _decode_tlv(tlv)
    for name in ("fingerprint", "quant_type", "ctx_params_hash", "tokens"):
        if name not in fields_:
            raise CorruptBlob(f"missing TLV {name}")
    tokens = fields_["tokens"]
    assert isinstance(tokens, tuple)
    if len(tokens) != n_tokens or fields_.get("token_count", n_tokens) != n_tokens:
        raise CorruptBlob("token count in header and TLVs disagree")
    return BlobMeta(
        fingerprint=_as_bytes(fields_["fingerprint"]),
        quant_type=str(fields_["quant_type"]),
        ctx_params_hash=_as_bytes(fields_["ctx_params_hash"]),
        tokens=tokens,
        save_reason=_REASON_NAMES[reason_byte],
        quant_bits=quant_bits,
        context_size=context_size,
        created=created,
        last_used=last_used,
        hits=hits,
        prompt_text=bytes(prompt).decode("utf-8", "replace"),
        model_id=str(fields_.get("model_id", "")),
        session_id=str(fields_.get("session_id", "")),
        fingerprint_mode=_as_int(fields_.get("fingerprint_mode", 0)),
        host=str(fields_.get("host", "")),
        version=str(fields_.get("version", "")),
        detail=str(fields_.get("detail", "")),
        payload_offset=payload_offset,
        payload_length=payload_length,
        payload_crc32c=payload_crc,
    )


def _as_int(value: object) -> int:
    assert isinstance(value, int)
    return value


def _as_bytes(value: object) -> bytes:
    assert isinstance(value, bytes)
    return value


_TEXT_TAGS = {
    TAG_HOST: "host",
    TAG_VERSION: "version",
    TAG_DETAIL: "detail",
    TAG_MODEL_ID: "model_id",
    TAG_SESSION_ID: "session_id",
}


def iter_tlv(tlv: bytes | memoryview) -> Iterator[tuple[int, bytes]]:
    """The (tag, value) records of a TLV section (u8 tag, u32 length, value); ``CorruptBlob``
    when one runs past the section. KVC v2 manifests use the same records."""
    pos = 0
    while pos < len(tlv):
        if pos + _TLV_HEAD.size > len(tlv):
            raise CorruptBlob("truncated TLV record header")
        tag, n = _TLV_HEAD.unpack_from(tlv, pos)
        start = pos + _TLV_HEAD.size
        if start + n > len(tlv):
            raise CorruptBlob(f"TLV 0x{tag:02x} runs past its section")
        yield tag, bytes(tlv[start : start + n])
        pos = start + n


def _decode_tlv(tlv: memoryview) -> dict[str, object]:
    out: dict[str, object] = {}
    for tag, value in iter_tlv(tlv):
        if tag == TAG_FINGERPRINT:
            _expect_len(tag, value, FINGERPRINT_LEN)
            out["fingerprint"] = value
        elif tag == TAG_FINGERPRINT_MODE:
            _expect_len(tag, value, 1)
            out["fingerprint_mode"] = value[0]
        elif tag == TAG_QUANT:
            _expect_len(tag, value, 1)
            out["quant_type"] = quant_name(value[0])
        elif tag == TAG_CTX_HASH:
            _expect_len(tag, value, CTX_HASH_LEN)
            out["ctx_params_hash"] = value
        elif tag == TAG_TOKEN_COUNT:
            _expect_len(tag, value, 4)
            out["token_count"] = _U32.unpack(value)[0]
        elif tag == TAG_TOKEN_IDS:
            if len(value) % 4:
                raise CorruptBlob("token ids are not a whole number of u32")
            out["tokens"] = tuple(decode_tokens(value))
        elif tag in _TEXT_TAGS:
            out[_TEXT_TAGS[tag]] = value.decode("utf-8", "replace")
        # any other tag: ignored (forward compatible)
    return out


def _expect_len(tag: int, value: bytes, n: int) -> None:
    if len(value) != n:
        raise CorruptBlob(f"TLV 0x{tag:02x} has {len(value)} bytes, expected {n}")


def parse(data: bytes | memoryview, expected_key: bytes) -> tuple[BlobMeta, bytes]:
    """Fully validate a whole file and return its meta and payload.

    Raises ``CorruptBlob`` when anything is off: framing, lengths, the payload CRC, or the
    key recomputed from the file's fingerprint/quant/ctx hash/tokens ≠ ``expected_key``.
    """
    meta = parse_meta(data)
    # NOTE: one copy of the payload, then the CRC over it: google_crc32c takes only bytes,
    # so checking a memoryview first would copy tens of MB twice on the restore path.
    payload = bytes(memoryview(data)[meta.payload_offset : meta.payload_offset + meta.payload_length])
    _check_payload(meta, payload, expected_key)
    return meta, payload


def parse_parts(prefix: bytes, payload: bytes | memoryview, expected_key: bytes) -> BlobMeta:
    """``parse`` for a blob held as its prefix and its payload: the same checks, no copy."""
    meta = parse_meta(prefix, total_size=len(prefix) + len(payload))
    if meta.payload_offset != len(prefix) or meta.payload_length != len(payload):
        raise CorruptBlob("the payload does not fit the prefix's lengths")
    _check_payload(meta, payload, expected_key)
    return meta


def _check_payload(meta: BlobMeta, payload: bytes | memoryview, expected_key: bytes) -> None:
    if crc32c(payload) != meta.payload_crc32c:
        raise CorruptBlob("payload CRC32C mismatch")
    if meta.key != expected_key:
        raise CorruptBlob("key mismatch: the file describes other tokens or another model")
