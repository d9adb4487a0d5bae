"""KVC v1 blob format: layout, round trip, and every kind of corruption."""

from __future__ import annotations

import os
import struct

import pytest

from app.cache.blobs import kvc_whole
from app.cache.keys import encode_tokens, make_key

FP = b"\x11" * 32
CTX = b"\x22" * 32
TOKENS = (5, 6, 7, 70000)
KEY = make_key(FP, "q4_1", CTX, TOKENS)
PAYLOAD = os.urandom(1000)


def meta(**over: object) -> kvc_whole.BlobMeta:
    fields: dict[str, object] = dict(
        fingerprint=FP, quant_type="q4_1", ctx_params_hash=CTX, tokens=TOKENS,
        save_reason="finish", quant_bits=4, context_size=8192, created=1_700_000_000,
        last_used=1_700_000_100, hits=3, prompt_text="héllo", model_id="smol",
        host="box", version="0.1", detail="turn 2",
    )  # fmt: skip
    fields.update(over)
    return kvc_whole.BlobMeta(**fields)  # type: ignore[arg-type]


def blob(payload: bytes = PAYLOAD) -> bytes:
    return kvc_whole.build(meta(), payload) + payload


def test_crc32c_vectors() -> None:
    assert kvc_whole.crc32c(b"123456789") == 0xE3069283
    assert kvc_whole.crc32c(b"") == 0
    assert kvc_whole.crc32c(b"\x00") == 0x527D5351


def test_round_trip() -> None:
    got, payload = kvc_whole.parse(blob(), KEY)
    assert payload == PAYLOAD
    assert got == meta()  # every field survives, incl. optional TLVs and the model id
    assert got.payload_length == len(PAYLOAD) and got.payload_crc32c == kvc_whole.crc32c(PAYLOAD)
    assert kvc_whole.build_file(meta(), PAYLOAD) == blob()


def test_empty_payload_and_tokens_round_trip() -> None:
    m = meta(tokens=(), prompt_text="", host="", version="", detail="", model_id="")
    data = kvc_whole.build(m, b"")
    got, payload = kvc_whole.parse(data, make_key(FP, "q4_1", CTX, []))
    assert payload == b"" and got.tokens == ()


def test_header_and_trailer_layout() -> None:
    prefix = kvc_whole.build(meta(), PAYLOAD)
    data = prefix + PAYLOAD
    assert data[0:3] == b"KVC" and data[3] == 1 and data[4] == 4 and data[5] == 5
    n_tokens, hits, ctx_size = struct.unpack_from("<III", data, 8)
    assert (n_tokens, hits, ctx_size) == (4, 3, 8192)
    created, last_used, payload_len = struct.unpack_from("<QQQ", data, 24)
    assert (created, last_used, payload_len) == (1_700_000_000, 1_700_000_100, len(PAYLOAD))
    offset, length, crc, _ = struct.unpack_from("<QQII", data, 48)
    assert (offset, length, crc) == (len(prefix), len(PAYLOAD), kvc_whole.crc32c(PAYLOAD))
    (prompt_len,) = struct.unpack_from("<I", data, 72)
    assert data[76 : 76 + prompt_len].decode() == "héllo"
    assert encode_tokens(TOKENS) in prefix


@pytest.mark.parametrize("reason", ["cold", "continued", "evict", "shutdown", "finish"])
def test_save_reason_bytes(reason: str) -> None:
    data = kvc_whole.build(meta(save_reason=reason), b"x")
    assert data[5] == ["cold", "continued", "evict", "shutdown", "finish"].index(reason) + 1
    assert kvc_whole.parse_meta(data + b"x").save_reason == reason


def test_parse_meta_reads_just_the_prefix() -> None:
    prefix = kvc_whole.build(meta(), PAYLOAD)
    got = kvc_whole.parse_meta(prefix, total_size=len(prefix) + len(PAYLOAD))
    assert got.tokens == TOKENS and got.key == KEY
    with pytest.raises(kvc_whole.CorruptBlob):
        kvc_whole.parse_meta(prefix)  # without total_size the payload is missing: truncated


def test_flipped_payload_byte_fails_crc() -> None:
    data = bytearray(blob())
    data[-10] ^= 0x01
    kvc_whole.parse_meta(bytes(data))  # framing is fine...
    with pytest.raises(kvc_whole.CorruptBlob, match="CRC"):
        kvc_whole.parse(bytes(data), KEY)


@pytest.mark.parametrize("cut", [0, 2, 47, 71, 75, 100, -1, -500])
def test_truncated_file(cut: int) -> None:
    data = blob()
    with pytest.raises(kvc_whole.CorruptBlob):
        kvc_whole.parse(data[:cut], KEY)


def test_trailing_bytes_rejected() -> None:
    with pytest.raises(kvc_whole.CorruptBlob):
        kvc_whole.parse(blob() + b"\x00", KEY)


def test_bad_magic_and_version() -> None:
    with pytest.raises(kvc_whole.CorruptBlob, match="magic"):
        kvc_whole.parse(b"KVX" + blob()[3:], KEY)
    with pytest.raises(kvc_whole.CorruptBlob, match="version"):
        kvc_whole.parse(b"KVC\x02" + blob()[4:], KEY)


def test_wrong_key() -> None:
    with pytest.raises(kvc_whole.CorruptBlob, match="key"):
        kvc_whole.parse(blob(), make_key(FP, "q4_1", CTX, TOKENS[:-1]))
    with pytest.raises(kvc_whole.CorruptBlob, match="key"):
        kvc_whole.parse(blob(), make_key(FP, "q8_0", CTX, TOKENS))


def test_tampered_token_ids_fail_the_key_check() -> None:
    data = blob()
    tokens = encode_tokens(TOKENS)
    i = data.index(tokens)
    tampered = data[:i] + encode_tokens((5, 6, 7, 70001)) + data[i + len(tokens) :]
    with pytest.raises(kvc_whole.CorruptBlob, match="key"):
        kvc_whole.parse(tampered, KEY)


def test_unknown_tlv_tags_are_ignored() -> None:
    prefix = kvc_whole.build(meta(), PAYLOAD)
    (prompt_len,) = struct.unpack_from("<I", prefix, 72)
    tlv_at = 76 + prompt_len
    (tlv_len,) = struct.unpack_from("<I", prefix, tlv_at)
    extra = struct.pack("<BI", 0x42, 3) + b"new"
    new_prefix = bytearray(
        prefix[:tlv_at] + struct.pack("<I", tlv_len + len(extra)) + prefix[tlv_at + 4 :] + extra
    )
    struct.pack_into("<Q", new_prefix, 48, len(new_prefix))
    got, payload = kvc_whole.parse(bytes(new_prefix) + PAYLOAD, KEY)
    assert payload == PAYLOAD and got.tokens == TOKENS


def test_every_single_byte_flip_in_the_prefix_is_caught_or_harmless() -> None:
    data = blob(b"payload!")
    prefix_len = len(data) - 8
    for i in range(prefix_len):
        flipped = bytearray(data)
        flipped[i] ^= 0x40
        try:
            got, payload = kvc_whole.parse(bytes(flipped), KEY)
        except kvc_whole.CorruptBlob:
            continue
        # only descriptive fields may change without detection; never tokens or payload
        assert payload == b"payload!" and got.tokens == TOKENS and got.key == KEY


def test_random_garbage_raises_only_corrupt_blob() -> None:
    for n in (0, 10, 72, 200, 5000):
        with pytest.raises(kvc_whole.CorruptBlob):
            kvc_whole.parse(os.urandom(n), KEY)
        with pytest.raises(kvc_whole.CorruptBlob):
            kvc_whole.parse(b"KVC\x01" + os.urandom(n), KEY)


def test_parse_parts_checks_what_parse_checks() -> None:
    prefix = kvc_whole.build(meta(), PAYLOAD)
    assert kvc_whole.parse_parts(prefix, PAYLOAD, KEY) == kvc_whole.parse(prefix + PAYLOAD, KEY)[0]
    flipped = bytes([PAYLOAD[0] ^ 1]) + PAYLOAD[1:]
    with pytest.raises(kvc_whole.CorruptBlob, match="CRC"):
        kvc_whole.parse_parts(prefix, flipped, KEY)
    with pytest.raises(kvc_whole.CorruptBlob):
        kvc_whole.parse_parts(prefix, PAYLOAD[:-1], KEY)
    with pytest.raises(kvc_whole.CorruptBlob, match="key"):
        kvc_whole.parse_parts(prefix, PAYLOAD, b"\x00" * 32)
