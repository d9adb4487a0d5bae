"""Keys, quant bytes, the token codec and effective fingerprints (the vectors of docs/design.md §4)."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import pytest

from app.cache.keys import (
    QUANT_BYTES,
    FingerprintCache,
    KeyMeta,
    decode_tokens,
    effective_fingerprint,
    encode_tokens,
    file_sha256,
    make_key,
    quant_byte,
    quant_name,
)

BASE = b"\x01" * 32
A = b"\xa0" * 32
B = b"\xb0" * 32


def test_key_vector() -> None:
    assert make_key(b"\xaa" * 32, "f16", b"\xbb" * 32, [1, 2, 3]).hex().startswith("8cc177ad")


def test_key_is_sha256_of_the_documented_bytes() -> None:
    raw = b"\xaa" * 32 + bytes([6]) + b"\xbb" * 32 + struct.pack("<3I", 7, 8, 70000)
    assert (
        make_key(b"\xaa" * 32, "q8_0", b"\xbb" * 32, [7, 8, 70000]) == hashlib.sha256(raw).digest()
    )


def test_key_accepts_encoded_tokens_and_keymeta_agrees() -> None:
    meta = KeyMeta(b"\xaa" * 32, "f16", b"\xbb" * 32)
    assert meta.key([1, 2, 3]) == meta.key(encode_tokens([1, 2, 3]))
    assert meta.key([1, 2, 3]) == make_key(b"\xaa" * 32, "f16", b"\xbb" * 32, [1, 2, 3])
    assert meta.key([1, 2, 3]) != meta.key([1, 2])


@pytest.mark.parametrize(
    ("name", "byte"),
    [("f32", 0), ("f16", 1), ("q4_0", 2), ("q4_1", 3), ("q8_0", 6), ("q4_k_m", 7),
     ("q8_k", 12), ("q2_k", 13), ("q3_k_l", 16), ("iq2_xxs", 17), ("iq1_m", 26),
     ("iq4_xs", 28), ("bf16", 29)],
)  # fmt: skip
def test_quant_table(name: str, byte: int) -> None:
    assert quant_byte(name) == byte
    assert quant_byte(name.upper()) == byte
    assert quant_name(byte) == name


def test_quant_table_is_complete_and_unknowns_are_255() -> None:
    assert sorted(QUANT_BYTES.values()) == list(range(30))
    assert quant_byte("q9_z") == 255
    assert quant_name(255) == "unknown"
    assert quant_name(200) == "unknown"
    assert quant_byte(quant_name(255)) == 255


def test_token_codec() -> None:
    assert encode_tokens([1, 0x01020304]) == b"\x01\x00\x00\x00\x04\x03\x02\x01"
    assert decode_tokens(encode_tokens([0, 5, 2**32 - 1])) == [0, 5, 2**32 - 1]
    with pytest.raises(ValueError):
        encode_tokens([2**32])
    with pytest.raises(ValueError):
        encode_tokens([-1])
    with pytest.raises(ValueError):
        decode_tokens(b"\x00\x00\x00")


def test_effective_fingerprint_without_adapters_is_the_base() -> None:
    assert effective_fingerprint(BASE, []) == BASE


def test_effective_fingerprint_exact_bytes() -> None:
    expected = hashlib.sha256(
        BASE + A + (2**32).to_bytes(8, "little", signed=True)
        + B + (-(2**31)).to_bytes(8, "little", signed=True)
    ).digest()  # fmt: skip
    assert effective_fingerprint(BASE, [(B, -0.5), (A, 1.0)]) == expected


def test_effective_fingerprint_is_order_independent() -> None:
    one = effective_fingerprint(BASE, [(A, 1.0), (B, 0.25)])
    assert one == effective_fingerprint(BASE, [(B, 0.25), (A, 1.0)])
    # same adapter twice at two scales: sorted by (sha, scale)
    assert effective_fingerprint(BASE, [(A, 2.0), (A, 1.0)]) == effective_fingerprint(
        BASE, [(A, 1.0), (A, 2.0)]
    )
    assert one != BASE


def test_effective_fingerprint_changes_with_any_scale_change() -> None:
    seen = {effective_fingerprint(BASE, [(A, s)]) for s in (1.0, 0.5, 0.0, -1.0, 1.0 + 2**-32, 2.0)}
    assert len(seen) == 6
    assert effective_fingerprint(BASE, [(A, 1.0)]) != effective_fingerprint(BASE, [(B, 1.0)])


def test_effective_fingerprint_rounds_half_away_from_zero() -> None:
    def fixed(value: int) -> bytes:
        return hashlib.sha256(BASE + A + value.to_bytes(8, "little", signed=True)).digest()

    assert effective_fingerprint(BASE, [(A, 0.5 * 2**-32)]) == fixed(1)
    assert effective_fingerprint(BASE, [(A, -0.5 * 2**-32)]) == fixed(-1)
    assert effective_fingerprint(BASE, [(A, 0.25 * 2**-32)]) == fixed(0)
    assert effective_fingerprint(BASE, [(A, 1.5 * 2**-32)]) == fixed(2)


def test_effective_fingerprint_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        effective_fingerprint(BASE, [(b"short", 1.0)])
    with pytest.raises(ValueError):
        effective_fingerprint(BASE, [(A, float("nan"))])
    with pytest.raises(ValueError):
        effective_fingerprint(BASE, [(A, 1e300)])


def test_keymeta_validates_lengths() -> None:
    with pytest.raises(ValueError):
        KeyMeta(b"\x00" * 31, "f16", b"\x00" * 32)
    with pytest.raises(ValueError):
        KeyMeta(b"\x00" * 32, "f16", b"\x00" * 33)


def test_file_sha256_reports_progress(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    data = os.urandom(9 << 20)  # more than one 8 MiB chunk
    path.write_bytes(data)
    calls: list[tuple[int, int]] = []
    assert (
        file_sha256(path, lambda done, total: calls.append((done, total)))
        == hashlib.sha256(data).digest()
    )
    assert calls[0] == (0, len(data)) and calls[-1] == (len(data), len(data))
    assert len(calls) == 3


def test_fingerprint_cache_hashes_once_per_size_and_mtime(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"weights v1")
    cache = FingerprintCache(tmp_path / "state")
    first = cache.get(model)
    assert first == hashlib.sha256(b"weights v1").digest()
    assert cache.get(model) == first and cache.num_hashed == 1

    reopened = FingerprintCache(tmp_path / "state")  # remembered on disk
    assert reopened.get(model) == first and reopened.num_hashed == 0

    model.write_bytes(b"weights v2")
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert reopened.get(model) == hashlib.sha256(b"weights v2").digest()
    assert reopened.num_hashed == 1


def test_fingerprint_cache_survives_a_garbage_file(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / FingerprintCache.FILE_NAME).write_bytes(b"\x00not json")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    assert FingerprintCache(tmp_path / "state").get(model) == hashlib.sha256(b"x").digest()


def test_keymeta_from_mapping() -> None:
    meta = KeyMeta(b"\xaa" * 32, "f16", b"\xbb" * 32)
    as_bytes = {"fingerprint": b"\xaa" * 32, "quant_type": "f16", "ctx_params_hash": b"\xbb" * 32}
    as_hex = {k: v.hex() if isinstance(v, bytes) else v for k, v in as_bytes.items()}
    assert KeyMeta.from_mapping(as_bytes) == meta == KeyMeta.from_mapping(as_hex)
