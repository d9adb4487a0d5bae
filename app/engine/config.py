"""ModelConfig: how a model is loaded and scheduled. Validated at construction, then frozen.

The scheduler thread reads the config every tick while other threads hold the same object,
so it is a frozen dataclass: a different setting means a new ``ModelConfig`` (and a reload),
never a field changed under a running model. Every bad value is an ``InvalidConfig``
(code ``invalid_request``, also a ``ValueError``) naming the field.

Context sizes: ``n_ctx`` (the engine API's name; ``n_ctx_per_seq`` is the same number under a clearer
name) is what ONE sequence holds. llama.cpp's own ``n_ctx`` is the total over all sequences,
``n_ctx_total = n_ctx × n_seq_max``, and is a ``uint32_t`` padded to 256 cells.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike, cpu_count, fspath
from types import MappingProxyType
from typing import Any, Literal

from app.cache.policy import CachePolicy, PolicyError
from app.engine.errors import InvalidConfig

Tier = Literal["ram", "ram_file", "disk"]
TIERS: tuple[str, ...] = ("ram", "ram_file", "disk")

KV_CACHE_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")
"""Cell types llama.cpp accepts for ``type_k`` / ``type_v`` (``llama_handles.KV_TYPES``)."""

DEFAULT_TYPE_K = "q8_0"
DEFAULT_TYPE_V = "f16"
"""The default KV cell types (``ModelConfig.type_v`` says why); the backend and the
benchmarks' raw loop take them from here."""

LLAMA_MAX_SEQ = 256
"""``LLAMA_MAX_SEQ`` in llama-cparams.h: a context with more sequences fails to load."""

MAX_CTX_TOTAL = 2**32 - 256
"""llama.cpp pads its total ``n_ctx`` (a ``uint32_t``) up to a multiple of 256.

NOTE: ``n_ctx × n_seq_max`` of 2**32 or more wrapped silently: n_ctx=2**30 with four
sequences handed llama.cpp 0, it fell back to the model's training context (2,048 cells for
the tiny test model) while ``model_info`` still reported 2**30, and prompts past 2,048
tokens failed with ``decode_failed`` instead of ``context_overflow``."""

MAX_N_BATCH = 1 << 20
"""The tick batch is preallocated (about 25 bytes per row, plus a pointer array built in
Python), so an absurd ``n_batch`` is refused instead of exhausting memory at load."""

MAX_THREADS = 512
"""``GGML_MAX_N_THREADS``."""

MAX_DRAFT = 64
"""The longest draft a decode row may carry (``draft_max``)."""


@dataclass(frozen=True, slots=True)
class Markers:
    """A span's opening and closing text, matched as token sequences by the scheduler."""

    open: str
    close: str

    def __post_init__(self) -> None:
        for name in ("open", "close"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidConfig(f"a marker's {name} text must be a non-empty string, got {value!r}")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """How to load and schedule one model (docs/design.md §1). Frozen: build a new one to change it."""

    path: str
    n_ctx: int = 4096
    """Context length per sequence: what one conversation can hold (``n_ctx_per_seq``)."""
    n_seq_max: int = 4
    n_batch: int = 512
    n_gpu_layers: int = 0
    n_threads: int | None = None
    n_threads_batch: int | None = None
    """Beyond the core API: llama.cpp's threads for a ubatch of more than one token (prefill, and a
    tick of several sequences); ``None``: ``n_threads``. Not in ``ctx_params_hash``: the KV
    bytes and logits are the same for every thread count (``hearth bench --only KV``)."""
    n_threads_background: int | None = None
    """Beyond the core API: llama.cpp's threads for a tick that only reads ahead (type-ahead,
    ``app.engine.scheduling.read_ahead``). Such a tick runs only while no request has anything to compute,
    so it may use the cores that requests leave to the rest of the machine; ``None``: every
    core (up to 8), never fewer than ``n_threads_batch``. Not in ``ctx_params_hash``: the thread
    count changes no KV byte and no logit (``tests/integration/backend/test_exact_kv.py``).
    NOTE: with one thread for requests (B11's setting on this 2-core machine, where the GUI
    thread needs the other core when Enter is pressed), one thread read a pasted text at
    9-16 ms a token, too slow to read 1,900 tokens while a 12-word question is typed."""
    n_ubatch: int | None = None
    """Beyond the core API: llama.cpp's physical batch, the most rows one graph computes; ``None``:
    ``min(n_batch, 512)``. Not in ``ctx_params_hash``: with the default KV types every ubatch
    shape gives the same KV bytes and logits (``hearth bench --only KV``)."""
    policy: CachePolicy | dict[str, Any] | None = None
    tier: Tier = "ram"
    thinking_markers: Markers | tuple[str, str] | None = None
    tool_call_markers: Markers | tuple[str, str] | None = None
    prefill_chunk_size: int | None | Literal["default"] = "default"
    prefill_seqs_per_tick: int | None = 1
    """Beyond the seed: while replies are streaming, how many prefilling requests get a slice
    in one tick, the shortest remaining prefill first (``None``: every prefilling request, the
    seed's rule, docs/design.md §2). A burst of short prompts that arrives while nothing streams is
    prefilled together, so its replies decode in full batches from the first tick; a burst
    whose tick would cost more than one chunk of a fresh prompt (follow-ups deep in long
    conversations) goes one at a time too (``app.engine.batch``).
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
    read_first: bool = True
    """Beyond the seed: a prompt whose last slice shares a tick with decode rows is read in a
    ``llama_decode`` of its own, its first token sampled and streamed, and then the decode rows
    and that token go in a second one (``Scheduler._read_first``); ``False``: one
    ``llama_decode`` per tick, the seed's rule (docs/design.md §2).
    NOTE: with a KV stream per sequence llama.cpp splits such a batch into two ubatches or
    more anyway (equal rows per sequence), so the two calls cost what the one did, and the
    first token no longer waits for the decode rows' ubatch. B2's follow-ups (17-21 tokens
    beside 3 decode rows), paired rounds: median TTFT 161 -> 136 ms, wall unchanged. B9's
    two-client trace: median 1.07 x, its clients' turns after the restart served in another
    order (docs/history/benchmarks-2026-11-29-to-12-05.md, 2026-12-04 10:12)."""
    cache_enabled: bool = True
    flash_attn: bool = True
    """On by default: a quantized V cache needs it, the one-chunk path that keeps differing K/V
    types exact is its kernel's, and with it the KV rows of a state are cell-major
    (``app.cache.blobs.seqstate`` can cut them). NOTE (docs/design.md §3): off, V is stored transposed and
    attention is two matmuls whose kernel depends on the rows a sequence has in the ubatch:
    llamafile's tinyBLAS (q8_0 x q8_0 for K·Q, f16 x f16 for V·softmax) from two rows, ggml's
    vec_dot from one, and they accumulate in other orders. A prompt prefilled whole and the
    same prompt whose last tokens went one a tick (as a restored prefix's last prompt token
    always does) end on other logits (by up to 0.63 on SmolLM2); decode rows next to other
    sequences, one row per sequence, stay exact. So off is no default; its KV is keyed apart
    (``ctx_params_hash``)."""
    type_k: str = "auto"
    type_v: str = "auto"
    """KV cell types. ``"auto"`` (both, the default): the fastest exact pair on this machine,
    found by a calibration (``app.engine.llama.kv_calibration``), q8_0 K + f16 V until one has run.
    NOTE (docs/design.md §3): llama.cpp's CPU
    flash-attention kernel has three accumulation paths: 64-cell tiles for ubatches of >= 64
    query rows, split-KV for one-token ubatches over >= 512 cells, and one chunk per query row
    otherwise. The tiled and split-KV paths are taken only when K and V are both f16 (or both
    f32); with f16 K and V the same prompt prefilled in other chunk sizes, or decoded next to
    other sequences, moves its logits (by up to 0.6-0.9 on SmolLM2). Any pair of differing
    types stays on the one-chunk path for every ubatch shape, where each query row walks its
    own stream's cells in order, so every prefill chunking and batching gives bit-identical
    logits. q8_0 K + f16 V is the fastest such pair (no V dequantizing per cell: prefill of
    2,000 tokens 0.71x, a tick of 4 x 700-token streams 0.81x the time of q8_0 K+V, at 18,460
    bytes a token on SmolLM2 instead of 12,813; docs/history/benchmarks-2026-11-29-to-12-05.md, "KV cell types").
    NOTE: an f16 V keeps the low bits of each token's V projection, so its exactness also
    rests on the model's weight kernels giving a row the same projection whatever the ubatch's
    row count. Quantized weights (Q4_0, Q4_1, Q8_0 tried on SmolLM2, Q8_0 on the tiny test
    model) do; f32 layer weights did not (the tiny model's old f32 weights moved a decoded
    row's V cells next to other sequences), and there only a quantized V (q8_0 K+V) rounds
    the difference away. ``"f16"`` for both remains a choice, not bit-exact across batch
    shapes — unless llama.cpp's flash attention is batch-invariant (``weight_kernels.FA_ENV``,
    Hearth's own build), which makes f16 K+V one of the exact pairs the calibration may pick.
    Each sequence also has a KV stream of its own (``kv_unified = false`` in the
    backend), so its cells are always in position order. The cell types are part of
    ``ctx_params_hash``: rows saved under other types are never restored into this context."""
    swa_full: bool = True
    """Sliding-window models (Gemma 3): keep every cell of the windowed layers, as if they
    attended to everything (llama.cpp's ``swa_full``). On by default, for exactness: without it
    a windowed layer's cache is only ``n_swa + n_ubatch`` cells (padded to 256) that wrap
    around, so a sequence's cells leave position order, and the CPU flash-attention kernel
    accumulates in cell order. NOTE (docs/design.md §8, tiny gemma3, window 16, 750-token prompt): off,
    a state restored from a save and decoded next to the original matched it in 19 of 40 steps
    (max |Δlogit| 0.06); on, 40 of 40. Every prefill chunking was bit-identical either way.
    The price is memory: Gemma 3 4B (34 layers, 28 windowed, window 1024) at 8,192 tokens ×
    4 sequences holds 3.5 GB of q8_0 K + f16 V with it and 1.2 GB without. ``False`` is the
    labelled choice "smaller KV, not bit-identical once a conversation outgrows the window
    cache"; Hearth then still never trims a live sequence past what its window cache holds
    (``Backend.can_trim``)."""
    speculative: bool = True
    """Beyond the core API: speculative decoding without a draft model (``app.engine.speculation``):
    a decoding sequence proposes the tokens that followed the latest earlier occurrence of
    its last few tokens, and one decode verifies them. Exact (greedy replies bit-identical on
    and off; sampled ones follow the same distribution, and the same seed gives the same
    reply) and adaptive (a sequence drafts only while its acceptance pays for the rows), so
    it is on by default; a request overrides it (``speculative=``). Off regardless for
    models whose memory cannot drop a tail of a sequence (recurrent, hybrid)."""
    draft_max: int = 16
    """Beyond the core API: the most draft tokens one decode row carries (0: no drafting). The
    adaptive length stays below it. NOTE: a row costs ~4 ms on SmolLM2 (2 threads), so 16
    rows pay only at ~95 % acceptance, which copied text reaches (``tick_costs``)."""
    thinking_signing_key: bytes | None = None
    chat_template: str | None = None
    """Beyond the core API: the chat template to render chats with instead of the GGUF's (a built-in
    format's, ``app.chat_formats``, or one the user pasted); ``None``: the GGUF's own, else a
    format chosen by the model's architecture and vocabulary, else none (chats are refused
    with words, ``app.engine.chat_template.resolve_chat_format``)."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: the normalised values are set once, here
        set_(self, "path", _path(self.path))
        for name, hi in (("n_ctx", MAX_CTX_TOTAL), ("n_seq_max", LLAMA_MAX_SEQ), ("n_batch", MAX_N_BATCH)):
            set_(self, name, _int(name, getattr(self, name), lo=1, hi=hi))
        if _pad256(self.n_ctx) * self.n_seq_max > MAX_CTX_TOTAL:
            raise InvalidConfig(
                f"ModelConfig: n_ctx × n_seq_max = {self.n_ctx} × {self.n_seq_max} is more than "
                f"llama.cpp can address ({MAX_CTX_TOTAL:,} cells in all); lower n_ctx or n_seq_max"
            )
        set_(self, "n_gpu_layers", _int("n_gpu_layers", self.n_gpu_layers, lo=-1, hi=2**31 - 1))
        for name in ("n_threads", "n_threads_batch", "n_threads_background"):
            if getattr(self, name) is not None:
                set_(self, name, _int(name, getattr(self, name), lo=1, hi=MAX_THREADS))
        if self.n_ubatch is not None:
            set_(self, "n_ubatch", _int("n_ubatch", self.n_ubatch, lo=1, hi=self.n_batch))
        if self.tier not in TIERS:
            raise InvalidConfig(f"ModelConfig.tier must be one of {', '.join(TIERS)}, got {self.tier!r}")
        try:
            set_(self, "policy", CachePolicy.coerce(self.policy))
        except PolicyError as exc:
            raise InvalidConfig(f"ModelConfig.policy: {exc}") from None
        except TypeError as exc:  # a dict whose values CachePolicy cannot take
            raise InvalidConfig(f"ModelConfig.policy: {exc}") from None
        if self.prefill_chunk_size == "default":
            set_(self, "prefill_chunk_size", max(64, self.n_batch // 4))
        elif self.prefill_chunk_size is not None:
            set_(self, "prefill_chunk_size", _int("prefill_chunk_size", self.prefill_chunk_size, lo=1, hi=MAX_N_BATCH))
        if self.prefill_seqs_per_tick is not None:
            n = _int("prefill_seqs_per_tick", self.prefill_seqs_per_tick, lo=1, hi=LLAMA_MAX_SEQ)
            set_(self, "prefill_seqs_per_tick", n)
        gap = _int("decode_ticks_between_prefills", self.decode_ticks_between_prefills, lo=0, hi=2**31 - 1)
        set_(self, "decode_ticks_between_prefills", gap)
        set_(self, "draft_max", _int("draft_max", self.draft_max, lo=0, hi=MAX_DRAFT))
        for name in ("read_first", "cache_enabled", "flash_attn", "swa_full", "speculative"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidConfig(f"ModelConfig.{name} must be True or False, got {getattr(self, name)!r}")
        if (self.type_k == "auto") != (self.type_v == "auto"):
            raise InvalidConfig("ModelConfig: type_k and type_v are both \"auto\" or both a cell type")
        for name in ("type_k", "type_v"):
            if getattr(self, name) not in (*KV_CACHE_TYPES, "auto"):
                raise InvalidConfig(f"ModelConfig.{name} must be \"auto\" or one of {', '.join(KV_CACHE_TYPES)}")
        if self.type_v not in ("f16", "bf16", "f32", "auto") and not self.flash_attn:
            raise InvalidConfig(f"ModelConfig: a quantized V cache (type_v={self.type_v}) needs flash_attn=True")
        if self.thinking_signing_key is not None and not isinstance(self.thinking_signing_key, bytes):
            raise InvalidConfig("ModelConfig.thinking_signing_key must be bytes or None")
        set_(self, "thinking_markers", _markers("thinking_markers", self.thinking_markers))
        set_(self, "tool_call_markers", _markers("tool_call_markers", self.tool_call_markers))
        if not isinstance(self.extra, Mapping):
            raise InvalidConfig("ModelConfig.extra must be a mapping")
        set_(self, "extra", MappingProxyType(dict(self.extra)))

    @property
    def n_ctx_per_seq(self) -> int:
        """What ``n_ctx`` means: the tokens one sequence (one conversation) can hold."""
        return self.n_ctx

    @property
    def n_ctx_total(self) -> int:
        """The KV cells over all sequences: what llama.cpp calls ``n_ctx``."""
        return self.n_ctx * self.n_seq_max

    @property
    def cache_policy(self) -> CachePolicy:
        assert isinstance(self.policy, CachePolicy)
        return self.policy

    @property
    def chunk_size(self) -> int | None:
        assert self.prefill_chunk_size != "default"
        return self.prefill_chunk_size


def default_threads() -> int:
    """llama.cpp's threads when ``n_threads`` is not set: every core, up to 8."""
    return max(1, min(cpu_count() or 1, 8))


def request_threads(n_threads: int | None, n_threads_batch: int | None) -> int:
    """The most threads llama.cpp reads a request with (``ModelConfig.n_threads`` and
    ``n_threads_batch``, unset: their defaults)."""
    n = n_threads or default_threads()
    return max(n, n_threads_batch or n)


def _path(value: object) -> str:
    if isinstance(value, PathLike):
        value = fspath(value)
    if not isinstance(value, str) or not value or "\0" in value:
        raise InvalidConfig(f"ModelConfig.path must be a non-empty file path, got {value!r}")
    return value


def _int(name: str, value: object, *, lo: int, hi: int) -> int:
    """An int (not a bool, not a float) in ``lo..hi``."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise InvalidConfig(f"ModelConfig.{name} must be an integer, got {value!r}")
    result = operator.index(value)
    if not lo <= result <= hi:
        raise InvalidConfig(f"ModelConfig.{name} must be in {lo}..{hi:,}, got {result:,}")
    return result


def _pad256(n: int) -> int:
    return math.ceil(n / 256) * 256


def _markers(name: str, value: object) -> Markers | None:
    if value is None or isinstance(value, Markers):
        return value
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise InvalidConfig(f"ModelConfig.{name} must be (open, close) texts, got {value!r}")
    try:
        return Markers(*value)
    except InvalidConfig as exc:
        raise InvalidConfig(f"ModelConfig.{name}: {exc}") from None
