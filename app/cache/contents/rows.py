"""``Row``: the immutable snapshot of one cache entry that every reader gets, and
``make_row``, the one place a Row is built (from a save, a blob header, or a database row).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.cache.keys import decode_tokens, quant_byte

Namespace = tuple[str, int, str]  # (fingerprint hex, quant byte, ctx hash hex)

PREVIEW_CHARS = 200  # characters of prompt text a row keeps for the dashboard


@dataclass(frozen=True, slots=True)
class Row:
    """An immutable snapshot of one cache entry; safe to hand to any thread."""

    key: bytes
    model_id: str
    fingerprint: str  # hex
    quant_type: str
    ctx_hash: str  # hex
    n_tokens: int
    tokens_le: bytes = field(repr=False)  # the token ids, u32 little-endian
    tier: str
    size: int  # bytes of the blob file; for a chunked row, its manifest and chunks
    save_reason: str
    created: float  # unix seconds
    last_used: float
    hits: int = 0
    pinned: bool = False  # user pin: never evicted or demoted by quotas
    status: str = "available"
    location: str = ""
    checksum: int = 0  # CRC32C of the payload
    context_size: int = 0
    prompt_preview: str = ""
    session_id: str = ""  # the conversation / session whose save made the row ("" unknown)
    format: int = 1  # 1: a whole-row KVC v1 blob; 2: a KVC v2 manifest over chunks
    chunk_size: int = 0  # tokens per chunk of a chunked row (format 2)

    @property
    def tokens(self) -> tuple[int, ...]:
        """The token ids (decoded on demand: a row may hold tens of thousands)."""
        return tuple(decode_tokens(self.tokens_le))

    @property
    def key_hex(self) -> str:
        return self.key.hex()

    @property
    def namespace(self) -> Namespace:
        return (self.fingerprint, quant_byte(self.quant_type), self.ctx_hash)


def preview(text: str) -> str:
    """What a row keeps of its prompt text."""
    return text[:PREVIEW_CHARS]


def make_row(
    *,
    key: bytes,
    model_id: str,
    fingerprint: bytes | str,
    quant_type: str,
    ctx_hash: bytes | str,
    tokens_le: bytes,
    tier: str,
    size: int,
    save_reason: str,
    created: float,
    last_used: float | None = None,
    hits: int = 0,
    pinned: bool = False,
    status: str = "available",
    location: str = "",
    checksum: int = 0,
    context_size: int = 0,
    prompt_text: str = "",
    session_id: str = "",
    format: int = 1,
    chunk_size: int = 0,
) -> Row:
    """A Row. Identity fields may be raw bytes or hex; the prompt text is cut to a preview."""
    if len(tokens_le) % 4:
        raise ValueError(f"token bytes must be a multiple of 4, got {len(tokens_le)}")
    return Row(
        key=key,
        model_id=model_id,
        fingerprint=fingerprint.hex() if isinstance(fingerprint, bytes) else fingerprint,
        quant_type=quant_type,
        ctx_hash=ctx_hash.hex() if isinstance(ctx_hash, bytes) else ctx_hash,
        n_tokens=len(tokens_le) // 4,
        tokens_le=tokens_le,
        tier=tier,
        size=size,
        save_reason=save_reason,
        created=created,
        last_used=created if last_used is None else last_used,
        hits=hits,
        pinned=pinned,
        status=status,
        location=location,
        checksum=checksum,
        context_size=context_size,
        prompt_preview=preview(prompt_text),
        session_id=session_id,
        format=format,
        chunk_size=chunk_size,
    )
