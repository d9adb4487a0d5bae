"""The per-model scheduler: the seed's state machine (``erllama_model``) in Python.

One scheduler thread owns the backend (and so the llama context). Everything else posts
closures to its inbox. The loop, like the seed's ``step_tick``:

    drain inbox (admit / cancel / end_session / ...) → tick → publish snapshot

and a tick is: honour cancels → build ops → ONE backend.step → apply results → finish the
marked requests → dispatch pending admits.

State: ``reqs`` (seq_id → Request, in admission order), ``free_seqs`` (FIFO of seq ids),
``pending`` (FIFO of admissions waiting for a seq), ``sessions`` (session id → the seq it
pins and the tokens its KV holds, least recently used first).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from app.cache.keys import KeyMeta
from app.engine.backend import Backend, DecodeOp, Op, Prefilled, PrefillOp, Sampled, StepResult
from app.engine.batch import build_ops
from app.engine.cache_hooks import CacheHooks, Hit, SaveReason
from app.engine.config import ModelConfig
from app.engine.errors import (
    ContextOverflow,
    EngineError,
    InvalidRequest,
    NoSession,
    StickyBusy,
)
from app.engine.events import (
    CacheDelta,
    CompletionResult,
    Done,
    Error,
    Event,
    FinishReason,
    LastCacheHit,
    PrefillProgress,
    PrefillResult,
    SchedulerSnapshot,
    SlotInfo,
    SlotState,
    Stats,
    TickInfo,
    TokenId,
)
from app.engine.request import MarkerTokens, Mode, Request, RequestOptions, SpanTracker, StopScanner
from app.engine.streaming import TokenRouter

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Admission:
    """A request as posted by the Model, before it owns a seq."""

    ref: int
    mode: Mode
    prompt: list[int]
    options: RequestOptions
    emit: Callable[[Event], None]
    accepted: Future[int]
    result: Future[Any] = field(default_factory=Future)
    continue_suffix: list[int] | None = None
    submitted_at: float = field(default_factory=time.perf_counter)


@dataclass(slots=True)
class Session:
    seq_id: int
    tokens: list[int]


class Scheduler:
    """Owns the request table, the seq pool and the pending queue for one model."""

    def __init__(
        self,
        backend: Backend,
        config: ModelConfig,
        cache: CacheHooks,
        meta: KeyMeta | None,
        *,
        thinking_markers: MarkerTokens | None = None,
        tool_markers: MarkerTokens | None = None,
    ) -> None:
        self.backend = backend
        self.config = config
        self.cache = cache
        self.meta = meta
        self.thinking_markers = thinking_markers
        self.tool_markers = tool_markers
        self.reqs: dict[int, Request] = {}
        self.free_seqs: deque[int] = deque(range(config.n_seq_max))
        self.stale_seqs: set[int] = set()  # free, but still holding a finished request's cells
        self.pending: deque[Admission] = deque()
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.inbox: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self.router = TokenRouter(backend.token_piece, config.thinking_signing_key)
        self.snapshot = SchedulerSnapshot(slots=self._slots())
        self._ticks: deque[TickInfo] = deque(maxlen=120)
        self._decode_ticks_since_prefill = config.decode_ticks_between_prefills
        self._last_hit: LastCacheHit | None = None
        self._num_generated = 0
        self._stopped = False
        self.weights_epoch = 0

    # ------------------------------------------------------------------ thread plumbing

    def post(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run ``fn`` on the scheduler thread between ticks; the future holds its result."""
        fut: Future[Any] = Future()
        if self._stopped:
            fut.set_exception(EngineError("model is unloaded", code="not_found"))
            return fut
        self.inbox.put((fn, fut))
        return fut

    def call(self, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        return self.post(fn).result(timeout)

    def stop(self) -> None:
        self.inbox.put(None)

    def run(self) -> None:
        """The scheduler loop; returns after ``stop()``."""
        while not self._stopped:
            idle = not self.reqs
            self._drain_inbox(block=idle)
            if self._stopped:
                break
            if idle and self.reqs:
                self._gather_burst()
            if self.reqs:
                try:
                    self.tick()
                except Exception as exc:  # a bug or a fatal backend error: fail loudly, keep serving
                    log.exception("scheduler tick failed")
                    self._fail_all(exc)
            if not self.reqs and self.stale_seqs:
                self._clear_stale_seqs()
            self._publish()

    def _gather_burst(self) -> None:
        """Woken from idle: let the rest of a burst arrive before the first tick.

        Each ``infer`` waits for its admission, so a loop of calls arrives one call at a time;
        while calls keep coming (within ``BURST_GAP_S`` of each other, ``BURST_MAX_S`` in
        all), they are admitted together and the first tick prefills them as one burst.
        """
        deadline = time.perf_counter() + BURST_MAX_S
        while not self._stopped and time.perf_counter() < deadline:
            time.sleep(BURST_GAP_S)
            if not self._drain_inbox(block=False):
                return

    def _drain_inbox(self, block: bool) -> int:
        """Run every queued call (waiting for the first one when ``block``); how many ran."""
        try:
            item = self.inbox.get(block=block)
        except queue.Empty:
            return 0
        n = 0
        while True:
            if item is None:
                self._stopped = True
                return n
            fn, fut = item
            n += 1
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:
                    fut.set_exception(exc)
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return n

    # ------------------------------------------------------------------ admission

    def admit(self, adm: Admission) -> None:
        """Admit now (sticky seq, continuation, or a free seq) or queue in ``pending``."""
        sid = adm.options.session_id
        if adm.continue_suffix is not None:
            self._admit_continue(adm)
            return
        if sid is not None and self._session_in_flight(sid):
            raise StickyBusy(f"session {sid!r} already has a request in flight")
        self._check_fits(adm.prompt)
        if sid is not None and sid in self.sessions:
            session = self.sessions[sid]
            if _is_prefix(session.tokens, adm.prompt):
                self._start(adm, session.seq_id, ("sticky", session.tokens))
                return
            self._drop_session(sid)  # divergence: free the seq, admit normally
        if self.free_seqs or self._release_lru_session():
            self._start(adm, self.free_seqs.popleft(), ("normal", []))
        else:
            adm.accepted.set_result(adm.ref)
            self.pending.append(adm)

    def _admit_continue(self, adm: Admission) -> None:
        sid = adm.options.session_id
        if sid is not None and self._session_in_flight(sid):
            raise StickyBusy(f"session {sid!r} already has a request in flight")
        if sid is None or sid not in self.sessions:
            raise NoSession(f"no live session {sid!r} to continue")
        session = self.sessions[sid]
        assert adm.continue_suffix is not None
        adm.prompt = session.tokens + adm.continue_suffix
        self._check_fits(adm.prompt)
        self._start(adm, session.seq_id, ("continue", session.tokens))

    def _check_fits(self, prompt: list[int]) -> None:
        if not prompt:
            raise InvalidRequest("the prompt is empty")
        if len(prompt) >= self.config.n_ctx:
            raise ContextOverflow(
                f"prompt of {len(prompt)} tokens does not fit the context of "
                f"{self.config.n_ctx} tokens per sequence"
            )

    def _session_in_flight(self, sid: str) -> bool:
        """A request of this session is running or waiting for a seq."""
        return any(r.options.session_id == sid for r in self.reqs.values()) or any(
            a.options.session_id == sid for a in self.pending
        )

    def _start(self, adm: Admission, seq_id: int, path: tuple[str, list[int]]) -> None:
        """Build the Request on ``seq_id`` and choose its prefill path."""
        kind, stored = path
        sampler = None
        if adm.mode is not Mode.PREFILL_ONLY:
            try:
                sampler = self.backend.new_sampler(adm.options.sampling)
            except Exception:
                if kind == "normal":
                    self.free_seqs.appendleft(seq_id)
                raise
        req = Request(
            ref=adm.ref,
            mode=adm.mode,
            seq_id=seq_id,
            prompt_tokens=list(adm.prompt),
            options=adm.options,
            emit=adm.emit,
            meta=self.meta,
            sampler=sampler,
            stop=StopScanner(adm.options.stop_sequences),
            spans=self._span_tracker(),
            result_future=adm.result,
            submitted_at=adm.submitted_at,
            weights_epoch=self.weights_epoch,
        )
        req.prefill_started_at = time.perf_counter()
        if kind == "normal":
            self._setup_lookup(req)
        else:
            self._setup_sticky(req, stored, "sticky" if kind == "sticky" else "continuation")
        if req.options.session_id is not None:
            self.sessions.pop(req.options.session_id, None)
        self.reqs[seq_id] = req
        self._last_hit = LastCacheHit(req.cache_hit_kind, req.cache_hit_prefix_len)
        req.emit(PrefillProgress(len(req.context_tokens), req.num_prompt_tokens))
        if not adm.accepted.done():
            adm.accepted.set_result(adm.ref)

    def _span_tracker(self) -> SpanTracker | None:
        if self.thinking_markers is None and self.tool_markers is None:
            return None
        return SpanTracker(self.thinking_markers, self.tool_markers)

    def _setup_sticky(self, req: Request, stored: list[int], kind: str) -> None:
        """The seq already holds ``stored``; prefill only the new tokens."""
        suffix = req.prompt_tokens[len(stored) :]
        req.cache_hit_kind = "sticky" if kind == "sticky" else "continuation"
        req.cache_hit_prefix_len = len(stored)
        if suffix:
            req.context_tokens = list(stored)
            req.prefill_cursor = list(suffix)
        else:  # nothing new: drop the last cell and re-prefill it for fresh logits
            self.backend.seq_rm(req.seq_id, len(stored) - 1)
            req.context_tokens = list(stored[:-1])
            req.prefill_cursor = [stored[-1]]
        if kind == "sticky":
            self.cache.count_sticky()

    def _setup_lookup(self, req: Request) -> None:
        """Shared head of another seq, else warm path (exact → parent_key → longest prefix),
        else cold path with its split."""
        self.backend.seq_rm(req.seq_id, 0)
        self.stale_seqs.discard(req.seq_id)
        prompt = req.prompt_tokens
        if self._setup_share(req):
            return
        hit = None
        if self.meta is not None:
            hit = self.cache.lookup(self.meta, prompt, req.options.parent_key)
        if isinstance(hit, Hit):
            t0 = time.perf_counter_ns()
            ok = self.backend.kv_unpack(req.seq_id, hit.payload)
            self.cache.count_load(time.perf_counter_ns() - t0)
            if ok:
                n = len(hit.tokens)
                self.backend.seq_rm(req.seq_id, n - 1)
                req.context_tokens = list(hit.tokens[:-1])
                req.prefill_cursor = [hit.tokens[-1], *prompt[n:]]
                req.cache_hit_kind = hit.kind
                req.cache_hit_prefix_len = n
                req.last_save_at = n
                return
            log.warning("cached KV for a %d-token prefix did not load; going cold", len(hit.tokens))
            self.backend.seq_rm(req.seq_id, 0)
        self.cache.count_miss()
        split = self.cache.cold_split(len(prompt)) if req.mode is not Mode.PREFILL_ONLY else 0
        if split:
            req.prefill_cursor = list(prompt[:split])
            req.cold_save_remaining = list(prompt[split:])
        else:
            req.prefill_cursor = list(prompt)

    # ------------------------------------------------------------------ shared prompt heads

    def _setup_share(self, req: Request) -> bool:
        """Beyond the seed: reuse the KV of another live seq whose prompt starts the same way.

        NOTE: when several conversations with one system prompt start together, none of them
        is in the cache yet; the first prefills the shared head and the others share its
        cells (``llama_memory_seq_cp``: with the unified KV cache nothing is copied) instead
        of prefilling it again. An idle session's seq is a donor too.
        """
        prompt = req.prompt_tokens
        best_n, donor_seq, donor_req = 0, -1, None
        for other in self.reqs.values():
            if other.finishing or other.weights_epoch != self.weights_epoch:
                continue
            n = _common_prefix_len(other.prompt_tokens, prompt)
            if n > best_n:
                best_n, donor_seq, donor_req = n, other.seq_id, other
        for session in self.sessions.values():
            n = _common_prefix_len(session.tokens, prompt)
            if n > best_n:
                best_n, donor_seq, donor_req = n, session.seq_id, None
        n = min(best_n, len(prompt) - 1)  # the last prompt token is prefilled for logits
        if n < SHARE_MIN_TOKENS:
            return False
        req.cache_hit_kind = "partial"
        req.cache_hit_prefix_len = n
        req.last_save_at = n
        if donor_req is None or len(donor_req.context_tokens) >= n:
            self._take_share(req, donor_seq, n)
        else:
            req.share_from = (donor_req.ref, n)
        return True

    def _take_share(self, req: Request, src_seq: int, n: int) -> None:
        self.backend.seq_cp(src_seq, req.seq_id, n)
        req.context_tokens = list(req.prompt_tokens[:n])
        req.prefill_cursor = list(req.prompt_tokens[n:])
        req.share_from = None

    def _resolve_shares(self) -> None:
        """Waiting requests take their shared head once the donor's KV holds it; if the donor
        went away first, they prefill the whole prompt themselves."""
        for req in self.reqs.values():
            if req.share_from is None:
                continue
            ref, n = req.share_from
            donor = next((r for r in self.reqs.values() if r.ref == ref), None)
            if donor is not None and len(donor.context_tokens) >= n:
                self._take_share(req, donor.seq_id, n)
            elif donor is None or donor.finishing or not donor.is_prefilling:  # a waiting donor still comes
                req.share_from = None
                req.prefill_cursor = list(req.prompt_tokens)
                req.cache_hit_kind, req.cache_hit_prefix_len, req.last_save_at = "cold", 0, 0

    # ------------------------------------------------------------------ the tick

    def tick(self) -> None:
        t0 = time.perf_counter()
        for req in list(self.reqs.values()):
            if req.cancel_pending and not req.finishing:
                self._mark(req, "cancelled")
        self._finish_marked()
        if not self.reqs:
            self._dispatch_pending()
            return
        self._resolve_shares()
        streaming = any(r.wants_decode for r in self.reqs.values())
        max_prefill_seqs = self.config.prefill_seqs_per_tick
        if not streaming and self._prompts_fit_one_tick():
            # A burst whose prompts all end in this tick: prefill them together, so their
            # replies start together and decode in full batches (B1); one at a time would
            # only stagger them.
            max_prefill_seqs = None
        elif streaming and self._decode_ticks_since_prefill < self.config.decode_ticks_between_prefills:
            max_prefill_seqs = 0  # streaming replies get a decode-only tick first
        try:
            ops = build_ops(self.reqs.values(), self.config.n_batch, self.config.chunk_size, max_prefill_seqs)
        except EngineError as exc:
            self._fail_all(exc)
            return
        if ops:
            results = self.backend.sample(ops)
            self._apply_sampled(ops, results)  # tokens reach their streams before the decode runs
            self.backend.decode(ops, results)
            for op, res in zip(ops, results, strict=True):
                req = self.reqs[op.seq_id]
                if isinstance(op, PrefillOp):
                    assert isinstance(res, Prefilled)
                    self._apply_prefill(req, op)
                elif not req.finishing and self.cache.wants_continued(len(req.context_tokens), req.last_save_at):
                    # After the decode: the KV holds the token now (the cache-key invariant).
                    self._fire_save(req, "continued", req.context_tokens)
                    req.last_save_at = len(req.context_tokens)
            n_prefill = sum(len(o.tokens) for o in ops if isinstance(o, PrefillOp))
            n_decode = sum(1 for o in ops if isinstance(o, DecodeOp))
            self._decode_ticks_since_prefill = 0 if n_prefill else self._decode_ticks_since_prefill + 1
            self._ticks.append(TickInfo(n_prefill, n_decode, (time.perf_counter() - t0) * 1000))
            self._resolve_shares()  # before a donor that finishes now releases its seq
        self._finish_marked()
        self._dispatch_pending()

    def _prompts_fit_one_tick(self) -> bool:
        """Would every prefilling request finish its prompt in one tick (chunk cap, n_batch)?"""
        chunk = self.config.chunk_size
        total = 0
        for r in self.reqs.values():
            if r.prefill_cursor and not r.finishing:
                n = len(r.prefill_cursor)
                if chunk is not None and n > chunk:
                    return False
                total += n
        return total <= self.config.n_batch

    def _apply_prefill(self, req: Request, op: PrefillOp) -> None:
        n = len(op.tokens)
        req.context_tokens.extend(op.tokens)
        del req.prefill_cursor[:n]
        req.emit(PrefillProgress(len(req.context_tokens), req.num_prompt_tokens))
        if req.prefill_cursor:
            return
        if req.cold_save_remaining is not None:
            self._fire_save(req, "cold", req.context_tokens)
            req.last_save_at = len(req.context_tokens)
            req.prefill_cursor, req.cold_save_remaining = req.cold_save_remaining, None
            if req.prefill_cursor:
                return
        req.prefill_done_at = time.perf_counter()
        if req.mode is Mode.PREFILL_ONLY:
            self._mark(req, "stop")

    def _apply_sampled(self, ops: list[Op], results: list[StepResult]) -> None:
        """Between ``sample`` and ``decode``: stream this tick's tokens right away.

        NOTE: a token reaches its stream one decode earlier than it would after the step,
        which for a first token behind another request's prefill is that whole prefill.
        """
        for op, res in zip(ops, results, strict=True):
            if isinstance(op, DecodeOp):
                assert isinstance(res, Sampled)
                req = self.reqs[op.seq_id]
                if op.greedy and req.sampler is not None:
                    # Chosen outside the request's chain (tool-call syntax): keep the
                    # chain's history (repetition penalty, grammar) in step.
                    self.backend.accept(req.sampler, res.token)
                self._apply_token(req, res.token, res.is_eog)

    def _apply_token(self, req: Request, token: int, is_eog: bool) -> None:
        req.generated.append(token)
        req.context_tokens.append(token)
        self._num_generated += 1
        if req.first_token_at is None:
            req.first_token_at = time.perf_counter()
        req.emit(TokenId(token))
        if not is_eog:
            self.router.route(req, token)
        if req.finishing:  # routing failed the request (e.g. thinking without opt-in)
            return
        if (is_eog and not req.options.ignore_eos) or req.stop.matched is not None:
            self._mark(req, "stop")
        elif len(req.context_tokens) >= self.config.n_ctx:
            req.context_full = True
            self._mark(req, "length")
        elif req.num_generated >= req.options.response_tokens:
            self._mark(req, "length")

    # ------------------------------------------------------------------ finishing

    def _mark(self, req: Request, reason: FinishReason) -> None:
        req.mark(reason)

    def _finish_marked(self) -> None:
        for req in [r for r in self.reqs.values() if r.finishing]:
            self._finish(req)

    def _finish(self, req: Request) -> None:
        req.finished_at = time.perf_counter()
        if req.error is not None:
            self._fail(req, req.error)
            return
        self.router.flush(req)
        if self.cache.wants_finish(len(req.context_tokens)):
            req.finish_key = self._fire_save(req, "finish", req.context_tokens)
        stats = self._stats(req)
        self._release(req)
        self._resolve(req, stats)

    def _stats(self, req: Request) -> Stats:
        end = req.finished_at or time.perf_counter()
        started = req.prefill_started_at or req.submitted_at
        prefill_done = req.prefill_done_at or end
        first = req.first_token_at
        return Stats(
            prompt_tokens=req.num_prompt_tokens,
            completion_tokens=req.num_generated,
            prefill_ms=(prefill_done - started) * 1000,
            generation_ms=(end - prefill_done) * 1000 if first is not None else 0.0,
            ttft_ms=(first - req.submitted_at) * 1000 if first is not None else 0.0,
            cache_hit_kind=req.cache_hit_kind,
            finish_reason=req.finish_reason or "stop",
            cancelled=req.finish_reason == "cancelled",
            finish_key=req.finish_key,
            committed_tokens=len(req.context_tokens),
            cache_delta=CacheDelta(req.cache_hit_prefix_len, req.cache_created),
            stop_sequence=req.stop.matched,
            context_full=req.context_full,
        )

    def _resolve(self, req: Request, stats: Stats) -> None:
        fut: Future[Any] = req.result_future
        result: Any
        if req.mode is Mode.PREFILL_ONLY:
            result = PrefillResult(
                context_tokens=tuple(req.context_tokens),
                committed_tokens=len(req.context_tokens),
                finish_key=req.finish_key,
                cache_hit_kind=req.cache_hit_kind,
                cache_delta=stats.cache_delta,
            )
        else:
            result = CompletionResult(
                reply="".join(req.reply_parts),
                generated=tuple(req.generated),
                context_tokens=tuple(req.context_tokens),
                committed_tokens=len(req.context_tokens),
                finish_key=req.finish_key,
                cache_hit_kind=req.cache_hit_kind,
                finish_reason=stats.finish_reason,
                cache_delta=stats.cache_delta,
                stats=stats,
                stop_sequence=stats.stop_sequence,
            )
        if not fut.done():
            fut.set_result(result)
        req.emit(Done(stats))

    def _release(self, req: Request) -> None:
        """Free the sampler; pin the seq to its session, or clear it and return it to the pool."""
        if req.sampler is not None:
            self.backend.free_sampler(req.sampler)
            req.sampler = None
        del self.reqs[req.seq_id]
        sid = req.options.session_id
        if sid is not None and req.error is None:
            self.sessions[sid] = Session(req.seq_id, list(req.context_tokens))
            self.sessions.move_to_end(sid)
        else:
            if self.reqs:
                # NOTE: clearing the seq now would leave a hole in the unified KV buffer that
                # the running seqs' next tokens fill, ahead of their earlier cells; with
                # llama.cpp's f16 attention accumulators the order of a seq's cells changes
                # its logits (by up to ~0.7 on SmolLM2), so batched could differ from solo.
                # Its cells stay until the scheduler is idle or the seq is taken again
                # (admission clears it first).
                self.stale_seqs.add(req.seq_id)
            else:
                self.backend.seq_rm(req.seq_id, 0)
            self.free_seqs.append(req.seq_id)

    def _clear_stale_seqs(self) -> None:
        """Idle: drop the cells of seqs released while others were running."""
        for seq_id in self.stale_seqs:
            self.backend.seq_rm(seq_id, 0)
        self.stale_seqs.clear()

    def _fail(self, req: Request, exc: BaseException) -> None:
        req.error = exc if isinstance(exc, Exception) else EngineError(str(exc))
        if req.seq_id in self.reqs:
            self._release(req)
        fut: Future[Any] = req.result_future
        if not fut.done():
            fut.set_exception(req.error)
        code = getattr(req.error, "code", "engine_error")
        req.emit(Error(str(req.error), code))

    def _fail_all(self, exc: BaseException) -> None:
        for req in list(self.reqs.values()):
            self._fail(req, exc)

    # ------------------------------------------------------------------ saves

    def _fire_save(self, req: Request, reason: SaveReason, tokens: list[int]) -> bytes | None:
        """Pack the seq's KV (it holds exactly ``tokens``) and hand it to the cache writer."""
        if req.meta is None or not tokens:
            return None
        t0 = time.perf_counter_ns()
        payload = self.backend.kv_pack(req.seq_id)
        key = self.cache.save(req.meta, tokens, payload, reason, time.perf_counter_ns() - t0)
        if key is not None:
            req.cache_created = max(req.cache_created, len(tokens) - req.cache_hit_prefix_len)
        return key

    def save_in_flight(self, reason: SaveReason) -> int:
        """``evict`` / ``shutdown``: one save per in-flight request with a non-empty context."""
        num = 0
        for req in self.reqs.values():
            if req.context_tokens and self._fire_save(req, reason, req.context_tokens):
                req.last_save_at = len(req.context_tokens)
                num += 1
        return num

    # ------------------------------------------------------------------ seqs and sessions

    def _dispatch_pending(self) -> None:
        while self.pending and (self.free_seqs or self._release_lru_session()):
            adm = self.pending.popleft()
            try:
                self._start(adm, self.free_seqs.popleft(), ("normal", []))
            except Exception as exc:
                adm.result.set_exception(exc)
                adm.emit(Error(str(exc), getattr(exc, "code", "engine_error")))

    def _release_lru_session(self) -> bool:
        """Beyond the seed: unpin the least recently used idle session so new work never starves."""
        for sid, session in self.sessions.items():
            if session.seq_id not in self.reqs:
                if self.meta is not None and session.tokens:
                    t0 = time.perf_counter_ns()
                    payload = self.backend.kv_pack(session.seq_id)
                    self.cache.save(self.meta, session.tokens, payload, "evict", time.perf_counter_ns() - t0)
                self._drop_session(sid)
                return True
        return False

    def _drop_session(self, sid: str) -> None:
        session = self.sessions.pop(sid)
        self.backend.seq_rm(session.seq_id, 0)
        self.free_seqs.append(session.seq_id)

    def end_session(self, sid: str) -> None:
        """Idempotent: unknown sessions and sessions with a request in flight are left alone."""
        session = self.sessions.get(sid)
        if session is not None and session.seq_id not in self.reqs:
            self._drop_session(sid)

    def adapters_changed(self, meta: KeyMeta | None) -> None:
        """The model's weights changed (LoRA set or scale): KV computed before is no longer
        what this model would compute. Idle sessions are released (their saves stay valid
        under the old fingerprint), new requests get the new cache identity, and in-flight
        requests keep theirs — and are no donors of shared prompt heads for new ones."""
        self.weights_epoch += 1
        for sid in [s for s, v in self.sessions.items() if v.seq_id not in self.reqs]:
            self._drop_session(sid)
        if self.meta is not None:
            self.meta = meta

    def cancel(self, ref: int) -> None:
        for req in self.reqs.values():
            if req.ref == ref:
                req.cancel_pending = True
                return
        for adm in list(self.pending):
            if adm.ref == ref:
                self.pending.remove(adm)
                stats = Stats(len(adm.prompt), 0, 0.0, 0.0, 0.0, "cold", "cancelled", True, None, 0)
                if adm.mode is Mode.COMPLETE:
                    adm.result.set_result(
                        CompletionResult("", (), tuple(adm.prompt), 0, None, "cold", "cancelled", CacheDelta(), stats)
                    )
                adm.emit(Done(stats))
                return

    # ------------------------------------------------------------------ observability

    @property
    def phase(self) -> str:
        if not self.reqs:
            return "idle"
        return "prefilling" if any(r.is_prefilling for r in self.reqs.values()) else "generating"

    def _slots(self) -> tuple[SlotInfo, ...]:
        owners = {s.seq_id: (sid, len(s.tokens)) for sid, s in self.sessions.items()}
        slots = []
        for seq in range(self.config.n_seq_max):
            req = self.reqs.get(seq)
            if req is not None:
                busy: SlotState = "prefilling" if req.is_prefilling else "generating"
                slots.append(SlotInfo(seq, busy, req.options.session_id, len(req.context_tokens)))
            elif seq in owners:
                slots.append(SlotInfo(seq, "pinned", owners[seq][0], owners[seq][1]))
            else:
                slots.append(SlotInfo(seq, "free", None, 0))
        return tuple(slots)

    def _publish(self) -> None:
        self.snapshot = SchedulerSnapshot(
            phase=self.phase,
            pending_len=len(self.pending),
            last_cache_hit=self._last_hit,
            slots=self._slots(),
            recent_ticks=tuple(self._ticks),
            num_tokens_generated=self._num_generated,
        )


SHARE_MIN_TOKENS = 32
BURST_GAP_S = 0.0005
BURST_MAX_S = 0.005


def _common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]: binary search on slice equality
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _is_prefix(prefix: list[int], tokens: list[int]) -> bool:
    return len(prefix) <= len(tokens) and tokens[: len(prefix)] == prefix


def start_thread(scheduler: Scheduler, name: str) -> threading.Thread:
    thread = threading.Thread(target=scheduler.run, name=name, daemon=True)
    thread.start()
    return thread
