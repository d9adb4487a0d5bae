"""Per-request state (owned by the scheduler thread) and the text scanners it feeds.

``Request`` keeps counters, not phases (STYLE §5): ``prefill_cursor`` holds the tokens still
to push, ``context_tokens`` the tokens already in the seq's KV cells. ``StopScanner`` holds
back enough text that a stop string spanning tokens is still cut; ``SpanTracker`` routes
tokens into thinking / tool-call spans by matching their markers as token sequences.
"""

from __future__ import annotations

import codecs
import enum
import hashlib
import hmac
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.cache.keys import KeyMeta
from app.engine.backend import SamplingParams
from app.engine.events import CacheHitKind, Event, FinishReason


class Mode(enum.Enum):
    COMPLETE = "complete"
    STREAM = "stream"
    PREFILL_ONLY = "prefill_only"


@dataclass(slots=True)
class RequestOptions:
    """Validated request options (SPEC §1)."""

    response_tokens: int
    sampling: SamplingParams
    parent_key: bytes | None = None
    stop_sequences: tuple[str, ...] = ()
    thinking: bool = False
    thinking_budget_tokens: int | None = None
    session_id: str | None = None
    ignore_eos: bool = False
    """Beyond SPEC: keep generating past end-of-generation (benchmarks, like llama-server's)."""


class StopScanner:
    """First-match-by-list-order stop strings over streamed text, with hold-back.

    ``feed`` returns text safe to emit now; up to ``max_len - 1`` characters are held so a
    stop string spanning several tokens is still found and removed.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.pending = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        if not self.stops:
            return text
        self.pending += text
        for stop in self.stops:
            idx = self.pending.find(stop)
            if idx >= 0:
                self.matched = stop
                out, self.pending = self.pending[:idx], ""
                return out
        if len(self.pending) <= self.hold:
            return ""
        cut = len(self.pending) - self.hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class TextDecoder:
    """Incremental UTF-8 decoding of token pieces (a token may hold half a character)."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        return self._dec.decode(piece)

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)


class Span(enum.Enum):
    TEXT = "text"
    THINKING = "thinking"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class MarkerTokens:
    open: tuple[int, ...]
    close: tuple[int, ...]


class SpanTracker:
    """Routes generated tokens into text / thinking / tool-call spans.

    Markers are token sequences; tokens that could still be the start of a marker are held
    until they either complete it (swallowed, span switches) or cannot (released as content).
    ``push`` returns ``[(span, tokens), ...]`` plus transition events as ``(span, None)``
    pairs: ``(THINKING, None)`` after a thinking close, ``(TOOL, None)`` after a tool close,
    and opening a span is reported as ``("open", span)`` via ``opened``.
    """

    def __init__(self, thinking: MarkerTokens | None, tool: MarkerTokens | None) -> None:
        self.markers = {Span.THINKING: thinking, Span.TOOL: tool}
        self.span = Span.TEXT
        self.held: list[int] = []

    def _candidates(self) -> list[tuple[tuple[int, ...], Span | None]]:
        """Markers that matter in the current span: (tokens, span it leads to)."""
        if self.span is Span.TEXT:
            return [(m.open, s) for s, m in self.markers.items() if m is not None and m.open]
        marker = self.markers[self.span]
        assert marker is not None
        return [(marker.close, None)]

    def push(self, token: int) -> list[tuple[Span, list[int] | None]]:
        """Feed one token; returns content chunks and span transitions in order.

        A transition is ``(new_span, None)``: entering THINKING/TOOL, or leaving to TEXT
        (then ``new_span`` is TEXT and the closed span was the previous one).
        """
        self.held.append(token)
        out: list[tuple[Span, list[int] | None]] = []
        for seq, target in self._candidates():
            n = len(seq)
            if len(self.held) >= n and tuple(self.held[-n:]) == seq:
                content = self.held[:-n]
                if content:
                    out.append((self.span, content))
                self.held = []
                self.span = target if target is not None else Span.TEXT
                out.append((self.span, None))
                return out
        keep = self._longest_partial()
        release = self.held[: len(self.held) - keep]
        self.held = self.held[len(self.held) - keep :]
        if release:
            out.append((self.span, release))
        return out

    def _longest_partial(self) -> int:
        best = 0
        for seq, _ in self._candidates():
            for k in range(min(len(seq) - 1, len(self.held)), 0, -1):
                if tuple(self.held[-k:]) == seq[:k]:
                    best = max(best, k)
                    break
        return best

    def flush(self) -> list[int]:
        held, self.held = self.held, []
        return held

    def force_text(self) -> None:
        """Leave the current span without a close marker (thinking budget reached)."""
        self.span = Span.TEXT


@dataclass(slots=True)
class Request:
    """One in-flight request. Mutated only on the scheduler thread."""

    ref: int
    mode: Mode
    seq_id: int
    prompt_tokens: list[int]
    options: RequestOptions
    emit: Callable[[Event], None]
    meta: KeyMeta | None
    sampler: Any = None
    context_tokens: list[int] = field(default_factory=list)
    prefill_cursor: list[int] = field(default_factory=list)
    cold_save_remaining: list[int] | None = None
    generated: list[int] = field(default_factory=list)
    last_save_at: int = 0
    cache_hit_kind: CacheHitKind = "cold"
    cache_hit_prefix_len: int = 0
    cache_created: int = 0
    finish_key: bytes | None = None
    cancel_pending: bool = False
    context_full: bool = False
    finishing: bool = False
    finish_reason: FinishReason | None = None
    error: Exception | None = None
    submitted_at: float = field(default_factory=time.perf_counter)
    prefill_started_at: float | None = None
    prefill_done_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    result_future: Any = None
    weights_epoch: int = 0
    """Which adapter set the request's KV is computed with (Scheduler.weights_epoch)."""
    share_from: tuple[int, int] | None = None
    """(donor request ref, n tokens): waiting for another in-flight request to prefill a
    shared prompt head, which is then shared into this seq instead of prefilled again."""
    # text pipeline
    spans: SpanTracker | None = None
    stop: StopScanner = field(default_factory=lambda: StopScanner(()))
    text_decoder: TextDecoder = field(default_factory=TextDecoder)
    reply_parts: list[str] = field(default_factory=list)
    thinking_decoder: TextDecoder = field(default_factory=TextDecoder)
    thinking_bytes: bytearray = field(default_factory=bytearray)
    thinking_count: int = 0
    thinking_capped: bool = False
    tool_decoder: TextDecoder = field(default_factory=TextDecoder)
    tool_parts: list[str] = field(default_factory=list)
    tool_in_string: bool = False
    tool_escape: bool = False

    def mark(self, reason: FinishReason) -> None:
        """Finish at the end of this tick (the seed's ``finishing`` flag)."""
        self.finishing = True
        self.finish_reason = reason

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_tokens)

    @property
    def num_computed_tokens(self) -> int:
        return len(self.context_tokens)

    @property
    def num_generated(self) -> int:
        return len(self.generated)

    @property
    def is_prefilling(self) -> bool:
        return bool(self.prefill_cursor) or self.share_from is not None

    @property
    def wants_decode(self) -> bool:
        return not self.is_prefilling and self.mode is not Mode.PREFILL_ONLY and not self.finishing

    @property
    def in_tool_syntax(self) -> bool:
        """Inside a tool-call span but outside a JSON string: sample greedily."""
        return self.spans is not None and self.spans.span is Span.TOOL and not self.tool_in_string

    def track_tool_text(self, text: str) -> None:
        """Follow JSON string state through tool-call text (payload strings vs syntax)."""
        for ch in text:
            if self.tool_escape:
                self.tool_escape = False
            elif ch == "\\" and self.tool_in_string:
                self.tool_escape = True
            elif ch == '"':
                self.tool_in_string = not self.tool_in_string

    def thinking_signature(self, key: bytes | None) -> bytes:
        if not key:
            return b""
        return hmac.new(key, bytes(self.thinking_bytes), hashlib.sha256).digest()
