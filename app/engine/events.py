"""Stream events and result records. All frozen and slotted: they cross threads (STYLE §3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from app.cache.lookup import MissReason as CacheMissReason

CacheHitKind = Literal["exact", "partial", "cold", "sticky", "continuation"]
FinishReason = Literal["stop", "length", "cancelled"]
ReuseSource = Literal["none", "cache", "session", "live"]
"""Where a request's reused KV came from: nothing, a saved cache row, the request's own sticky
session seq, or another live seq (a running request or an idle session)."""
MissReason: TypeAlias = CacheMissReason | Literal["no_checkpoint"]
"""Why a request reused nothing: the cache's reasons (``app.cache.lookup``), or a recurrent
model's sequence holding no checkpoint to roll back to."""


@dataclass(frozen=True, slots=True)
class CacheDelta:
    """``read``: warm prefix restored at admission; ``created``: largest save beyond it."""

    read: int = 0
    created: int = 0


@dataclass(frozen=True, slots=True)
class Reuse:
    """What a request reused at admission, and why (beyond the core API: the "say why" record).

    ``tokens_reused`` prompt tokens came from ``source`` instead of being prefilled;
    ``tokens_shared`` is how many leading tokens the prompt shares with the best candidate
    held anywhere (so ``tokens_shared - tokens_reused`` is what could not be reused, e.g. the
    last prompt token, which is always prefilled for fresh logits). On a miss
    (``source == "none"``) ``miss_reason`` says why. ``origin_session`` is the session id of
    the conversation whose KV was reused (None when unknown or when nothing was reused).
    ``tokens_read_ahead`` of the reused tokens were read by type-ahead (a background
    ``prefill_only`` on the request's session, ``app.engine.scheduling.read_ahead``) before it was sent.
    """

    source: ReuseSource = "none"
    tokens_reused: int = 0
    tokens_shared: int = 0
    miss_reason: MissReason | None = None
    origin_session: str | None = None
    tokens_read_ahead: int = 0


@dataclass(frozen=True, slots=True)
class Stats:
    prompt_tokens: int
    completion_tokens: int
    prefill_ms: float
    generation_ms: float
    ttft_ms: float
    cache_hit_kind: CacheHitKind
    finish_reason: FinishReason
    cancelled: bool
    finish_key: bytes | None
    committed_tokens: int
    cache_delta: CacheDelta = field(default_factory=CacheDelta)
    stop_sequence: str | None = None
    context_full: bool = False
    """Beyond the core API: the reply stopped because the sequence's context is full (its
    ``finish_reason`` is ``length``), not because ``response_tokens`` was reached."""
    reuse: Reuse = field(default_factory=Reuse)
    drafted_tokens: int = 0
    """Beyond the core API: draft tokens speculative decoding pushed for this reply."""
    accepted_tokens: int = 0
    """Beyond the core API: of those, the ones the model agreed with (part of the reply)."""


@dataclass(frozen=True, slots=True)
class PrefillProgress:
    """Beyond the core API: while a prompt is read, after each prefill slice (and once at admission):
    ``done`` of ``total`` prompt tokens are in the sequence's KV (restored ones included)."""

    done: int
    total: int


@dataclass(frozen=True, slots=True)
class Token:
    text: str


@dataclass(frozen=True, slots=True)
class TokenId:
    id: int


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingEnd:
    signature: bytes


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    full: str


@dataclass(frozen=True, slots=True)
class Done:
    stats: Stats


@dataclass(frozen=True, slots=True)
class Error:
    reason: str
    code: str = "engine_error"


Event = (
    Token | TokenId | ThinkingDelta | ThinkingEnd | ToolCallDelta | ToolCallEnd | PrefillProgress
    | Done | Error
)


@dataclass(frozen=True, slots=True)
class CompletionResult:
    reply: str
    generated: tuple[int, ...]
    context_tokens: tuple[int, ...]
    committed_tokens: int
    finish_key: bytes | None
    cache_hit_kind: CacheHitKind
    finish_reason: FinishReason
    cache_delta: CacheDelta
    stats: Stats
    stop_sequence: str | None = None


@dataclass(frozen=True, slots=True)
class PrefillResult:
    context_tokens: tuple[int, ...]
    committed_tokens: int
    finish_key: bytes | None
    cache_hit_kind: CacheHitKind
    cache_delta: CacheDelta


@dataclass(frozen=True, slots=True)
class LastCacheHit:
    kind: CacheHitKind
    prefix_len: int


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    path: str
    status: str
    phase: str
    pending_len: int
    last_cache_hit: LastCacheHit | None
    backend: str
    context_size: int
    n_seq_max: int
    available_seqs: int
    quant_type: str
    quant_bits: int
    quant_tag: str
    tier: str
    fingerprint: str
    effective_fingerprint: str
    loaded_at: float
    vram_estimate_b: int
    memory: str = "attention"
    """The model's memory type (``MemoryCaps.kind``): attention, sliding_window, recurrent, hybrid."""
    memory_reuse: str = ""
    """What reuse applies to it, in a user's words (``MemoryCaps.reuse_words``)."""
    kv_cells: str = ""
    """Its KV cell types and why they were chosen (``app.engine.llama.kv_calibration``), in words."""


SlotState = Literal["free", "prefilling", "generating", "pinned", "reading_ahead"]
"""``reading_ahead``: a background ``prefill_only`` (type-ahead) reads a draft into the slot."""


@dataclass(frozen=True, slots=True)
class SlotInfo:
    """One seq slot as the scheduler monitor shows it."""

    seq_id: int
    state: SlotState
    session_id: str | None
    num_tokens: int
    num_drafted: int = 0
    num_accepted: int = 0
    """The running request's speculation counters (see ``Stats.drafted_tokens``)."""
    draft_length: int = 0
    """Draft tokens the running request's last decode pushed (its adaptive draft length)."""


@dataclass(frozen=True, slots=True)
class TickInfo:
    """Composition of one tick: how many prefill and decode tokens went into the batch."""

    num_prefill_tokens: int
    num_decode_rows: int
    duration_ms: float
    num_draft_rows: int = 0


@dataclass(frozen=True, slots=True)
class ReuseRecord:
    """What one finished request reused (its ``Stats.reuse``), for the dashboards."""

    session_id: str | None
    prompt_tokens: int
    reuse: Reuse
    cache_hit_kind: CacheHitKind
    finished_at: float  # unix seconds


@dataclass(frozen=True, slots=True)
class SchedulerSnapshot:
    """Lock-free observability record, replaced whole after every tick (docs/design.md §2)."""

    phase: str = "idle"
    pending_len: int = 0
    last_cache_hit: LastCacheHit | None = None
    slots: tuple[SlotInfo, ...] = ()
    recent_ticks: tuple[TickInfo, ...] = ()
    num_tokens_generated: int = 0
    recent_reuse: tuple[ReuseRecord, ...] = ()
    """The last requests' reuse records, newest last (beyond the core API)."""
    speculative: bool = False
    """Speculative decoding is on for this model (its setting, and its memory allows it)."""
    num_drafted: int = 0
    num_accepted: int = 0
    """Draft tokens pushed and accepted since the model loaded (beyond the core API)."""
    draft_model: str | None = None
    """The id of the attached draft model (``Model.use_draft``), if any (beyond the core API)."""
    draft_max: int = 0
    """The most draft tokens a decode row carries unless a request says otherwise
    (``ModelConfig.draft_max``; the adaptive length is at most this; beyond the core API)."""
