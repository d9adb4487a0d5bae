"""ModelConfig: how a model is loaded and scheduled. Validated at construction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.cache.policy import CachePolicy

Tier = Literal["ram", "ram_file", "disk"]
TIERS: tuple[str, ...] = ("ram", "ram_file", "disk")


@dataclass(frozen=True, slots=True)
class Markers:
    """A span's opening and closing text, matched as token sequences by the scheduler."""

    open: str
    close: str


@dataclass(slots=True)
class ModelConfig:
    path: str
    n_ctx: int = 4096
    """Context length per sequence: what one conversation can hold."""
    n_seq_max: int = 4
    n_batch: int = 512
    n_gpu_layers: int = 0
    n_threads: int | None = None
    policy: CachePolicy | dict[str, Any] | None = None
    tier: Tier = "ram"
    thinking_markers: Markers | tuple[str, str] | None = None
    tool_call_markers: Markers | tuple[str, str] | None = None
    prefill_chunk_size: int | None | Literal["default"] = "default"
    prefill_seqs_per_tick: int | None = 1
    """Beyond the seed: while replies are streaming, how many prefilling requests get a slice
    in one tick, the shortest remaining prefill first (``None``: every prefilling request, the
    seed's rule, SPEC §2). A burst that arrives while nothing streams is prefilled together,
    so its replies decode in full batches from the first tick.
    NOTE: on a CPU a tick costs about 5 ms + 3.9 ms per token (SmolLM2, 2 threads), so
    co-batching prefills saves almost nothing while it makes every first token wait for the
    others' prompts: four 20-token turns in one tick take 363 ms, one at a time 85 ms each."""
    decode_ticks_between_prefills: int = 1
    """Beyond the seed: while replies are streaming, a tick that prefills is followed by this
    many decode-only ticks (0: prefill ticks may run back to back).
    NOTE: a prefill tick is long (~100 ms for a 20-token turn next to a 25 ms decode tick).
    Back to back, a client that sends its next turn as soon as a reply ends arrives just as
    another turn's prefill tick starts and waits for all of it; with a decode tick between
    them it waits for that short tick instead. Measured on B2 (paired runs): median TTFT
    224-241 ms -> 140-153 ms at the same wall time. Streams also get two tokens per prefill
    tick instead of one during a burst of prompts; a long prompt's prefill takes one decode
    tick longer per chunk (~3 %)."""
    cache_enabled: bool = True
    flash_attn: bool = True
    """On by default: a quantized V cache needs it, and with it the KV rows of a state are
    cell-major (``app.cache.seqstate`` can cut them)."""
    type_k: str = "q8_0"
    type_v: str = "q8_0"
    """KV cell types. NOTE (SPEC §3): with an f16 V cache the CPU flash-attention kernel picks
    its accumulation path by ubatch shape (one f16 chunk below 64 query rows, 64-cell tiles at
    and above, split-KV for one-token ubatches over >= 512 cells), so the same prompt
    prefilled in other chunk sizes, or decoded next to other sequences, moves its logits (by
    up to 0.6-0.9 on SmolLM2). A quantized V pins it to one path: with q8_0 every chunking and
    batching tried was bit-identical, and the KV is about half the size. ``"f16"`` remains a
    choice, documented as not bit-exact across batch shapes. Each sequence also has a KV
    stream of its own (``kv_unified = false`` in the backend), so its cells are always in
    position order."""
    thinking_signing_key: bytes | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise ValueError("ModelConfig.path must be a non-empty string")
        for name in ("n_ctx", "n_seq_max", "n_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive integer, got {value!r}")
        if self.n_gpu_layers < 0 and self.n_gpu_layers != -1:
            raise ValueError("ModelConfig.n_gpu_layers must be >= 0 (or -1 for all)")
        if self.n_threads is not None and self.n_threads < 1:
            raise ValueError("ModelConfig.n_threads must be >= 1")
        if self.tier not in TIERS:
            raise ValueError(f"ModelConfig.tier must be one of {', '.join(TIERS)}, got {self.tier!r}")
        self.policy = CachePolicy.coerce(self.policy)
        if self.prefill_chunk_size == "default":
            self.prefill_chunk_size = max(64, self.n_batch // 4)
        elif self.prefill_chunk_size is not None and (
            not isinstance(self.prefill_chunk_size, int) or self.prefill_chunk_size < 1
        ):
            raise ValueError("ModelConfig.prefill_chunk_size must be a positive integer or None")
        if self.prefill_seqs_per_tick is not None and (
            not isinstance(self.prefill_seqs_per_tick, int) or self.prefill_seqs_per_tick < 1
        ):
            raise ValueError("ModelConfig.prefill_seqs_per_tick must be a positive integer or None")
        if not isinstance(self.decode_ticks_between_prefills, int) or self.decode_ticks_between_prefills < 0:
            raise ValueError("ModelConfig.decode_ticks_between_prefills must be an integer >= 0")
        self.thinking_markers = _coerce_markers(self.thinking_markers)
        self.tool_call_markers = _coerce_markers(self.tool_call_markers)

    @property
    def cache_policy(self) -> CachePolicy:
        assert isinstance(self.policy, CachePolicy)
        return self.policy

    @property
    def chunk_size(self) -> int | None:
        assert self.prefill_chunk_size != "default"
        return self.prefill_chunk_size


def _coerce_markers(value: Markers | tuple[str, str] | None) -> Markers | None:
    if value is None or isinstance(value, Markers):
        return value
    open_, close = value
    return Markers(open_, close)
