"""Admission: an ``Admission`` becomes a running ``Request`` on a seq, or waits in ``pending``.

Three paths (``AdmissionPath``):

* ``STICKY`` — the request's session pins a seq: when its tokens are a prefix of the prompt,
  prefill only the new tokens (docs/design.md §2); when the prompt diverges from them (regenerate,
  edit, branch), beyond the seed, keep the common prefix and prefill the rest — unless a live
  seq or the cache holds a longer head (``app.engine.scheduling.reuse``);
* ``CONTINUE`` — ``continue_session``: the session's seq plus the caller's suffix, no prefix
  check (the seed's ``continue/3``);
* ``NEW`` — a free seq (or one an idle session gives up, least recently used first). The
  seq starts from the longest head already computed elsewhere: another live seq
  (``app.engine.scheduling.shares``) or the cache (exact → ``parent_key`` → longest common prefix with
  any row), else nothing (cold, with the policy's cold-save split) — ``app.engine.scheduling.reuse``.

The request table and the seq pool are the scheduler's; admission adds to the first
(``RequestTable.add``) and takes from the second. Any failure while a request is being set up returns its seq (and
sampler) before the error reaches the caller: no path leaks a seq.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from app.cache.keys import KeyMeta
from app.cache.prefix import common_prefix_len, is_prefix
from app.engine import checkpoints
from app.engine.backend import Backend
from app.engine.cache_hooks import CacheHooks, QuietCache
from app.engine.errors import ContextOverflow, EngineError, InvalidRequest, NoSession, StickyBusy
from app.engine.events import (
    CacheDelta,
    CompletionResult,
    Done,
    Error,
    Event,
    LastCacheHit,
    PrefillProgress,
    PrefillResult,
    Reuse,
    Stats,
)
from app.engine.request import Mode, Request, RequestOptions, Timings
from app.engine.scheduling.request_table import RequestTable
from app.engine.scheduling.reuse import OwnSeq, Reuser
from app.engine.scheduling.saves import Saver
from app.engine.scheduling.sessions import SeqPool
from app.engine.scheduling.shares import SHARE_MIN_TOKENS, Shares
from app.engine.streaming import TextPipeline

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Admission:
    """A request as posted by the Model, before it owns a seq (it crosses to the scheduler
    thread in ``commands.Admit``)."""

    ref: int
    mode: Mode
    prompt: tuple[int, ...]
    """For ``continue_session``: empty until admission joins the session's tokens and the suffix."""
    options: RequestOptions
    emit: Callable[[Event], None]
    result: Future[Any] = field(default_factory=Future)
    continue_suffix: tuple[int, ...] | None = None
    submitted_at: float = field(default_factory=time.perf_counter)
    on_reading: Callable[[], None] | None = None
    """Called on the scheduler thread right before the request's first batch goes to
    llama.cpp (``Model.infer``'s ``on_reading``)."""


class AdmissionPath(enum.Enum):
    NEW = "new"
    STICKY = "sticky"
    CONTINUE = "continue"


@dataclass(frozen=True, slots=True)
class Route:
    """Where an admission starts: its path, its seq, and what that seq already holds."""

    path: AdmissionPath
    seq_id: int
    stored: tuple[int, ...] = ()
    read_ahead_from: int | None = None
    """The session's tokens from this index on were read ahead (``Session.read_ahead_from``)."""


class Admitter:
    """Admits requests for one scheduler; owns ``pending`` and the cache identity of new requests."""

    def __init__(
        self,
        backend: Backend,
        cache: CacheHooks,
        pool: SeqPool,
        reqs: RequestTable,
        saver: Saver,
        shares: Shares,
        meta: KeyMeta | None,
        *,
        n_ctx_per_seq: int,
        make_text: Callable[[Admission], TextPipeline],
    ) -> None:
        self._backend = backend
        self._cache = cache
        self._pool = pool
        self._reqs = reqs
        self._saver = saver
        self._shares = shares
        self._reuser = Reuser(backend, shares)
        self._n_ctx_per_seq = n_ctx_per_seq
        self._make_text = make_text
        self.pending: deque[Admission] = deque()
        self.meta = meta
        """The cache identity new requests get (None: the cache is off)."""
        self.weights_epoch = 0
        """Bumped whenever the adapter set or a scale changes."""
        self.last_hit: LastCacheHit | None = None
        self._needs_checkpoints = backend.info.memory.needs_checkpoints
        """Prefills save whole states at checkpoints: the model's states cannot be cut."""

    def count_prompt(self, req: Request) -> None:
        """A request ends: if admission counted it as a hit or a miss, count its prompt
        tokens and how many were reused (the token-weighted hit rate beside the hits)."""
        reuse = req.cache.reuse
        if req.is_background:
            return  # a background read is no request (app.engine.scheduling.read_ahead)
        if reuse.source != "none" or reuse.miss_reason is not None:
            self._cache.count_prompt(req.num_prompt_tokens, reuse.tokens_reused)

    # ------------------------------------------------------------------ admit / dispatch

    def admit(self, adm: Admission) -> None:
        """Start ``adm`` on a seq now, or queue it in ``pending``; a bad admission raises."""
        adm = replace(adm, emit=_logging_errors(adm.emit))
        adm, route = self._route(adm)
        if route is None:
            self.pending.append(adm)
        else:
            self._start(adm, route)

    def dispatch(self) -> None:
        """Start waiting admissions, oldest first (background ones after all others), while a
        seq can be had."""
        while self.pending:
            adm = next((a for a in self.pending if a.options.priority != "background"), self.pending[0])
            seq_id = self._take_seq(adm.prompt)
            if seq_id is None:
                return
            self.pending.remove(adm)
            try:
                self._start(adm, Route(AdmissionPath.NEW, seq_id))
            except Exception as exc:
                _reject(adm, exc)

    def cancel(self, ref: int) -> bool:
        """Cancel a waiting admission: it ends ``cancelled`` without ever running."""
        adm = next((a for a in self.pending if a.ref == ref), None)
        if adm is None:
            return False
        self.pending.remove(adm)
        stats = Stats(len(adm.prompt), 0, 0.0, 0.0, 0.0, "cold", "cancelled", True, None, 0)
        outcome: CompletionResult | PrefillResult
        if adm.mode is Mode.PREFILL_ONLY:
            outcome = PrefillResult((), 0, None, "cold", CacheDelta())
        else:
            outcome = CompletionResult("", (), tuple(adm.prompt), 0, None, "cold", "cancelled", CacheDelta(), stats)
        if not adm.result.done():
            adm.result.set_result(outcome)
        adm.emit(Done(stats))
        return True

    def fail_pending(self, exc: Exception) -> None:
        while self.pending:
            _reject(self.pending.popleft(), exc)

    def new_weights(self, meta: KeyMeta | None) -> None:
        """The adapter set changed: idle sessions' KV is stale, new requests get ``meta``."""
        self.weights_epoch += 1
        for sid in self._pool.idle_sessions(busy=self._reqs):
            self._pool.drop(sid)
        if self.meta is not None:
            self.meta = meta

    # ------------------------------------------------------------------ routing

    def _route(self, adm: Admission) -> tuple[Admission, Route | None]:
        """Choose the path (None when the admission must wait for a seq); a continuation's
        admission comes back with its whole prompt."""
        sid = adm.options.session_id
        if sid is not None and self._session_in_flight(sid):
            raise StickyBusy(f"session {sid!r} already has a request in flight")
        session = self._pool.session(sid)
        if adm.continue_suffix is not None:
            if session is None:
                raise NoSession(f"no live session {sid!r} to continue")
            adm = replace(adm, prompt=(*session.tokens, *adm.continue_suffix))
            self._check_fits(adm.prompt)
            return adm, Route(AdmissionPath.CONTINUE, session.seq_id, tuple(session.tokens), session.read_ahead_from)
        self._check_fits(adm.prompt)
        if session is not None and sid is not None:
            return adm, Route(AdmissionPath.STICKY, session.seq_id, tuple(session.tokens), session.read_ahead_from)
        seq_id = self._take_seq(adm.prompt)
        return adm, None if seq_id is None else Route(AdmissionPath.NEW, seq_id)

    def _check_fits(self, prompt: Sequence[int]) -> None:
        if not prompt:
            raise InvalidRequest("the prompt is empty")
        if len(prompt) >= self._n_ctx_per_seq:
            raise ContextOverflow(
                f"prompt of {len(prompt)} tokens does not fit the context of "
                f"{self._n_ctx_per_seq} tokens per sequence"
            )

    def _session_in_flight(self, sid: str) -> bool:
        """A request of this session is running or waiting for a seq."""
        return self._reqs.in_session(sid) or any(
            a.options.session_id == sid for a in self.pending
        )

    def _take_seq(self, prompt: Sequence[int]) -> int | None:
        """A free seq (``SeqPool.take``: the one whose leftover cells ``prompt`` extends, when
        the cache is on); else beyond the seed: release the least recently used idle session,
        so new work never starves (its KV is saved first, its next turn restores it)."""
        epoch = self.weights_epoch if self.meta is not None else None  # cache off: leftovers unused
        seq_id = self._pool.take(prompt, epoch, SHARE_MIN_TOKENS)
        if seq_id is not None:
            return seq_id
        sid = self._pool.lru_idle(busy=self._reqs)
        if sid is None:
            return None
        session = self._pool.sessions[sid]
        self._saver.session(self.meta, sid, session)
        self._pool.drop(sid)
        return self._pool.take(prompt, epoch, SHARE_MIN_TOKENS)

    # ------------------------------------------------------------------ starting a request

    def _start(self, adm: Admission, route: Route) -> None:
        """Build the request on the route's seq and set up its first prefill."""
        touched = False  # has the seq's KV been changed yet?
        sampler = None
        try:
            text = self._make_text(adm)
            if adm.mode is not Mode.PREFILL_ONLY:
                sampler = self._backend.new_sampler(adm.options.sampling)
            req = Request(
                ref=adm.ref, mode=adm.mode, seq_id=route.seq_id, options=adm.options, emit=adm.emit,
                text=text, result=adm.result, meta=self.meta, weights_epoch=self.weights_epoch,
                sampler=sampler, prompt_tokens=list(adm.prompt), on_reading=adm.on_reading,
                times=Timings(adm.submitted_at, prefill_started_at=time.perf_counter()),
            )  # fmt: skip
            touched = True
            cache = QuietCache(self._cache) if req.is_background else self._cache
            if route.path is AdmissionPath.NEW:
                # Only with the cache on (off, every session-less request runs cold), and only
                # for a conversation's next turn: a shared template head alone is no reuse.
                left = self._pool.take_leftover(req.seq_id, self.weights_epoch) if self.meta is not None else None
                if left is not None and common_prefix_len(left, adm.prompt) < SHARE_MIN_TOKENS:
                    left = None
                if left is None:
                    self._pool.clear_for_use(req.seq_id)
                    self._reuser.start(req, cache, self.weights_epoch)
                else:  # the seq still holds a finished request's tokens (``SeqPool.leave``)
                    self._reuser.start(req, cache, self.weights_epoch, OwnSeq(req.seq_id, left, None))
            elif not self._extends(route, adm.prompt):  # a sticky turn that diverges
                assert adm.options.session_id is not None
                own = OwnSeq(route.seq_id, route.stored, adm.options.session_id)
                self._reuser.start(req, cache, self.weights_epoch, own)
            else:
                self._setup_session(req, route, cache)
            self._mark_read_ahead(req, route)
            if self._needs_checkpoints and self.meta is not None:
                req.checkpoints = checkpoints.plan(
                    req.prompt_tokens, len(req.context_tokens), self._backend.is_eog, self._cache.policy
                )
        except Exception as exc:
            self._undo_start(adm, route, sampler, touched)
            if isinstance(exc, EngineError):
                raise
            log.exception("admitting request %d failed", adm.ref)
            raise EngineError(f"admission failed: {exc!r}") from exc
        if adm.options.session_id is not None:
            self._pool.unpin(adm.options.session_id)  # the request holds the seq now
        self._reqs.add(req)
        if not req.is_background:
            self.last_hit = LastCacheHit(req.cache.hit_kind, req.cache.num_reused)
        req.emit(PrefillProgress(len(req.context_tokens), req.num_prompt_tokens))

    def _undo_start(self, adm: Admission, route: Route, sampler: Any, touched: bool) -> None:
        """Give back what a failed start took: the sampler, and the seq (its cells, once
        touched, are unknown: cleared before the seq's next use)."""
        if sampler is not None:
            try:
                self._backend.free_sampler(sampler)
            except Exception:
                log.exception("freeing the sampler of a failed admission failed")
        if route.path is AdmissionPath.NEW:
            if touched:
                self._pool.quarantine(route.seq_id)
            else:
                self._pool.put_free(route.seq_id)  # untouched: free as it was
        elif touched and adm.options.session_id is not None:
            self._pool.unpin(adm.options.session_id)  # the session's KV is no longer known
            self._pool.quarantine(route.seq_id)

    def _extends(self, route: Route, prompt: Sequence[int]) -> bool:
        """Does ``prompt`` extend what the session's seq holds, so that only its new tokens
        are prefilled? Equal counts only when the seq's last cell can be re-read (fresh
        logits), which a state that cannot be cut does not allow."""
        if not is_prefix(route.stored, prompt):
            return False
        return len(prompt) > len(route.stored) or self._backend.can_trim(route.seq_id, len(route.stored) - 1)

    def _mark_read_ahead(self, req: Request, route: Route) -> None:
        """Which of the seq's tokens were read ahead: a background request marks where its
        own reading starts (or an earlier one's did); a real request on a session left by
        one says how many of its reused tokens were read ahead."""
        prior = route.read_ahead_from if route.path is not AdmissionPath.NEW else None
        if req.is_background:
            held = len(req.context_tokens) if req.share_from is None else req.share_from[1]
            req.read_ahead_from = held if prior is None else min(prior, held)
        elif prior is not None and req.cache.reuse.source == "session":
            ahead = max(0, req.cache.reuse.tokens_reused - prior)
            req.cache.reuse = replace(req.cache.reuse, tokens_read_ahead=ahead)

    def _setup_session(self, req: Request, route: Route, cache: CacheHooks) -> None:
        """The seq already holds ``route.stored``; prefill only the new tokens."""
        stored = list(route.stored)
        suffix = req.prompt_tokens[len(stored) :]
        req.cache.hit_kind = "sticky" if route.path is AdmissionPath.STICKY else "continuation"
        req.cache.num_reused = len(stored)
        if suffix:
            req.context_tokens = stored
            req.prefill_cursor = list(suffix)
        else:  # nothing new: drop the last cell and re-prefill it for fresh logits
            self._backend.seq_rm(req.seq_id, len(stored) - 1)
            req.context_tokens = stored[:-1]
            req.prefill_cursor = [stored[-1]]
        req.cache.reuse = Reuse("session", len(req.context_tokens), len(stored), None, req.options.session_id)
        # A continuation reuses the session's seq exactly as a sticky turn does: both are hits.
        cache.count_sticky()


def _logging_errors(emit: Callable[[Event], None]) -> Callable[[Event], None]:
    """A raising event callback is the caller's bug: log it, never fail the request for it."""

    def deliver(event: Event) -> None:
        try:
            emit(event)
        except Exception:
            log.exception("an event callback raised on %s", type(event).__name__)

    return deliver


def _reject(adm: Admission, exc: Exception) -> None:
    """A waiting admission that cannot start ends with one Error."""
    code = getattr(exc, "code", "engine_error")
    if not adm.result.done():
        adm.result.set_exception(exc)
    adm.emit(Error(str(exc), code))
