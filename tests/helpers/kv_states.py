"""Per-sequence KV states in llama.cpp's format, built without llama.cpp, for cache tests.

``state_for(tokens)`` is a valid one-stream ``llama_state_seq_get_data`` payload
(``app.cache.blobs.seqstate`` parses it) holding one cell per token at positions 0..n-1. Like
real KV, a cell's bytes depend only on the tokens up to and including its own, so two
token lists sharing a prefix share those cells byte for byte — what chunk dedup relies on.
The numbers are meaningless; storage tests only need the bytes to be exact. Tests of what
the KV *means* use real llama.cpp on the tiny model.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

MAGIC = 0xAF143CD8
TYPE_Q8_0 = 8


def _cell_bytes(prefix_digest: bytes, n: int) -> bytes:
    d = hashlib.sha256(prefix_digest).digest()
    return (d * (n // 32 + 1))[:n]


def state_for(
    tokens: Sequence[int], *, n_layer: int = 2, k_row: int = 34, v_row: int = 34, seq_id: int = 0
) -> bytes:
    """A one-stream state for ``tokens`` (K and V rows of ``k_row``/``v_row`` bytes)."""
    n = len(tokens)
    h = hashlib.sha256(b"kv")
    digests = []
    for t in tokens:
        h.update(struct.pack("<I", t))
        digests.append(h.copy().digest())
    out = [struct.pack("<IiI", MAGIC, seq_id, 1), struct.pack("<I", n)]
    if n == 0:
        return b"".join(out)
    out += [struct.pack("<iIi", pos, 1, seq_id) for pos in range(n)]
    out.append(struct.pack("<II", 0, n_layer))
    for kind, row in ((b"K", k_row), (b"V", v_row)):
        for layer in range(n_layer):
            out.append(struct.pack("<iQ", TYPE_Q8_0, row))
            tag = kind + bytes((layer,))
            out += [_cell_bytes(d + tag, row) for d in digests]
    return b"".join(out)


def bytes_per_token(*, n_layer: int = 2, k_row: int = 34, v_row: int = 34) -> int:
    return 12 + n_layer * (k_row + v_row)
