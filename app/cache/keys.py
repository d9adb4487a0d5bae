"""Cache keys: the quant byte table, the token codec, effective fingerprints (docs/design.md §4).

A key is ``sha256(fingerprint[32] ‖ quant_byte[1] ‖ ctx_params_hash[32] ‖ tokens u32-LE)``.
Hits are token-exact by construction: two token lists share a key only if they are equal.

Also here: the model-file fingerprint (sha256 of the GGUF) and ``FingerprintCache``, which
remembers it per (path, size, mtime_ns) so a multi-GB model is hashed once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sys
import tempfile
import threading
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# NOTE: a stable cache-internal enumeration, deliberately not llama.cpp's GGML type ids, so
# upstream renumbering never changes a key. Same table as erllama's quant bytes.
QUANT_BYTES: Mapping[str, int] = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 4,
    "q5_1": 5,
    "q8_0": 6,
    "q4_k_m": 7,
    "q4_k_s": 8,
    "q5_k_m": 9,
    "q5_k_s": 10,
    "q6_k": 11,
    "q8_k": 12,
    "q2_k": 13,
    "q3_k_s": 14,
    "q3_k_m": 15,
    "q3_k_l": 16,
    "iq2_xxs": 17,
    "iq2_xs": 18,
    "iq2_s": 19,
    "iq2_m": 20,
    "iq3_xxs": 21,
    "iq3_xs": 22,
    "iq3_s": 23,
    "iq3_m": 24,
    "iq1_s": 25,
    "iq1_m": 26,
    "iq4_nl": 27,
    "iq4_xs": 28,
    "bf16": 29,
}
UNKNOWN_QUANT_BYTE = 255
UNKNOWN_QUANT_NAME = "unknown"
_QUANT_NAMES = {v: k for k, v in QUANT_BYTES.items()}

FINGERPRINT_LEN = 32
CTX_HASH_LEN = 32
KEY_LEN = 32
_U32_MAX = 0xFFFFFFFF
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

assert array("I").itemsize == 4, "array('I') must be 32-bit for the token codec"


def quant_byte(name: str) -> int:
    """The key's quant byte for a quant type name (case-insensitive); 255 when unknown."""
    return QUANT_BYTES.get(name.strip().lower(), UNKNOWN_QUANT_BYTE)


def quant_name(byte: int) -> str:
    """Inverse of ``quant_byte``; ``"unknown"`` for 255 or any byte not in the table."""
    return _QUANT_NAMES.get(byte, UNKNOWN_QUANT_NAME)


def encode_tokens(tokens: Iterable[int]) -> bytes:
    """Token ids as consecutive u32 little-endian values."""
    try:
        arr = array("I", tokens)
    except OverflowError as exc:
        raise ValueError("token ids must be in 0..2**32-1") from exc
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def decode_tokens(data: bytes | memoryview) -> list[int]:
    """Inverse of ``encode_tokens``."""
    if len(data) % 4:
        raise ValueError(f"token bytes must be a multiple of 4, got {len(data)}")
    arr = array("I")
    arr.frombytes(data)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tolist()


def _check_lengths(fingerprint: bytes, ctx_params_hash: bytes) -> None:
    if len(fingerprint) != FINGERPRINT_LEN:
        raise ValueError(f"fingerprint must be 32 bytes, got {len(fingerprint)}")
    if len(ctx_params_hash) != CTX_HASH_LEN:
        raise ValueError(f"ctx_params_hash must be 32 bytes, got {len(ctx_params_hash)}")


def key_hasher(fingerprint: bytes, quant_type: str, ctx_params_hash: bytes) -> Any:
    """A sha256 object fed with the key's fixed 65-byte head; feed it token bytes next."""
    _check_lengths(fingerprint, ctx_params_hash)
    h = hashlib.sha256(fingerprint)
    h.update(bytes((quant_byte(quant_type),)))
    h.update(ctx_params_hash)
    return h


def make_key(
    fingerprint: bytes,
    quant_type: str,
    ctx_params_hash: bytes,
    tokens: Iterable[int] | bytes,
) -> bytes:
    """The 32-byte cache key. ``tokens`` may be ids or their ``encode_tokens`` bytes."""
    h = key_hasher(fingerprint, quant_type, ctx_params_hash)
    h.update(tokens if isinstance(tokens, bytes) else encode_tokens(tokens))
    digest: bytes = h.digest()
    return digest


def _round_half_away(x: float) -> int:
    a = abs(x)
    whole = math.floor(a)
    n = whole + 1 if a - whole >= 0.5 else whole
    return int(n) if x >= 0 else -int(n)


def effective_fingerprint(base: bytes, adapters: Sequence[tuple[bytes, float]]) -> bytes:
    """The fingerprint of a base model with LoRA adapters attached (docs/design.md §4).

    No adapters → ``base``. Otherwise ``sha256(base ‖ sha ‖ int64_le(round_half_away(scale ·
    2**32)) ...)`` over the adapters sorted by (sha, scale), so attachment order does not
    matter and any scale change gives a new fingerprint.
    """
    if len(base) != FINGERPRINT_LEN:
        raise ValueError(f"base fingerprint must be 32 bytes, got {len(base)}")
    if not adapters:
        return base
    h = hashlib.sha256(base)
    for sha, scale in sorted(adapters, key=lambda a: (a[0], a[1])):
        if len(sha) != FINGERPRINT_LEN:
            raise ValueError(f"adapter sha256 must be 32 bytes, got {len(sha)}")
        if not math.isfinite(scale * 2**32):
            raise ValueError(f"adapter scale must be finite, got {scale!r}")
        fixed = _round_half_away(scale * 2**32)  # exact: scaling by a power of two
        if not _I64_MIN <= fixed <= _I64_MAX:
            raise ValueError(f"adapter scale {scale!r} is out of range")
        h.update(sha)
        h.update(fixed.to_bytes(8, "little", signed=True))
    digest: bytes = h.digest()
    return digest


def ctx_params_hash(params: Mapping[str, Any]) -> bytes:
    """sha256 of a canonical JSON encoding of the context parameters that shape the KV.

    The caller decides which parameters count (docs/design.md §4: KV cell types, V layout / flash
    attention, unified KV, RoPE scaling, …; not n_seq_max with unified KV, n_batch, threads).
    """
    canon = json.dumps(dict(params), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode()).digest()


ProgressFn = Callable[[int, int], None]
_CHUNK = 8 << 20


def file_sha256(path: str | os.PathLike[str], progress: ProgressFn | None = None) -> bytes:
    """sha256 of a file, read in 8 MiB chunks; ``progress(done_bytes, total_bytes)``."""
    total = os.stat(path).st_size
    h = hashlib.sha256()
    done = 0
    with open(path, "rb", buffering=0) as f:
        if progress:
            progress(0, total)
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress(done, total)
    digest: bytes = h.digest()
    return digest


class FingerprintCache:
    """Remembers model-file sha256 digests per (resolved path, size, mtime_ns).

    Backed by ``fingerprints.json`` in ``cache_dir``, rewritten atomically. Thread-safe.
    A changed size or mtime means the file is hashed again.
    """

    FILE_NAME = "fingerprints.json"

    def __init__(self, cache_dir: str | os.PathLike[str]) -> None:
        self._dir = Path(cache_dir)
        self._path = self._dir / self.FILE_NAME
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] = self._read()
        self.num_hashed = 0  # how many files this instance actually hashed

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            raw = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable fingerprint cache %s: %s", self._path, exc)
            return {}
        return raw if isinstance(raw, dict) else {}

    def _write(self) -> None:
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self._dir, prefix=".fingerprints-", suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(self._entries, f, indent=1, sort_keys=True)
            os.replace(tmp, self._path)
        except OSError as exc:  # a cache of a cache: losing it only costs a re-hash
            log.warning("could not save fingerprint cache %s: %s", self._path, exc)

    def get(self, path: str | os.PathLike[str], progress: ProgressFn | None = None) -> bytes:
        """The file's sha256, from memory when (size, mtime_ns) are unchanged."""
        real = os.path.realpath(path)
        st = os.stat(real)
        with self._lock:
            hit = self._entries.get(real)
        if hit and hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns:
            try:
                return bytes.fromhex(str(hit["sha256"]))
            except (KeyError, ValueError):
                pass
        digest = file_sha256(real, progress)
        with self._lock:
            self.num_hashed += 1
            self._entries[real] = {
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "sha256": digest.hex(),
            }
            self._write()
        return digest


@dataclass(frozen=True, slots=True)
class KeyMeta:
    """What, besides the tokens, goes into a key: the model's identity and KV format."""

    fingerprint: bytes
    quant_type: str
    ctx_params_hash: bytes

    def __post_init__(self) -> None:
        _check_lengths(self.fingerprint, self.ctx_params_hash)

    @classmethod
    def from_mapping(cls, value: Mapping[str, Any]) -> KeyMeta:
        """From ``Model.cache_key_meta()``'s dict; bytes or hex strings are accepted."""

        def raw(v: Any) -> bytes:
            return bytes.fromhex(v) if isinstance(v, str) else bytes(v)

        return cls(
            fingerprint=raw(value["fingerprint"]),
            quant_type=str(value["quant_type"]),
            ctx_params_hash=raw(value["ctx_params_hash"]),
        )

    @property
    def namespace(self) -> tuple[bytes, int, bytes]:
        """Rows comparable for prefix lookups share this (fp, quant byte, ctx hash)."""
        return (self.fingerprint, quant_byte(self.quant_type), self.ctx_params_hash)

    def hasher(self) -> Any:
        return key_hasher(self.fingerprint, self.quant_type, self.ctx_params_hash)

    def key(self, tokens: Iterable[int] | bytes) -> bytes:
        return make_key(self.fingerprint, self.quant_type, self.ctx_params_hash, tokens)
