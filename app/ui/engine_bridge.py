"""The bridge between one loaded model and the widgets: a thread and a coalescer.

A :class:`_BridgeWorker` lives in its own ``QThread`` per model and is the only UI-side code
that calls the model's native side. What a request sends is decided by the model's
:class:`app.conversation.turns.Turns` (the view under the chat's overflow policy, the
template, the sticky session, type-ahead's reads), called on this thread; the worker starts
the stream (``continue_session``, ``infer`` or ``read_ahead``), counts tokens for the
composer, and hands the engine an ``on_event`` callback. That callback runs on the engine's
scheduler thread, so it only appends to a locked buffer; a frame timer in the worker thread
drains the buffers every ~16 ms and emits one frozen :class:`StreamUpdate` per request, which
reaches the GUI thread as a queued signal (a token that comes a frame or more after the last
drain, or a reply's first, is drained at once). The GUI thread therefore sees about 60 small
updates per second per request at most.

The GUI thread waits on the engine in one place: ``EngineBridge.submit``, when the model runs
nothing else, waits until the engine starts reading the request's prompt, at most
``READING_WAIT_S`` (15 ms), and then keeps off the core it reads on (``gui_affinity``) until
the request's first update. Nothing else here blocks the GUI thread but ``shutdown``, which
stops the worker (waiting for the call it is in) before the model may be unloaded: no native
call can follow the model's free.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from PySide6.QtCore import QCoreApplication, QMetaObject, QObject, Qt, QThread, QTimer, Signal, Slot

from app import latency
from app.cache.prefix import common_prefix_len
from app.conversation.requests import (
    GenerationRequest,
    ReadAheadRequest,
    SummaryRequest,
    WindowReport,
)
from app.conversation.state import SessionState
from app.conversation.turns import DEFAULT_REPLY_TOKENS, TRIMS, ReadPlan, SendPlan, Turns
from app.conversation.window import SUMMARY_OPENING
from app.engine.config import request_threads
from app.engine.errors import EngineError
from app.engine.events import (
    Done,
    Error,
    Event,
    PrefillProgress,
    Stats,
    ThinkingDelta,
    ThinkingEnd,
    Token,
    TokenId,
    ToolCallEnd,
)
from app.server.grammar import TOOL_CLOSE, TOOL_OPEN
from app.storage import ReplyStats
from app.ui import gui_affinity
from app.ui.bridge_records import ReadAheadUpdate, StatusSnapshot, StreamUpdate
from app.ui.engine_api import ModelApi, StreamApi
from app.ui.reading_wait import ReadingWaits

log = logging.getLogger(__name__)

FRAME_MS = 16
WAKE_MS = 2
READING_WAIT_S = 0.015
"""How long ``EngineBridge.submit`` waits, at most, for the engine to start reading the
request's prompt. NOTE: Python threads share one GIL, and a thread that wants it back waits
up to 5 ms (``sys.getswitchinterval``) while another runs Python. Right after a send the GUI
thread redraws the chat and stores the message (10-20 ms of Python) while the bridge worker
and the scheduler thread need the GIL a dozen times to render, admit and batch the request:
B11's traces had 4-8.5 ms from the submit to the ``llama_decode`` (1.4 ms when the GUI thread
waited), on a reply whose 6 prompt tokens then took ~40 ms. Waiting here gives them the GIL;
the redraw then runs while llama.cpp reads (without the GIL). Bounded: a request queued behind
a long tick, or for a free seq, does not hold the GUI longer than this."""
KEEP_OFF_MAX_MS = 5000
"""How long the GUI thread keeps off the core where a request's reading started, at most,
when no update of it comes sooner (``gui_affinity``; the first one ends it)."""
STATUS_MS = 500


@dataclass(slots=True)
class _Live:
    """Worker-side state of one request; events are appended from the scheduler thread."""

    request_id: str
    session_id: str | None
    prompt: list[int]
    path: str
    window: WindowReport | None = None
    stream: StreamApi | None = None
    events: list[Event] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    finished: bool = False
    oldest_at: float = 0.0
    """``perf_counter()`` when the oldest event not yet flushed arrived."""
    answered: bool = False
    """Its first token has arrived (and was flushed at once, not at the next frame)."""


@dataclass(slots=True)
class _Reading:
    """Worker-side state of one chat's read-ahead (type-ahead); ``held`` and ``finished`` are
    set from the scheduler thread, under the worker's lock."""

    session_id: str
    generation: int
    tokens: tuple[int, ...]
    draft_start: int
    stream: StreamApi | None = None
    held: int = 0
    finished: bool = False
    cancelled: bool = False
    dirty: bool = True
    """Changed since the last ``ReadAheadUpdate``."""


class _BridgeWorker(QObject):
    update_ready = Signal(object)  # StreamUpdate
    read_ahead_ready = Signal(object)  # ReadAheadUpdate
    status_ready = Signal(object)  # StatusSnapshot
    count_ready = Signal(str, int)  # key, tokens
    _first_token = Signal()  # from the scheduler thread: flush now
    _late_token = Signal()  # from the scheduler thread: flush in WAKE_MS

    def __init__(self, model: ModelApi, model_id: str, turns: Turns, readings: ReadingWaits) -> None:
        super().__init__()
        self._model = model
        self._model_id = model_id
        self._n_ctx = int(model.config.n_ctx)
        self._lock = threading.Lock()
        self._closed = False
        self._live: dict[str, _Live] = {}
        self._readings = readings
        """What the GUI thread waits on until the engine reads a request (``EngineBridge.submit``)."""
        self._reading: dict[str, _Reading] = {}  # session id → its latest read-ahead
        self.turns = turns
        """What each request sends, and what each chat's sequence holds (``app.conversation``)."""
        self._frame = QTimer(self)
        self._frame.setInterval(FRAME_MS)
        self._frame.timeout.connect(self._flush)
        # NOTE: a reply's first token is flushed at once: TTFT is what a user waits for most,
        # and waiting for the next frame added 8 ms on average (B11). So is any token that
        # comes a frame or more after the last flush: decode ticks of several streams come
        # every ~50 ms on SmolLM2, and each waited for the frame timer (0-16 ms) before it
        # could be painted (B6, docs/benchmarks.md). Flushes stay at most one a frame otherwise.
        # A late token is flushed WAKE_MS after it came, with whatever the same decode tick
        # brings for the other streams (they come one after the other).
        self._flushed_at = 0.0
        self._wake_posted = False
        self._first_token.connect(self._wake, Qt.ConnectionType.QueuedConnection)
        self._late_token.connect(self._wake_soon, Qt.ConnectionType.QueuedConnection)
        self._soon = QTimer(self)
        self._soon.setSingleShot(True)
        self._soon.setTimerType(Qt.TimerType.PreciseTimer)
        self._soon.setInterval(WAKE_MS)
        self._soon.timeout.connect(self._wake)
        self._status = QTimer(self)
        self._status.setInterval(STATUS_MS)
        self._status.timeout.connect(self._poll_status)

    @Slot()
    def start(self) -> None:
        self._status.start()
        self._poll_status()

    # -- requests ----------------------------------------------------------------------------

    @Slot(object)
    def submit(self, request: GenerationRequest) -> None:
        rid = request.request_id
        self._guarded(rid, lambda: self._submit(request))
        with self._lock:
            live = self._live.get(rid)
        if live is None or live.stream is None:  # nothing will be read (refused, or not sendable)
            self._reading_started(rid)

    def _reading_started(self, request_id: str, cpu: int | None = None) -> None:
        """The scheduler's thread (``cpu``: the core it reads on), or this one (None)."""
        self._readings.started(request_id, cpu)

    def _engine_reads(self, request_id: str) -> None:  # the scheduler's thread: ``on_reading``
        self._reading_started(request_id, gui_affinity.current_cpu())

    @Slot(object)
    def summarise(self, request: SummaryRequest) -> None:
        self._guarded(request.request_id, lambda: self._summarise(request))

    @Slot(str, str)
    def count_tokens(self, key: str, text: str) -> None:
        try:
            n = len(self._model.tokenize(text)) if text else 0
        except EngineError as exc:  # the model is closing: no count, no harm
            log.info("token count skipped: %s", exc)
            return
        self.count_ready.emit(key, n)

    def _guarded(self, request_id: str, start: Callable[[], None]) -> None:
        """Run ``start``; a failure becomes this request's error update, never a silent end.

        ``EngineError`` is the engine refusing (bad options, a full context, an unloaded
        model): the user reads its message. Anything else is our bug: logged with its
        traceback, and still reported so the conversation does not wait forever.
        """
        try:
            start()
        except EngineError as exc:
            log.info("request %s refused: %s", request_id, exc)
            self._emit_error(request_id, str(exc), exc.code)
        except Exception as exc:
            log.exception("request %s failed to start", request_id)
            self._emit_error(request_id, f"internal error ({type(exc).__name__}: {exc})", "bug")

    def _emit_error(self, request_id: str, text: str, code: str) -> None:
        with self._lock:
            self._live.pop(request_id, None)
        self.update_ready.emit(StreamUpdate(request_id, error=text, error_code=code))

    def _submit(self, request: GenerationRequest) -> None:
        plan = self.turns.plan_send(request)
        if not plan.prompt:
            self.update_ready.emit(StreamUpdate(request.request_id, window=plan.report))
            return
        self._start_stream(request, plan)

    def _start_stream(self, request: GenerationRequest, plan: SendPlan) -> None:
        sid, rid = request.session_id, request.request_id
        live = self._add_live(_Live(rid, sid, plan.prompt, "infer", plan.report))
        callback = partial(self._on_event, rid)
        reading = partial(self._engine_reads, rid)
        stream = None
        with self._lock:
            self._reading.pop(sid, None)  # the engine ends it: this request takes its seq
        if plan.suffix is not None:
            try:
                stream = self._model.continue_session(
                    plan.suffix, session_id=sid, on_event=callback, on_reading=reading, **plan.params
                )
                live.path = "continue_session"
            except EngineError as exc:  # the session was evicted or ended meanwhile
                log.info("continue_session(%s) refused (%s); sending the full prompt", sid, exc)
        if stream is None:
            stream = self._model.infer(plan.prompt, session_id=sid, on_event=callback, on_reading=reading, **plan.params)
        live.stream = stream
        self._start_frames()

    # -- type-ahead ----------------------------------------------------------------------------

    @Slot(object)
    def read_ahead(self, ask: ReadAheadRequest) -> None:
        """Read the prompt of ``ask`` (the chat with its draft) into the chat's sequence, at
        the engine's lowest priority; a refusal only means nothing is read ahead."""
        sid = ask.request.session_id
        try:
            self._read_ahead(ask)
        except EngineError as exc:  # the model is closing, the session was just ended …
            log.info("read-ahead of %s skipped: %s", sid, exc)
            self._skip(ask, str(exc))
        except Exception as exc:
            log.exception("read-ahead of %s failed", sid)
            self._skip(ask, f"internal error ({type(exc).__name__})")

    def _read_ahead(self, ask: ReadAheadRequest) -> None:
        plan = self.turns.plan_read(ask)
        if plan is None:
            return  # a newer draft is asked for, or the message was sent: nothing to say
        if not plan.tokens:
            self._skip(ask, plan.skipped)
            return
        self._start_read(ask, plan)

    def _start_read(self, ask: ReadAheadRequest, plan: ReadPlan) -> None:
        sid, tokens = ask.request.session_id, plan.tokens
        with self._lock:  # ``cancelled`` is set under it on the scheduler's thread
            old = self._reading.get(sid)
            same = old is not None and old.tokens == tokens and not old.cancelled
            if same and old is not None:
                old.generation, old.dirty = ask.generation, True  # read, or being read, already
        if same:
            self._start_frames()
            return
        reading = _Reading(sid, ask.generation, tokens, plan.draft_start)
        with self._lock:
            if old is not None and not old.cancelled:
                # What the older draft's read put in the chat's sequence stays there for this
                # one: its progress starts from it, not from 0 until the engine's first report
                # ("Reading the prompt… 0 / 819" flashed when the user typed after a paste).
                reading.held = min(old.held, common_prefix_len(old.tokens, tokens))
            self._reading[sid] = reading
        reading.stream = self._model.read_ahead(list(tokens), session_id=sid, on_event=partial(self._on_read_event, reading))
        self._start_frames()

    def _on_read_event(self, reading: _Reading, event: Event) -> None:
        """The scheduler's thread (a read-ahead's ``on_event``): note how far it read, only."""
        with self._lock:
            if isinstance(event, PrefillProgress):
                reading.held = event.done
            elif isinstance(event, Done | Error):
                reading.finished = True
                reading.cancelled = isinstance(event, Error) or event.stats.finish_reason == "cancelled"
            reading.dirty = True

    def _skip(self, ask: ReadAheadRequest, why: str) -> None:
        update = ReadAheadUpdate(ask.request.session_id, ask.generation, finished=True, skipped=why)
        self.read_ahead_ready.emit(update)

    @Slot(str)
    def stop_read_ahead(self, session_id: str) -> None:
        """The draft was cleared or the chat left: stop reading (what was read stays)."""
        with self._lock:
            reading = self._reading.get(session_id)
        if reading is not None and reading.stream is not None and not reading.finished:
            reading.stream.cancel()

    def _summarise(self, request: SummaryRequest) -> None:
        prompt, params = self.turns.summary(request)
        live = self._add_live(_Live(request.request_id, None, prompt, "summary"))
        # The prompt ends with the summary's first words; the summary is them + the reply.
        self.update_ready.emit(StreamUpdate(request.request_id, text=SUMMARY_OPENING))
        live.stream = self._model.infer(
            prompt, on_event=partial(self._on_event, request.request_id), on_reading=None, **params
        )
        self._start_frames()

    def _add_live(self, live: _Live) -> _Live:
        with self._lock:
            self._live[live.request_id] = live
        return live

    def _start_frames(self) -> None:
        if not self._frame.isActive():
            self._frame.start()

    def _on_event(self, request_id: str, event: Event) -> None:
        """The scheduler's thread (a request's ``on_event``): append the event to the request's
        buffer, and wake the frame timer for a reply's first token or a late one."""
        wake = soon = False
        with self._lock:
            live = None if self._closed else self._live.get(request_id)
            if live is not None:
                now = time.perf_counter()
                if not live.events:
                    live.oldest_at = now
                live.events.append(event)
                first = not live.answered and isinstance(event, Token)
                live.answered = live.answered or first
                late = isinstance(event, Token) and now - self._flushed_at >= FRAME_MS / 1000
                wake, soon = first and not self._wake_posted, late and not self._wake_posted
                self._wake_posted = self._wake_posted or wake or soon
        if isinstance(event, Done | Error):  # it may end before it is read
            self._reading_started(request_id)
        if wake:
            self._first_token.emit()
        elif soon:
            self._late_token.emit()

    @Slot(str)
    def cancel(self, request_id: str) -> None:
        with self._lock:
            live = self._live.get(request_id)
        if live is not None and live.stream is not None:
            live.stream.cancel()

    @Slot(str)
    def end_session(self, session_id: str) -> None:
        self.turns.end_session(session_id)
        self.stop_read_ahead(session_id)
        try:
            self._model.end_session(session_id)
        except EngineError as exc:  # no such session, or the model is closing
            log.info("end_session(%s): %s", session_id, exc)

    @Slot()
    def stop(self) -> None:
        self._frame.stop()
        self._soon.stop()
        self._status.stop()
        with self._lock:
            self._closed = True
            lives = list(self._live.values())
            self._live.clear()
            readings = list(self._reading.values())
            self._reading.clear()
        for live in lives:
            if live.stream is not None:
                live.stream.cancel()
        for reading in readings:
            if reading.stream is not None and not reading.finished:
                reading.stream.cancel()
        # Hand the worker back to the GUI thread so it can be deleted there after quit().
        app = QCoreApplication.instance()
        if app is not None:
            self.moveToThread(app.thread())

    # -- frames ------------------------------------------------------------------------------

    @Slot()
    def _wake_soon(self) -> None:
        if not self._soon.isActive():
            self._soon.start()

    @Slot()
    def _wake(self) -> None:
        """Flush now (a reply's first token, or WAKE_MS after a token a frame after the last
        flush); the frame timer starts again from here."""
        self._soon.stop()
        with self._lock:
            self._wake_posted = False
        self._frame.start()
        self._flush()

    @Slot()
    def _flush(self) -> None:
        with self._lock:
            self._flushed_at = time.perf_counter()  # read under the lock on the scheduler's thread
            batches = [(rid, live, live.events) for rid, live in self._live.items() if live.events]
            for _rid, live, _events in batches:
                live.events = []
        for rid, live, events in batches:
            self.update_ready.emit(self._fold(rid, live, events))
            if live.finished:
                with self._lock:
                    self._live.pop(rid, None)
        self._flush_readings()
        with self._lock:
            idle = not self._live and not self._reading
        if any(live.finished for _rid, live, _events in batches):
            self._poll_status()  # the status bar shows the freed slot at once
        if idle:
            self._frame.stop()

    def _flush_readings(self) -> None:
        updates = []
        with self._lock:
            for sid, r in list(self._reading.items()):
                if r.dirty:
                    r.dirty = False
                    updates.append(ReadAheadUpdate(sid, r.generation, r.held, len(r.tokens), r.draft_start, r.finished))
                if r.finished:
                    del self._reading[sid]
        for update in updates:
            self.read_ahead_ready.emit(update)

    def _fold(self, rid: str, live: _Live, events: list[Event]) -> StreamUpdate:
        text: list[str] = []
        thinking: list[str] = []
        thinking_ended = False
        done = None
        error = code = None
        num_tokens = 0
        session = None
        prefill = None
        for ev in events:
            if isinstance(ev, Token):
                text.append(ev.text)
            elif isinstance(ev, TokenId):
                live.generated.append(ev.id)
                num_tokens += 1
            elif isinstance(ev, PrefillProgress):
                prefill = (ev.done, ev.total)
            elif isinstance(ev, ThinkingDelta):
                thinking.append(ev.text)
            elif isinstance(ev, ThinkingEnd):
                thinking_ended = True
            elif isinstance(ev, ToolCallEnd):  # native mode: the call, as the server writes it
                text.append(f"{TOOL_OPEN}{ev.full}{TOOL_CLOSE}")
            elif isinstance(ev, Done):
                live.finished = True
                done = reply_stats(ev.stats)
                session = self.turns.remember(live.session_id, live.prompt, live.generated, ev.stats)
            elif isinstance(ev, Error):
                live.finished = True
                error, code = ev.reason, ev.code
        window, live.window = live.window, None  # reported once, with the first frame
        return StreamUpdate(
            rid,
            "".join(text),
            "".join(thinking),
            thinking_ended,
            num_tokens,
            done,
            error,
            code,
            live.path,
            session,
            prefill,
            window,
            live.oldest_at,
        )

    @Slot()
    def _poll_status(self) -> None:
        snap = self._model.snapshot()  # a plain read of the record the scheduler published
        busy = sum(1 for s in snap.slots if s.state in ("prefilling", "generating"))
        self.status_ready.emit(
            StatusSnapshot(
                model_id=self._model_id,
                num_slots=len(snap.slots),
                num_busy=busy,
                pending_len=snap.pending_len,
                phase=snap.phase,
                n_ctx=self._n_ctx,
            ),
        )


def reply_stats(stats: Stats) -> ReplyStats:
    """The one copy of the engine's ``Stats`` the app keeps (shown, then stored)."""
    gen_ms = float(stats.generation_ms or 0.0)
    tps = (stats.completion_tokens / (gen_ms / 1000.0)) if gen_ms > 0 else 0.0
    reuse = stats.reuse
    return ReplyStats(
        ttft_ms=float(stats.ttft_ms),
        tokens_per_s=tps,
        cache_hit_kind=str(stats.cache_hit_kind),
        cache_read=int(stats.cache_delta.read),
        cache_created=int(stats.cache_delta.created),
        prompt_tokens=int(stats.prompt_tokens),
        completion_tokens=int(stats.completion_tokens),
        finish_reason=str(stats.finish_reason),
        context_full=bool(stats.context_full),
        prefill_ms=float(stats.prefill_ms),
        reuse_source=str(reuse.source),
        tokens_reused=int(reuse.tokens_reused),
        tokens_shared=int(reuse.tokens_shared),
        miss_reason=reuse.miss_reason or "",
        origin_session=reuse.origin_session or "",
        tokens_read_ahead=int(reuse.tokens_read_ahead),
        drafted_tokens=int(stats.drafted_tokens),
        accepted_tokens=int(stats.accepted_tokens),
    )


class EngineBridge(QObject):
    """GUI-side handle of one model's worker: methods queue work, signals carry snapshots."""

    update_received = Signal(object)  # StreamUpdate
    status_received = Signal(object)  # StatusSnapshot
    count_received = Signal(str, int)  # key, tokens
    read_ahead_received = Signal(object)  # ReadAheadUpdate

    _submit_requested = Signal(object)
    _read_ahead_requested = Signal(object)
    _stop_read_ahead_requested = Signal(str)
    _summary_requested = Signal(object)
    _count_requested = Signal(str, str)
    _cancel_requested = Signal(str)
    _end_session_requested = Signal(str)

    def __init__(self, model: ModelApi, model_id: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model_id = model_id
        self.model = model
        self.n_ctx = int(model.config.n_ctx)
        self.closed = False
        config = model.config
        self._threads = request_threads(getattr(config, "n_threads", None), getattr(config, "n_threads_batch", None))
        """The most threads llama.cpp reads a request with (``gui_affinity``)."""
        self._thread = QThread()
        self._thread.setObjectName(f"bridge-{model_id}")
        self.readings = ReadingWaits()
        """The sends waiting for the engine to read them (``submit``)."""
        self._turns = Turns(model, model_id, self.n_ctx, trims=model.model_info().memory in TRIMS)
        """Used on the worker's thread; only ``note_read`` here, before a request is queued."""
        self._worker = _BridgeWorker(model, model_id, self._turns, self.readings)
        self._worker.moveToThread(self._thread)
        self._thread.started.connect(self._worker.start)
        self._submit_requested.connect(self._worker.submit)
        self._summary_requested.connect(self._worker.summarise)
        self._count_requested.connect(self._worker.count_tokens)
        self._cancel_requested.connect(self._worker.cancel)
        self._end_session_requested.connect(self._worker.end_session)
        self._read_ahead_requested.connect(self._worker.read_ahead)
        self._stop_read_ahead_requested.connect(self._worker.stop_read_ahead)
        self._worker.read_ahead_ready.connect(self.read_ahead_received)
        self._worker.update_ready.connect(self._on_update)
        self._worker.update_ready.connect(self.update_received)
        self._worker.status_ready.connect(self.status_received)
        self._worker.count_ready.connect(self.count_received)
        self._thread.start()

    def submit(self, request: GenerationRequest) -> None:
        """Queue ``request``; when the engine runs nothing else, wait until it reads the
        prompt (at most ``READING_WAIT_S``; see there why): what the caller does next (a
        redraw, storing the message) runs while llama.cpp reads, and off the core it reads on
        until the request's first update (``gui_affinity``).

        NOTE: not while anything runs (other replies, prompts, a type-ahead slice): the
        request then starts after the tick in flight (tens of ms), so the wait would mostly
        end at its bound, 15 ms of GUI stall that buy nothing. (B6's stall while its four
        chats are created and sent, not in its goal, was 65.8 ms with the wait there and
        81.0 ms without, 44.1 ms at 04:11: that figure moves with the minute, not with this.)"""
        self._turns.note_read(request.session_id, -1)  # reads still queued are moot
        reading = self.readings.expect(request.request_id) if self._engine_idle() else None
        self._submit_requested.emit(request)
        if reading is not None:
            reading.wait(0 if latency.off("reading_wait") else READING_WAIT_S)
            self.readings.forget(request.request_id)
            rid = request.request_id
            if reading.cpu is not None and gui_affinity.GUARD.keep_off(reading.cpu, self._threads, rid):
                QTimer.singleShot(KEEP_OFF_MAX_MS, self, partial(self._release_core, rid))

    @Slot(object)
    def _on_update(self, update: StreamUpdate) -> None:
        self._release_core(update.request_id)

    def _release_core(self, request_id: str) -> None:
        """The GUI thread's cores back, if ``request_id``'s reading narrowed them."""
        if gui_affinity.GUARD.request_id == request_id:
            gui_affinity.GUARD.release()

    def _engine_idle(self) -> bool:
        """Nothing runs on the model (as of its scheduler's last tick)."""
        return all(s.state in ("free", "pinned") for s in self.model.snapshot().slots)

    def summarise(self, request: SummaryRequest) -> None:
        self._summary_requested.emit(request)

    def count_tokens(self, key: str, text: str) -> None:
        if not self.closed:
            self._count_requested.emit(key, text)

    def cancel(self, request_id: str) -> None:
        self._cancel_requested.emit(request_id)

    def read_ahead(self, ask: ReadAheadRequest) -> None:
        """Type-ahead: read the chat's draft ahead (off the GUI thread, lowest priority)."""
        if not self.closed:
            self._turns.note_read(ask.request.session_id, ask.generation)
            self._read_ahead_requested.emit(ask)

    def stop_read_ahead(self, session_id: str) -> None:
        if not self.closed:
            self._stop_read_ahead_requested.emit(session_id)

    def end_session(self, session_id: str) -> None:
        if not self.closed:
            self._end_session_requested.emit(session_id)

    def shutdown(self) -> None:
        """Cancel in-flight work and stop the worker thread; idempotent.

        Blocks until the worker has returned from whatever model call it is in, so once this
        returns nothing on the UI side touches the model again (call before ``unload``).
        """
        self.closed = True
        gui_affinity.GUARD.release()
        if not self._thread.isRunning():
            return
        QMetaObject.invokeMethod(self._worker, "stop", Qt.ConnectionType.BlockingQueuedConnection)
        self._thread.quit()
        self._thread.wait()


class SchedulerQThread(QThread):
    """Runs one model's scheduler loop (``scheduler.run``) in a ``QThread``.

    Handed to ``Engine(thread_starter=qthread_starter)``; ``join`` lets ``Engine.unload``
    wait for it like a ``threading.Thread``.
    """

    def __init__(self, scheduler: _Runnable, name: str) -> None:
        super().__init__()
        self.setObjectName(name)
        self._scheduler = scheduler

    def run(self) -> None:
        self._scheduler.run()

    def join(self, timeout: float | None = None) -> None:
        self.wait(-1 if timeout is None else int(timeout * 1000))


class _Runnable(Protocol):
    def run(self) -> None: ...


def qthread_starter(scheduler: _Runnable, name: str) -> SchedulerQThread:
    thread = SchedulerQThread(scheduler, name)
    thread.start()
    return thread


__all__ = [
    "DEFAULT_REPLY_TOKENS",
    "EngineBridge",
    "GenerationRequest",
    "SessionState",
    "StatusSnapshot",
    "StreamUpdate",
    "SummaryRequest",
    "qthread_starter",
    "reply_stats",
]
