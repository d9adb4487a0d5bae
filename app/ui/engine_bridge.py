"""The bridge between one loaded ``Model`` and the widgets.

A :class:`_BridgeWorker` lives in its own ``QThread`` per model and is the only UI-side code
that calls the model: it renders the chat template, decides between ``continue_session`` and
``infer``, and hands the engine an ``on_event`` callback. That callback runs on the engine's
scheduler thread, so it only appends to a locked buffer; a frame timer in the worker thread
drains the buffers every ~16 ms and emits one frozen :class:`StreamUpdate` per request, which
reaches the GUI thread as a queued signal. The GUI thread therefore sees at most ~60 small
updates per second per request, whatever the token rate, and never waits on the engine.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QCoreApplication, QMetaObject, QObject, Qt, QThread, QTimer, Signal, Slot

from app.engine.chat import continuation_suffix
from app.engine.events import Done, Error, Event, ThinkingDelta, ThinkingEnd, Token, TokenId

log = logging.getLogger(__name__)

FRAME_MS = 16
STATUS_MS = 500


@dataclass(frozen=True, slots=True)
class ChatTurn:
    role: str
    content: str


@dataclass(frozen=True, slots=True)
class SessionState:
    """What a sticky session's seq holds after a turn: that turn's prompt and its reply ids.

    Kept by the app across restarts so the first turn after a restart sends exactly the
    tokens the engine saved (an exact-prefix hit on disk) plus the new suffix.
    """

    model_id: str
    prompt: tuple[int, ...]
    generated: tuple[int, ...]
    ended_with_eog: bool

    @property
    def tokens(self) -> list[int]:
        return [*self.prompt, *self.generated]


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One reply to generate: the branch so far and the conversation's settings."""

    request_id: str
    session_id: str
    messages: tuple[ChatTurn, ...]
    system: str
    params: tuple[tuple[str, Any], ...] = ()
    session: SessionState | None = None
    """The session's last known state (from the database), used when the worker has none."""


@dataclass(frozen=True, slots=True)
class ReplyStatsSnapshot:
    ttft_ms: float
    tokens_per_s: float
    cache_hit_kind: str
    cache_read: int
    cache_created: int
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str


@dataclass(frozen=True, slots=True)
class StreamUpdate:
    """Everything that happened to one request since the previous frame."""

    request_id: str
    text: str = ""
    thinking: str = ""
    thinking_ended: bool = False
    num_tokens: int = 0
    done: ReplyStatsSnapshot | None = None
    error: str | None = None
    error_code: str | None = None
    path: str = ""
    """``infer`` or ``continue_session``: how the worker submitted the turn."""
    session: SessionState | None = None


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    model_id: str
    num_slots: int
    num_busy: int
    pending_len: int
    phase: str
    hit_rate: float | None
    counters: tuple[tuple[str, int], ...] = ()


@dataclass(slots=True)
class _Live:
    """Worker-side state of one request; events are appended from the scheduler thread."""

    request: GenerationRequest
    prompt: list[int]
    path: str
    stream: Any = None
    events: list[Event] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    finished: bool = False


HIT_KEYS = ("hits_exact", "hits_resume", "hits_longest_prefix", "hits_sticky")


class _BridgeWorker(QObject):
    update_ready = Signal(object)  # StreamUpdate
    status_ready = Signal(object)  # StatusSnapshot

    def __init__(self, engine: Any, model: Any, model_id: str) -> None:
        super().__init__()
        self._engine = engine
        self._model = model
        self._model_id = model_id
        self._lock = threading.Lock()
        self._live: dict[str, _Live] = {}
        # NOTE: what each sticky session holds, so a follow-up turn sends only its suffix.
        self._held: dict[str, SessionState] = {}
        self._pieces: dict[int, str] = {}
        self._frame = QTimer(self)
        self._frame.setInterval(FRAME_MS)
        self._frame.timeout.connect(self._flush)
        self._status = QTimer(self)
        self._status.setInterval(STATUS_MS)
        self._status.timeout.connect(self._poll_status)

    @Slot()
    def start(self) -> None:
        self._status.start()
        self._poll_status()

    @Slot(object)
    def submit(self, request: GenerationRequest) -> None:
        try:
            self._submit(request)
        except Exception as exc:  # noqa: BLE001 — every failure becomes a visible update
            log.warning("generation %s failed to start: %s", request.request_id, exc)
            self.update_ready.emit(
                StreamUpdate(request.request_id, error=_describe(exc), error_code=_code(exc)),
            )

    def _submit(self, request: GenerationRequest) -> None:
        params = dict(request.params)
        template: dict[str, Any] = {
            "messages": [{"role": m.role, "content": m.content} for m in request.messages]
        }
        if request.system:
            template["system"] = request.system
        full = list(self._model.apply_chat_template(template))
        sid = request.session_id
        pinned = self._held.pop(sid, None)
        held = pinned or request.session
        if held is not None and held.model_id != self._model_id:
            held = None
        suffix = (
            continuation_suffix(full, held.tokens, self._piece, ended_with_eog=held.ended_with_eog)
            if held is not None
            else None
        )
        prompt = full if held is None or not suffix else held.tokens + suffix
        with self._lock:
            live = _Live(request, prompt, "infer")
            self._live[request.request_id] = live
        callback = self._callback(request.request_id)
        stream = None
        if pinned is not None and suffix:
            try:
                stream = self._model.continue_session(
                    suffix, session_id=sid, on_event=callback, **params
                )
                live.path = "continue_session"
            except Exception as exc:  # noqa: BLE001 — the session was evicted or ended
                log.info("continue_session(%s) refused (%s); sending the full prompt", sid, exc)
        if stream is None:
            # NOTE: ``prompt`` is token-for-token what the engine saved for this session when
            # we know it, so after a restart (or an eviction) it restores from the cache.
            try:
                stream = self._model.infer(prompt, session_id=sid, on_event=callback, **params)
            except Exception:
                with self._lock:
                    self._live.pop(request.request_id, None)
                raise
        live.stream = stream
        if not self._frame.isActive():
            self._frame.start()

    def _piece(self, token: int) -> str:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._model.detokenize([token])
            if len(self._pieces) < 200_000:
                self._pieces[token] = piece
        return piece

    def _callback(self, request_id: str) -> Callable[[Event], None]:
        def on_event(event: Event) -> None:  # scheduler thread: append only
            with self._lock:
                live = self._live.get(request_id)
                if live is not None:
                    live.events.append(event)

        return on_event

    @Slot(str)
    def cancel(self, request_id: str) -> None:
        with self._lock:
            live = self._live.get(request_id)
        if live is not None and live.stream is not None:
            live.stream.cancel()

    @Slot(str)
    def end_session(self, session_id: str) -> None:
        self._held.pop(session_id, None)
        try:
            self._model.end_session(session_id)
        except Exception as exc:  # noqa: BLE001
            log.info("end_session(%s): %s", session_id, exc)

    @Slot()
    def stop(self) -> None:
        self._frame.stop()
        self._status.stop()
        with self._lock:
            lives = list(self._live.values())
        for live in lives:
            if live.stream is not None:
                live.stream.cancel()
        # Hand the worker back to the GUI thread so it can be deleted there after quit().
        app = QCoreApplication.instance()
        if app is not None:
            self.moveToThread(app.thread())

    @Slot()
    def _flush(self) -> None:
        with self._lock:
            batches = [(rid, live, live.events) for rid, live in self._live.items() if live.events]
            for _rid, live, _events in batches:
                live.events = []
        for rid, live, events in batches:
            self.update_ready.emit(self._fold(rid, live, events))
            if live.finished:
                with self._lock:
                    self._live.pop(rid, None)
        with self._lock:
            idle = not self._live
        if any(live.finished for _rid, live, _events in batches):
            self._poll_status()  # the status bar shows the freed slot at once
        if idle:
            self._frame.stop()

    def _fold(self, rid: str, live: _Live, events: list[Event]) -> StreamUpdate:
        text: list[str] = []
        thinking: list[str] = []
        thinking_ended = False
        done = None
        error = code = None
        num_tokens = 0
        session = None
        for ev in events:
            if isinstance(ev, Token):
                text.append(ev.text)
            elif isinstance(ev, TokenId):
                live.generated.append(ev.id)
                num_tokens += 1
            elif isinstance(ev, ThinkingDelta):
                thinking.append(ev.text)
            elif isinstance(ev, ThinkingEnd):
                thinking_ended = True
            elif isinstance(ev, Done):
                live.finished = True
                done = _stats(ev.stats)
                session = self._remember_session(live, ev.stats)
            elif isinstance(ev, Error):
                live.finished = True
                error, code = ev.reason, ev.code
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
        )

    def _remember_session(self, live: _Live, stats: Any) -> SessionState | None:
        held = SessionState(
            self._model_id,
            tuple(live.prompt),
            tuple(live.generated),
            ended_with_eog=stats.finish_reason == "stop" and not stats.stop_sequence,
        )
        # NOTE: we only know exactly what the seq holds when the counts agree; otherwise the
        # next turn sends the full prompt and the engine's own sticky check decides.
        if stats.committed_tokens == len(held.tokens):
            self._held[live.request.session_id] = held
            return held
        return None

    @Slot()
    def _poll_status(self) -> None:
        try:
            snap = self._model.snapshot()
            counters = dict(self._engine.counters())
        except Exception as exc:  # noqa: BLE001
            log.debug("status poll failed: %s", exc)
            return
        slots = getattr(snap, "slots", ()) or ()
        busy = sum(1 for s in slots if s.state in ("prefilling", "generating"))
        hits = sum(int(counters.get(k, 0)) for k in HIT_KEYS)
        total = hits + int(counters.get("misses", 0))
        self.status_ready.emit(
            StatusSnapshot(
                model_id=self._model_id,
                num_slots=len(slots),
                num_busy=busy,
                pending_len=int(getattr(snap, "pending_len", 0)),
                phase=str(getattr(snap, "phase", "")),
                hit_rate=(hits / total) if total else None,
                counters=tuple(sorted((k, int(v)) for k, v in counters.items())),
            ),
        )


def _stats(stats: Any) -> ReplyStatsSnapshot:
    gen_ms = float(stats.generation_ms or 0.0)
    tps = (stats.completion_tokens / (gen_ms / 1000.0)) if gen_ms > 0 else 0.0
    delta = stats.cache_delta
    return ReplyStatsSnapshot(
        ttft_ms=float(stats.ttft_ms),
        tokens_per_s=tps,
        cache_hit_kind=str(stats.cache_hit_kind),
        cache_read=int(delta.read),
        cache_created=int(delta.created),
        prompt_tokens=int(stats.prompt_tokens),
        completion_tokens=int(stats.completion_tokens),
        finish_reason=str(stats.finish_reason),
    )


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text


def _code(exc: BaseException) -> str:
    return str(getattr(exc, "code", type(exc).__name__))


class EngineBridge(QObject):
    """GUI-side handle: methods queue work to the worker thread, signals carry snapshots."""

    update_received = Signal(object)  # StreamUpdate
    status_received = Signal(object)  # StatusSnapshot

    _submit_requested = Signal(object)
    _cancel_requested = Signal(str)
    _end_session_requested = Signal(str)

    def __init__(
        self, engine: Any, model: Any, model_id: str, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.model_id = model_id
        self.model = model
        self._thread = QThread()
        self._thread.setObjectName(f"bridge-{model_id}")
        self._worker = _BridgeWorker(engine, model, model_id)
        self._worker.moveToThread(self._thread)
        self._thread.started.connect(self._worker.start)
        self._submit_requested.connect(self._worker.submit)
        self._cancel_requested.connect(self._worker.cancel)
        self._end_session_requested.connect(self._worker.end_session)
        self._worker.update_ready.connect(self.update_received)
        self._worker.status_ready.connect(self.status_received)
        self._thread.start()

    def submit(self, request: GenerationRequest) -> None:
        self._submit_requested.emit(request)

    def cancel(self, request_id: str) -> None:
        self._cancel_requested.emit(request_id)

    def end_session(self, session_id: str) -> None:
        self._end_session_requested.emit(session_id)

    def shutdown(self) -> None:
        """Cancel in-flight work and stop the worker thread (call before ``engine.close()``)."""
        if not self._thread.isRunning():
            return
        QMetaObject.invokeMethod(self._worker, "stop", Qt.ConnectionType.BlockingQueuedConnection)
        self._thread.quit()
        self._thread.wait(5000)


class SchedulerQThread(QThread):
    """Runs one model's scheduler loop (``scheduler.run``) in a ``QThread``.

    Handed to ``Engine(thread_starter=qthread_starter)``; ``join`` lets ``Engine.unload``
    wait for it like a ``threading.Thread``.
    """

    def __init__(self, scheduler: Any, name: str) -> None:
        super().__init__()
        self.setObjectName(name)
        self._scheduler = scheduler

    def run(self) -> None:
        self._scheduler.run()

    def join(self, timeout: float | None = None) -> None:
        self.wait(-1 if timeout is None else int(timeout * 1000))


def qthread_starter(scheduler: Any, name: str) -> SchedulerQThread:
    thread = SchedulerQThread(scheduler, name)
    thread.start()
    return thread
