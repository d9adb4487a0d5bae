"""The per-model scheduler: the seed's state machine (``erllama_model``) in Python.

One scheduler thread owns the backend (and so the llama context); other threads post calls
to it (``app.engine.scheduling.loop``). Where each concept lives:

    loop.py       the thread: inbox of calls, burst gathering, guarded phases, dying loudly
    scheduler.py  this file: THE TICK and what the loop drives
    commands.py   the commands other threads post: their records and what each does
    snapshot.py   what the scheduler publishes after each iteration (lock-free)
    request_table.py  the request table: seq id → running request
    finishing.py  how a request ends: finish save, release, exactly one Done or Error
    admission.py  admit now (NEW / STICKY / CONTINUE) or wait in ``pending``; dispatch
    sessions.py   the seq pool: free and stale seqs, seqs pinned by idle sessions (LRU)
    shares.py     shared prompt heads between live seqs
    batch.py      the tick's plan: ops under the batch budget, the prefill budget policy
    read_ahead.py background prefills (type-ahead): the lowest priority, how they make way
    speculation/  draft rows: prompt lookup, verify, per-seq draft lengths, tick costs
    saves.py      cold / continued / finish / evict / shutdown saves
    request.py    one request: counters, cache account, timings (streaming.py: its text)

The tick, like the seed's ``step_tick``: ``plan = schedule()`` → ``backend.sample(plan)`` →
each sampled token streams → ``backend.decode(plan)`` → ``postprocess`` → ``finish`` the
requests marked this tick → ``dispatch`` waiting admissions. Beyond the seed, a prompt that
ends beside decode rows is decoded first, in a call of its own, so that its first token does
not wait for theirs (``_read_first``, ``ModelConfig.read_first``). A failure fails only the
requests it must (see ``sample``, ``decode`` and ``_release``); the rest keep running.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

from app.cache.keys import KeyMeta
from app.engine.backend import Backend, DecodeOp, PrefillOp, Sampled, StepResult
from app.engine.batch import Part, PrefillBudget, TickPlan, decode_op, first_reads, plan_tick
from app.engine.cache_hooks import Arrivals, CacheHooks
from app.engine.config import ModelConfig
from app.engine.errors import EngineError, InvalidRequest
from app.engine.events import (
    PrefillProgress,
    SchedulerSnapshot,
    SlotInfo,
    TickInfo,
    TokenId,
)
from app.engine.request import Mode, Request
from app.engine.scheduling.admission import Admission, Admitter
from app.engine.scheduling.commands import Command, CommandRunner
from app.engine.scheduling.finishing import Finisher
from app.engine.scheduling.loop import SchedulerLoop
from app.engine.scheduling.read_ahead import ReadAhead
from app.engine.scheduling.request_table import RequestTable
from app.engine.scheduling.saves import Saver
from app.engine.scheduling.sessions import SeqPool
from app.engine.scheduling.shares import Shares
from app.engine.scheduling.snapshot import draft_max_setting, slots_of, snapshot_of
from app.engine.speculation.speculator import Speculator
from app.engine.streaming import TextPipeline
from app.engine.text import MarkerTokens

log = logging.getLogger(__name__)


class Scheduler:
    """The request table of one model and its tick. ``post``, ``call`` (a command record from
    ``app.engine.scheduling.commands``), ``stop``, ``snapshot``, ``meta`` and ``has_stopped`` are for any
    thread; everything else runs on the scheduler thread (``run``)."""

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
        self.thinking_markers = thinking_markers
        self.tool_markers = tool_markers
        self.reqs = RequestTable()
        """seq id → running request, in admission order (``Admitter`` adds, ``Finisher`` removes)."""
        self.pool = SeqPool(backend, config.n_seq_max)
        self.saver = Saver(backend, cache)
        self._cache = cache
        self._holding_writes = False
        self.arrivals = Arrivals(cache)
        """Requests on their way here (any thread): the cache's writes wait meanwhile."""
        self.shares = Shares(backend, self.reqs, self.pool)
        self.admission = Admitter(
            backend, cache, self.pool, self.reqs, self.saver, self.shares, meta,
            n_ctx_per_seq=config.n_ctx_per_seq, make_text=self._text_pipeline,
        )  # fmt: skip
        self.finisher = Finisher(backend, self.reqs, self.pool, self.saver, self.shares, self.admission)
        self.budget = PrefillBudget(config.decode_ticks_between_prefills)
        self.read_ahead = ReadAhead(
            self.reqs, self.admission, self.finisher, n_batch=config.n_batch, chunk_size=config.chunk_size
        )
        self.speculator = Speculator(
            backend, config, has_tool_markers=tool_markers is not None, save_due=self.saver.continued_due
        )
        self.loop = SchedulerLoop(self)
        self.commands = CommandRunner(self)
        self.free_slots = tuple(SlotInfo(seq, "free", None, 0) for seq in range(config.n_seq_max))
        """A free slot's record, made once (records are immutable; ``publish`` runs every tick)."""
        self.snapshot = SchedulerSnapshot(
            slots=slots_of(self), speculative=self.speculator.enabled, draft_max=draft_max_setting(self)
        )
        """Lock-free observability: replaced whole after every loop iteration."""
        self.ticks: deque[TickInfo] = deque(maxlen=120)
        self.num_generated = 0

    # ------------------------------------------------------------------ any thread

    def post(self, cmd: Command) -> Future[Any]:
        """Run ``cmd`` on the scheduler thread between ticks; the future holds its result."""
        return self.loop.post(partial(self.commands.execute, cmd))

    def call(self, cmd: Command, timeout: float | None = None) -> Any:
        """``post`` and wait for the result (or the command's exception)."""
        return self.loop.call(partial(self.commands.execute, cmd), timeout)

    def stop(self) -> None:
        self.loop.stop()

    def run(self) -> None:
        """The scheduler thread's body (``start_thread``, or the GUI's QThread)."""
        self.loop.run()

    @property
    def has_stopped(self) -> bool:
        """The loop has returned: nothing touches the backend any more (False if it never ran)."""
        return self.loop.ended.is_set()

    @property
    def meta(self) -> KeyMeta | None:
        """The cache identity new requests get (an immutable record, safe to read anywhere)."""
        return self.admission.meta

    # ------------------------------------------------------------------ what the loop drives

    def is_busy(self) -> bool:
        return bool(self.reqs)

    def num_arriving(self) -> int:
        return self.arrivals.num_unsettled

    def on_idle(self) -> None:
        if self.pool.stale:
            self.pool.clear_stale()

    def fail_running(self, exc: Exception) -> None:
        for req in list(self.reqs.values()):
            req.fail(exc)
            self.finisher.end(req)

    def abandon(self, exc: Exception) -> None:
        self.fail_running(exc)
        self.admission.fail_pending(exc)
        self.hold_writes()

    def _cold_saves(self, plan: TickPlan) -> None:
        """Cold saves deferred to the first reply token (``reuse._cold``), now it is out."""
        for seq in plan.seq_ids:
            req = self.reqs.get(seq)
            if req is not None and req.cache.cold_after_first and req.times.first_token_at is not None:
                self.saver.cold_after_first(req)

    def hold_writes(self) -> None:
        """Tell the cache whether a request waits for its first token (background reads do
        not count): its writer holds queued saves back meanwhile (``CacheStore.hold_writes``)."""
        waiting = any(
            r.times.first_token_at is None and not r.is_background and not r.finishing for r in self.reqs.values()
        )
        if waiting != self._holding_writes:
            self._holding_writes = waiting
            try:
                self._cache.hold_writes(waiting)
            except Exception:  # never worth a request
                log.exception("telling the cache writer to %s failed", "wait" if waiting else "go on")

    # ------------------------------------------------------------------ the tick

    def tick(self) -> None:
        """One tick: schedule → sample → stream → decode → postprocess → finish → dispatch
        (a prompt that ends beside decode rows is read first, ``_read_first``)."""
        started = time.perf_counter()
        self.hold_writes()
        plan = self.schedule()
        if plan.ops:
            sampled = self.sample(plan)
            if sampled is not None:
                pushed = self.stream(plan, sampled)  # tokens reach their streams before the decode runs
                self.hold_writes()
                self._cold_saves(plan)
                ran, ran_pushed, rest, rest_pushed = plan, pushed, plan, pushed
                split = first_reads(plan, pushed) if self.config.read_first else None
                if split is not None:
                    ran, ran_pushed, rest, rest_pushed = self._read_first(*split)
                if self.decode(rest, rest_pushed):
                    self.postprocess(rest)
                self.budget.record(ran)
                ms = (time.perf_counter() - started) * 1000
                self.read_ahead.record(ms)
                drafts = self.speculator.observe(ran, ran_pushed, ms)
                self.ticks.append(TickInfo(ran.num_prefill_tokens, ran.num_decode_rows, ms, drafts))
        self.finish()
        self.dispatch()

    def _read_first(self, first: Part, rest: Part) -> tuple[TickPlan, list[StepResult], TickPlan, list[StepResult]]:
        """The tick's prompts that end now (``first``) go in a ``llama_decode`` of their own,
        and each one's first token is sampled and streamed at once; then the decode rows (their
        tokens streamed already) and those first tokens go in a second one. Returns the tick as
        it ran (for the budgets) and the second call's plan, each with its pushes.

        NOTE: with a KV stream per sequence llama.cpp splits a tick's batch into ubatches of
        equal rows per sequence (``split_equal``), so a 17-token prompt end beside 3 decode
        rows was two ubatches already (4 rows, then 16): the same work in two calls costs
        the same, but the first token no longer waits for the decode rows' ubatch (on this
        machine, SmolLM2, 2 threads: 17 tokens alone 114 ms, 3 decode rows 35 ms, together
        149 ms). The decode rows' tokens reach their streams when they did (before both
        calls), and their next ones after the second call, as after the one call before.
        The new reply's second token comes a tick sooner too. Bit-identical: every row's
        result is independent of what shares its batch (docs/design.md §3)."""
        plan_first, pushed_first = first
        plan_rest, pushed_rest = rest
        if self.decode(plan_first, pushed_first):
            self.postprocess(plan_first)
        ready = [self.reqs[op.seq_id] for op in plan_first.ops]
        starts = TickPlan(tuple(decode_op(r) for r in ready if r.wants_decode))
        sampled = self.sample(starts) if starts.ops else None
        if sampled is not None:
            pushed = self.stream(starts, sampled)
            self.hold_writes()
            self._cold_saves(starts)  # the seq holds the whole prompt, before its first token
            rows = sorted(zip((*plan_rest.ops, *starts.ops), (*pushed_rest, *pushed), strict=True),
                          key=lambda row: row[0].seq_id)  # consecutive seq ids share a ubatch
            plan_rest = TickPlan(tuple(op for op, _ in rows))
            pushed_rest = [res for _, res in rows]
        ran = TickPlan((*plan_first.ops, *plan_rest.ops))
        return ran, [*pushed_first, *pushed_rest], plan_rest, pushed_rest

    def schedule(self) -> TickPlan:
        """A decode row per decoding request, prefill slices under the budgets (``batch``),
        then a background slice when nothing real waits (``read_ahead``), and draft rows where
        they pay (``speculation``)."""
        reqs = list(self.reqs.values())
        try:
            plan = plan_tick([r for r in reqs if not r.is_background], self.config, self.budget)
        except EngineError as exc:  # n_batch_too_small: every tick would fail the same way
            for req in self.reqs.values():
                req.fail(exc)
            return TickPlan()
        return self.speculator.plan(self.read_ahead.plan(plan, reqs), self.reqs)

    def sample(self, plan: TickPlan) -> list[StepResult] | None:
        """First half of the backend step; None when it refused the plan.

        NOTE: ``sample`` raises before any sampler or KV changes, so when the backend names the
        op it refused (``EngineError.seq_id``, e.g. a token outside the vocabulary) only that
        request fails and the others run on next tick; an error naming no op fails the plan's
        requests.
        """
        try:
            return self.backend.sample(plan.ops)
        except Exception as exc:
            seq_id = exc.seq_id if isinstance(exc, EngineError) else None
            culprits = (seq_id,) if seq_id in plan.seq_ids else plan.seq_ids
            log.log(logging.WARNING if isinstance(exc, EngineError) else logging.ERROR,
                    "the backend refused a tick; failing seqs %s", culprits, exc_info=True)  # fmt: skip
            for seq in culprits:
                self.reqs[seq].fail(exc)
            return None

    def stream(self, plan: TickPlan, sampled: list[StepResult]) -> list[StepResult]:
        """Between ``sample`` and ``decode``: each sampled token (after the drafts it verified)
        reaches its stream now, until its request finishes. Returns what ``decode`` pushes.

        NOTE: a token reaches its stream one decode earlier than it would after the step,
        which for a first token behind another request's prefill is that whole prefill.
        """
        pushed = list(sampled)
        for i, (op, res) in enumerate(zip(plan.ops, sampled, strict=True)):
            if isinstance(op, DecodeOp):
                assert isinstance(res, Sampled)
                req = self.reqs[op.seq_id]
                self._accept_tokens(req, op, res)
                try:
                    pushed[i] = self.speculator.commit(req, op, res)
                except Exception as exc:  # a bug: this request fails, the tick goes on
                    log.exception("request %d: speculation failed after its tokens", req.ref)
                    req.fail(exc)
        self.speculator.draft_with_model(plan, pushed)
        return pushed

    def decode(self, plan: TickPlan, sampled: list[StepResult]) -> bool:
        """Second half of the backend step: one ``llama_decode``.

        NOTE: when it fails, the plan's requests fail (their samplers advanced and their KV
        may hold part of the batch); requests the plan left out run on.
        """
        try:
            self.backend.decode(plan.ops, sampled, background=plan.background, before=partial(self._reading, plan))
        except Exception as exc:
            log.error("the tick's decode failed; failing seqs %s", plan.seq_ids, exc_info=True)
            for seq in plan.seq_ids:
                self.reqs[seq].fail(exc)
            return False
        return True

    def _reading(self, plan: TickPlan) -> None:
        """The plan's requests whose first batch this is: their ``on_reading``, once. NOTE:
        the backend calls it right before the ``llama_decode`` (``Backend.decode``'s
        ``before``), which runs without the GIL: a thread waiting for this (the GUI thread
        after a send) takes the GIL while llama.cpp reads. Called before the tick's other
        native calls (switching llama.cpp's threads after a type-ahead tick), it let the woken
        GUI thread take the GIL at one of them, and the decode waited for it: in seven traces of
        B11 the read started 3.0-6.0 ms after the bridge's submit in 14 of 47 typed turns, each
        time after the GUI thread had returned from its wait; 0.6-1.7 ms in the others."""
        for op in plan.ops:
            req = self.reqs[op.seq_id]
            if req.on_reading is not None:
                call, req.on_reading = req.on_reading, None
                try:
                    call()
                except Exception:
                    log.exception("on_reading of request %d raised", req.ref)

    def postprocess(self, plan: TickPlan) -> None:
        """After the decode, the KV holds every op's tokens: prefill progress, then cold and
        continued saves (a cache key always describes exactly the tokens in the seq's cells)."""
        for op in plan.ops:
            req = self.reqs[op.seq_id]
            try:
                if isinstance(op, PrefillOp):
                    self._prefilled(req, op.tokens)
                else:
                    self.saver.continued(req)
            except Exception as exc:
                log.exception("request %d failed after its decode", req.ref)
                req.fail(exc)

    def finish(self) -> None:
        """End every request marked this tick (``finishing``: save, release, Done or Error)."""
        for req in [r for r in self.reqs.values() if r.finishing]:
            self.finisher.end(req)

    def dispatch(self) -> None:
        """Start waiting admissions on the seqs that came free."""
        self.admission.dispatch()

    # ------------------------------------------------------------------ the tick's steps

    def _accept_tokens(self, req: Request, op: DecodeOp, res: Sampled) -> None:
        """The drafts the model agreed with, then the sampled token, one by one."""
        tokens = (*res.accepted, res.token)
        for i, token in enumerate(tokens):
            is_eog = res.is_eog if i == len(res.accepted) else self.backend.is_eog(token)
            try:
                self._accept_token(req, op, token, is_eog)
            except Exception as exc:
                log.exception("request %d failed on its token %d", req.ref, token)
                req.fail(exc)
            if req.finishing:
                return

    def _accept_token(self, req: Request, op: DecodeOp, token: int, is_eog: bool) -> None:
        if op.greedy and req.sampler is not None:
            # Chosen outside the request's chain (tool-call syntax): keep the chain's history
            # (repetition penalty, grammar) in step.
            self.backend.accept(req.sampler, token)
        req.generated.append(token)
        req.context_tokens.append(token)
        self.num_generated += 1
        if req.times.first_token_at is None:
            req.times.first_token_at = time.perf_counter()
        req.emit(TokenId(token))
        if not is_eog:
            try:
                req.text.push(token)
            except InvalidRequest as exc:  # e.g. thinking output without the opt-in
                req.fail(exc)
                return
        if (is_eog and not req.options.ignore_eos) or req.text.stop_sequence is not None:
            req.mark("stop")
        elif len(req.context_tokens) >= self.config.n_ctx_per_seq:
            req.context_full = True
            req.mark("length")
        elif req.num_generated >= req.options.response_tokens:
            req.mark("length")

    def _prefilled(self, req: Request, tokens: Sequence[int]) -> None:
        req.context_tokens.extend(tokens)
        del req.prefill_cursor[: len(tokens)]
        req.emit(PrefillProgress(len(req.context_tokens), req.num_prompt_tokens))
        reason = req.save_reason_here()
        if reason is not None:
            self.saver.prefill_point(req, reason)
        self.shares.on_progress(req)
        if req.prefill_cursor:
            return
        req.times.prefill_done_at = time.perf_counter()
        if req.mode is Mode.PREFILL_ONLY:
            req.mark("stop")

    # ------------------------------------------------------------------ observability

    @property
    def phase(self) -> str:
        if not self.reqs:
            return "idle"
        return "prefilling" if any(r.is_prefilling for r in self.reqs.values()) else "generating"

    def publish(self) -> None:
        self.hold_writes()
        self.snapshot = snapshot_of(self)

    def _text_pipeline(self, adm: Admission) -> TextPipeline:
        opts = adm.options
        return TextPipeline(
            self.backend.token_piece, adm.emit, stop_sequences=opts.stop_sequences,
            thinking_enabled=opts.thinking, thinking_budget_tokens=opts.thinking_budget_tokens,
            thinking_markers=self.thinking_markers, tool_markers=self.tool_markers,
            signing_key=self.config.thinking_signing_key,
        )  # fmt: skip


def start_thread(scheduler: Scheduler, name: str) -> threading.Thread:
    thread = threading.Thread(target=scheduler.run, name=name, daemon=True)
    thread.start()
    return thread
