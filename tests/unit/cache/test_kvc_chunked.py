"""KVC v2 file formats: chunk files and row manifests round-trip, and every damaged,
truncated or misnamed file is refused."""

from __future__ import annotations

import pytest

from app.cache.blobs import kvc_chunked
from app.cache.blobs.kvc_whole import CorruptBlob, crc32c
from app.cache.keys import encode_tokens, make_key

FP, CTX = b"\x11" * 32, b"\x22" * 32
TOKENS = encode_tokens(range(1000, 1300))  # 300 tokens: chunks of 128, 128, 44


def chunk(i: int, payload: bytes = b"KV" * 50) -> tuple[kvc_chunked.ChunkHeader, bytes]:
    root = kvc_chunked.chain_root(FP, "q8_0", CTX, 128)
    keys = kvc_chunked.chain_keys(root, TOKENS, 128)
    parent = root if i == 0 else keys[i - 1]
    header = kvc_chunked.ChunkHeader(
        key=keys[i], parent=parent, start=128 * i, tokens_le=TOKENS[512 * i : 512 * (i + 1)],
        chunk_size=128, fingerprint=FP, quant_type="q8_0", ctx_params_hash=CTX, created=7,
    )  # fmt: skip
    return header, kvc_chunked.build_chunk(header, payload) + payload


def test_chain_keys_are_chained_and_identity_bound() -> None:
    root = kvc_chunked.chain_root(FP, "q8_0", CTX, 128)
    keys = kvc_chunked.chain_keys(root, TOKENS, 128)
    assert len(keys) == 3
    assert keys[0] == kvc_chunked.chunk_key(root, TOKENS[:512])
    assert keys[1] == kvc_chunked.chunk_key(keys[0], TOKENS[512:1024])
    # a shared prefix gives shared keys; a different tail or identity does not
    other = kvc_chunked.chain_keys(root, TOKENS[:1024] + encode_tokens([5]), 128)
    assert other[:2] == keys[:2] and other[2] != keys[2]
    assert kvc_chunked.chain_keys(kvc_chunked.chain_root(FP, "q4_0", CTX, 128), TOKENS, 128)[0] != keys[0]
    assert kvc_chunked.chain_keys(kvc_chunked.chain_root(FP, "q8_0", CTX, 64), TOKENS, 64)[0] != keys[0]


@pytest.mark.parametrize("i", [0, 1, 2])
def test_chunk_round_trip(i: int) -> None:
    header, data = chunk(i)
    size = kvc_chunked.chunk_header_size(data[:16])
    got = kvc_chunked.parse_chunk_header(data[:size], len(data), header.key)
    assert (got.start, got.n, got.parent, got.tokens_le) == (header.start, header.n, header.parent, header.tokens_le)
    assert (got.fingerprint, got.quant_type, got.ctx_params_hash) == (FP, "q8_0", CTX)
    kvc_chunked.check_chunk_payload(got, data[size:])


@pytest.mark.parametrize(
    "damage",
    ["header_byte", "token_byte", "payload_byte", "truncate", "extend", "magic", "version"],
)
def test_damaged_chunk_is_refused(damage: str) -> None:
    header, data = chunk(1)
    buf = bytearray(data)
    size = header.header_size
    if damage == "header_byte":
        buf[40] ^= 1  # created time: inside the header CRC
    elif damage == "token_byte":
        buf[kvc_chunked.CHUNK_FIXED + 5] ^= 1
    elif damage == "payload_byte":
        buf[-1] ^= 1
    elif damage == "truncate":
        del buf[-3:]
    elif damage == "extend":
        buf += b"\0"
    elif damage == "magic":
        buf[0:3] = b"XYZ"
    else:
        buf[3] = 1
    with pytest.raises(CorruptBlob):
        size = kvc_chunked.chunk_header_size(bytes(buf[:16]))
        got = kvc_chunked.parse_chunk_header(bytes(buf[:size]), len(buf), header.key)
        kvc_chunked.check_chunk_payload(got, bytes(buf[size:]))


def test_chunk_under_another_name_or_root_is_refused() -> None:
    header, data = chunk(1)
    with pytest.raises(CorruptBlob, match="key mismatch"):
        kvc_chunked.parse_chunk_header(data[: header.header_size], len(data), b"\x00" * 32)
    # a first chunk must hang from its own identity's root
    root = kvc_chunked.chain_root(FP, "q4_0", CTX, 128)
    bad = kvc_chunked.ChunkHeader(
        key=kvc_chunked.chunk_key(root, TOKENS[:512]), parent=root, start=0, tokens_le=TOKENS[:512],
        chunk_size=128, fingerprint=FP, quant_type="q8_0", ctx_params_hash=CTX, created=1,
    )  # fmt: skip
    data = kvc_chunked.build_chunk(bad, b"x") + b"x"
    with pytest.raises(CorruptBlob, match="root"):
        kvc_chunked.parse_chunk_header(data[: bad.header_size], len(data), bad.key)


def test_row_manifest_round_trip_and_patchable_fields() -> None:
    m = kvc_chunked.RowManifest(
        fingerprint=FP, quant_type="q8_0", ctx_params_hash=CTX, tokens_le=TOKENS,
        chunk_size=128, save_reason="finish", created=100, last_used=150, hits=3,
        context_size=4096, quant_bits=8, model_id="smol", session_id="chat-7",
        preview="User: hello … Assistant: hi",
    )  # fmt: skip
    data = kvc_chunked.build_row(m)
    assert m.key == make_key(FP, "q8_0", CTX, TOKENS)
    assert kvc_chunked.parse_row(data, m.key) == m
    patched = bytearray(data)  # hits and last used sit outside the CRC
    patched[kvc_chunked.HITS_OFFSET : kvc_chunked.HITS_OFFSET + 4] = kvc_chunked.HITS_FIELD.pack(9)
    patched[kvc_chunked.LAST_USED_OFFSET : kvc_chunked.LAST_USED_OFFSET + 8] = kvc_chunked.LAST_USED_FIELD.pack(999)
    got = kvc_chunked.parse_row(bytes(patched), m.key)
    assert (got.hits, got.last_used, got.session_id) == (9, 999, "chat-7")


def test_row_manifest_skips_unknown_tags_and_refuses_damage() -> None:
    m = kvc_chunked.RowManifest(FP, "q8_0", CTX, TOKENS, 128, "cold", created=1, model_id="m")
    data = kvc_chunked.build_row(m)
    # an unknown TLV appended by a newer writer: size and CRC fixed up, then still readable
    extra = bytes((0x99,)) + (3).to_bytes(4, "little") + b"new"
    newer = bytearray(data + extra)
    newer[8:12] = len(newer).to_bytes(4, "little")
    newer[12:16] = crc32c(bytes(newer[4:8] + newer[32:])).to_bytes(4, "little")
    assert kvc_chunked.parse_row(bytes(newer), m.key).model_id == "m"
    for pos in (5, 40, 60, 200, len(data) - 1):
        bad = bytearray(data)
        bad[pos] ^= 1
        with pytest.raises(CorruptBlob):
            kvc_chunked.parse_row(bytes(bad), m.key)
    with pytest.raises(CorruptBlob):
        kvc_chunked.parse_row(data[:-1], m.key)
    with pytest.raises(CorruptBlob, match="key"):
        kvc_chunked.parse_row(data, b"\x00" * 32)
