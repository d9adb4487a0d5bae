"""One in-flight request, as the scheduler thread sees it, and the records it reports from.

``Request`` keeps counters, not phases (STYLE §5): ``prefill_cursor`` holds the tokens still
to push, ``context_tokens`` the tokens already in the seq's KV cells, ``generated`` what was
sampled. Three small records hang off it: ``CacheAccount`` (what the cache gave and took),
``Timings`` (when each phase started) and its ``TextPipeline`` (``app.engine.streaming``:
everything between a sampled token and the text a caller sees). ``stats`` and ``outcome``
turn them into the frozen records that leave the thread.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from app.cache.keys import KeyMeta
from app.engine.backend import SamplingParams
from app.engine.cache_hooks import SaveReason
from app.engine.checkpoints import Checkpoints
from app.engine.events import (
    CacheDelta,
    CacheHitKind,
    CompletionResult,
    Event,
    FinishReason,
    PrefillResult,
    Reuse,
    Stats,
)
from app.engine.streaming import TextPipeline

Outcome = CompletionResult | PrefillResult
Priority = Literal["normal", "background"]
"""``prefill_only``'s priority (beyond the core API): ``background`` is type-ahead's lowest-priority
read of a draft (``app.engine.scheduling.read_ahead``)."""


class Mode(enum.Enum):
    COMPLETE = "complete"
    STREAM = "stream"
    PREFILL_ONLY = "prefill_only"


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """Validated request options (docs/design.md §1); they cross threads in an ``Admission``."""

    response_tokens: int
    sampling: SamplingParams
    parent_key: bytes | None = None
    stop_sequences: tuple[str, ...] = ()
    thinking: bool = False
    thinking_budget_tokens: int | None = None
    session_id: str | None = None
    ignore_eos: bool = False
    """Beyond the core API: keep generating past end-of-generation (benchmarks, like llama-server's)."""
    priority: Priority = "normal"
    """Beyond the core API: ``background`` for a ``prefill_only`` that must never get in the way
    (type-ahead, ``app.engine.scheduling.read_ahead``)."""
    speculative: bool | None = None
    """Beyond the core API: draft and verify tokens (``app.engine.speculation``); None: the model's
    setting (``ModelConfig.speculative``)."""
    draft_max: int | None = None
    """Beyond the core API: the most draft tokens one decode row may carry; None: the model's."""
    draft_model: str | None = None
    """Beyond the core API: the id of a loaded model with the same vocabulary that proposes the drafts
    (``app.engine.speculation.draft_model``; ``Model.use_draft`` attaches it); None: prompt lookup."""


@dataclass(slots=True)
class CacheAccount:
    """What the request reused at admission and what its saves added (``Stats.cache_delta``)."""

    hit_kind: CacheHitKind = "cold"
    num_reused: int = 0
    """Prompt tokens whose KV came from elsewhere (``cache_delta.read``)."""
    num_created: int = 0
    """The largest save beyond ``num_reused`` (``cache_delta.created``)."""
    last_save_at: int = 0
    """Context length at the last save (or restore): continued saves count from here."""
    finish_key: bytes | None = None
    reuse: Reuse = field(default_factory=Reuse)
    cold_after_first: int = 0
    """A cold save of the prompt's first this-many tokens, due once the first reply token is
    out (``Saver.cold_after_first``); 0: none (due, or made at a prefill stop instead)."""

    def reused(self, kind: CacheHitKind, num_tokens: int) -> None:
        """The seq starts out holding ``num_tokens`` prompt tokens taken from ``kind``."""
        self.hit_kind, self.num_reused, self.last_save_at = kind, num_tokens, num_tokens


@dataclass(slots=True)
class Timings:
    """``time.perf_counter()`` marks; ``Stats`` reports the spans between them."""

    submitted_at: float = field(default_factory=time.perf_counter)
    prefill_started_at: float | None = None
    prefill_done_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None


@dataclass(slots=True)
class Request:
    """One in-flight request. Mutated only on the scheduler thread."""

    ref: int
    mode: Mode
    seq_id: int
    options: RequestOptions
    emit: Callable[[Event], None]
    text: TextPipeline
    result: Future[Any]
    meta: KeyMeta | None
    """The cache identity the request was admitted with (adapters may change meanwhile)."""
    weights_epoch: int = 0
    """Which adapter set the request's KV is computed with (``Admitter.weights_epoch``)."""
    sampler: Any = None
    prompt_tokens: list[int] = field(default_factory=list)
    context_tokens: list[int] = field(default_factory=list)
    prefill_cursor: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    stops: dict[int, SaveReason | None] = field(default_factory=dict)
    """Context lengths where the prefill pauses between two slices: to save the seq there
    (the cold split) or, with None, so that a request waiting for this one's head can copy
    it whole (``app.engine.scheduling.shares``)."""
    checkpoints: Checkpoints | None = None
    """For a model whose states cannot be cut: the prefill also pauses and saves at these
    (``app.engine.checkpoints``); None for the others, or with the cache off."""
    share_from: tuple[int, int] | None = None
    """(donor request ref, n tokens): waiting for another in-flight request to prefill a
    shared prompt head, which is then shared into this seq instead of prefilled again."""
    cache: CacheAccount = field(default_factory=CacheAccount)
    times: Timings = field(default_factory=Timings)
    on_reading: Callable[[], None] | None = None
    """``Admission.on_reading``, until the scheduler has called it (``Scheduler.decode``)."""
    finishing: bool = False
    finish_reason: FinishReason | None = None
    error: Exception | None = None
    context_full: bool = False
    drafted: tuple[int, ...] = ()
    """Draft tokens in the seq's KV after ``context_tokens``, not committed: the next tick
    verifies them (``app.engine.speculation``)."""
    spec: Any = None
    """The request's ``speculation.SeqSpec`` once it may draft."""
    num_drafted: int = 0
    num_accepted: int = 0
    """Draft tokens pushed, and drafts the model agreed with that became part of the reply."""
    ended: bool = False
    """Its one ``Done`` or ``Error`` has been sent."""
    read_ahead_from: int | None = None
    """A background request: its seq's tokens from this index on are read ahead (type-ahead
    computed them), those before it came from a real request or the cache."""

    def mark(self, reason: FinishReason) -> None:
        """Finish at the end of this tick (the seed's ``finishing`` flag)."""
        self.finishing = True
        self.finish_reason = reason

    def fail(self, error: Exception) -> None:
        """End with ``Error`` at the end of this tick; the first failure is the one reported."""
        if self.error is None:
            self.error = error
        self.finishing = True

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
    def num_to_prefill(self) -> int:
        """Prompt tokens still to push."""
        return len(self.prefill_cursor)

    def stop_at(self, n: int, reason: SaveReason | None = None) -> None:
        """Pause the prefill when the seq holds ``n`` tokens (see ``stops``); ignored unless
        ``n`` is ahead, within the prompt. A save is never replaced by a plain pause."""
        held = len(self.context_tokens)
        ahead = held < n <= held + len(self.prefill_cursor)
        if ahead and (reason is not None or n not in self.stops):
            self.stops[n] = reason

    def next_slice_len(self, cap: int) -> int:
        """How many cursor tokens the next slice may take: at most ``cap``, never past a stop
        or a checkpoint."""
        held = len(self.context_tokens)
        ahead = [n - held for n in self.stops if n > held]
        if self.checkpoints is not None:
            point = self.checkpoints.next_after(held)
            if point is not None:
                ahead.append(point - held)
        return min(cap, len(self.prefill_cursor), *ahead)

    def save_reason_here(self) -> SaveReason | None:
        """The save due now that the seq holds ``context_tokens`` (a stop or a checkpoint)."""
        n = len(self.context_tokens)
        reason = self.stops.pop(n, None)
        if reason is None and self.checkpoints is not None and n in self.checkpoints:
            reason = "cold"
        return reason

    @property
    def is_background(self) -> bool:
        return self.options.priority == "background"

    @property
    def is_prefilling(self) -> bool:
        return bool(self.prefill_cursor) or self.share_from is not None

    @property
    def wants_decode(self) -> bool:
        return not self.is_prefilling and self.mode is not Mode.PREFILL_ONLY and not self.finishing

    def stats(self) -> Stats:
        times = self.times
        end = times.finished_at or time.perf_counter()
        started = times.prefill_started_at or times.submitted_at
        prefill_done = times.prefill_done_at or end
        first = times.first_token_at
        return Stats(
            prompt_tokens=self.num_prompt_tokens,
            completion_tokens=self.num_generated,
            prefill_ms=(prefill_done - started) * 1000,
            generation_ms=(end - prefill_done) * 1000 if first is not None else 0.0,
            ttft_ms=(first - times.submitted_at) * 1000 if first is not None else 0.0,
            cache_hit_kind=self.cache.hit_kind,
            finish_reason=self.finish_reason or "stop",
            cancelled=self.finish_reason == "cancelled",
            finish_key=self.cache.finish_key,
            committed_tokens=self.num_computed_tokens,
            cache_delta=CacheDelta(self.cache.num_reused, self.cache.num_created),
            stop_sequence=self.text.stop_sequence,
            context_full=self.context_full,
            reuse=self.cache.reuse,
            drafted_tokens=self.num_drafted,
            accepted_tokens=self.num_accepted,
        )

    def outcome(self, stats: Stats) -> Outcome:
        """What ``complete`` / ``prefill_only`` return."""
        if self.mode is Mode.PREFILL_ONLY:
            return PrefillResult(
                context_tokens=tuple(self.context_tokens),
                committed_tokens=self.num_computed_tokens,
                finish_key=self.cache.finish_key,
                cache_hit_kind=self.cache.hit_kind,
                cache_delta=stats.cache_delta,
            )
        return CompletionResult(
            reply=self.text.reply,
            generated=tuple(self.generated),
            context_tokens=tuple(self.context_tokens),
            committed_tokens=self.num_computed_tokens,
            finish_key=self.cache.finish_key,
            cache_hit_kind=self.cache.hit_kind,
            finish_reason=stats.finish_reason,
            cache_delta=stats.cache_delta,
            stats=stats,
            stop_sequence=stats.stop_sequence,
        )
