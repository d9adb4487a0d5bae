"""``RemoteBridge``: a remote model (an OpenAI-compatible endpoint) behind the chat's bridge API.

It has the signals and methods of ``app.ui.engine_bridge.EngineBridge`` (``submit``,
``summarise``, ``cancel``, ``count_tokens``, ``end_session``, ``shutdown``; ``update_received``
…), so the chat controller treats a remote model like a loaded one. Each reply is one streamed
HTTP request on a thread of its own (``app.remote.client.RemoteStream``): its events are only
appended to a locked buffer there, and a frame timer on the GUI thread folds them into one
``StreamUpdate`` per request every ~16 ms — the GUI thread never waits on the network. Stop
closes the socket (the server sees the disconnect and stops generating). Failures (server down,
a refused key, an unknown model) arrive as the request's error update, so the chat shows its
usual error card with Retry and the user's message is kept.

There is no local KV cache and no local tokenizer for a remote model: the conversation is sent
as messages, the context meter shows an estimate until the server reports the real counts, and
the reply line says "remote · no local cache" (with what the server says it reused, if it
reports ``prompt_tokens_details.cached_tokens``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from app.conversation.window import index_of
from app.engine.events import Done, Error, Event, ThinkingDelta, Token
from app.remote.client import RemoteClient, RemoteStream
from app.remote.endpoint import RemoteEndpoint
from app.ui.bridge_records import (
    GenerationRequest,
    Params,
    StreamUpdate,
    SummaryRequest,
    WindowReport,
)
from app.ui.engine_bridge import DEFAULT_REPLY_TOKENS, FRAME_MS, reply_stats

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
"""Only for the context meter before the server reports real counts (no local tokenizer)."""

SUMMARY_INSTRUCTION = (
    "Summarise the conversation below in a few sentences, keeping names, numbers and decisions."
)


@dataclass(slots=True)
class _Remote:
    request_id: str
    window: WindowReport | None = None
    stream: RemoteStream | None = None
    events: list[Event] = field(default_factory=list)
    finished: bool = False
    thinking: bool = False  # reasoning text arrived (its end is the first answer text after it)


def chat_messages(request: GenerationRequest) -> list[dict[str, str]]:
    """The OpenAI ``messages`` for a request: the system prompt (with the view's summary, if
    older turns were summarised while the chat was on a local model) and the turns in view."""
    turns = list(request.messages)
    window = request.window
    start = index_of(turns, window.start_id) if window.start_id else 0
    system = request.system
    if window.summary:
        system = f"{system}\n\nSummary of the earlier conversation: {window.summary}".strip()
    messages = [{"role": "system", "content": system}] if system else []
    messages += [{"role": t.role, "content": t.content} for t in turns[max(0, start):]]
    return messages


def chat_params(params: Params) -> dict[str, Any]:
    """Engine options (SPEC §1 names) → OpenAI fields; llama.cpp's extensions (``top_k``,
    ``min_p``, ``repetition_penalty``, ``grammar``, also read by vLLM and Hearth) only when
    they change something, so a strict OpenAI server is not sent fields it would refuse."""
    p = dict(params)
    tokens = p.get("response_tokens")
    out: dict[str, Any] = {"max_tokens": tokens if isinstance(tokens, int) else DEFAULT_REPLY_TOKENS}
    for key in ("temperature", "top_p", "seed"):
        if p.get(key) is not None:
            out[key] = p[key]
    if p.get("stop_sequences"):
        out["stop"] = p["stop_sequences"]
    if p.get("top_k"):
        out["top_k"] = p["top_k"]
    if p.get("min_p"):
        out["min_p"] = p["min_p"]
    if p.get("repetition_penalty") not in (None, 1.0):
        out["repetition_penalty"] = p["repetition_penalty"]
    if p.get("grammar"):
        out["grammar"] = p["grammar"]
    return out


def estimate_tokens(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"]) // CHARS_PER_TOKEN + 4 for m in messages)


class RemoteBridge(QObject):
    """GUI-side handle of a remote model; same API as ``EngineBridge``."""

    update_received = Signal(object)  # StreamUpdate
    status_received = Signal(object)  # StatusSnapshot (none: a remote server's slots are its own)
    count_received = Signal(str, int)  # key, tokens (none: no local tokenizer)

    remote = True

    def __init__(self, endpoint: RemoteEndpoint, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.endpoint = endpoint
        self.model_id = endpoint.model_id
        self.n_ctx = int(endpoint.context_size)
        self.closed = False
        self._client = RemoteClient(endpoint)
        self._lock = threading.Lock()
        self._live: dict[str, _Remote] = {}
        self._frame = QTimer(self)
        self._frame.setInterval(FRAME_MS)
        self._frame.timeout.connect(self._flush)

    # -- the EngineBridge API ----------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> None:
        messages = chat_messages(request)
        params = chat_params(request.params)
        used = estimate_tokens(messages)
        window = request.window
        report = WindowReport("fits", window.start_id, window.summary, used, self.n_ctx,
                              max(0, self.n_ctx - int(params["max_tokens"])))
        self._start(_Remote(request.request_id, report), messages, params)

    def summarise(self, request: SummaryRequest) -> None:
        text = "\n".join(f"{t.role}: {t.content}" for t in request.turns)
        if request.previous:
            text = f"Earlier summary: {request.previous}\n{text}"
        messages = [{"role": "system", "content": SUMMARY_INSTRUCTION}, {"role": "user", "content": text}]
        self._start(_Remote(request.request_id), messages, chat_params(request.params))

    def count_tokens(self, key: str, text: str) -> None:
        """No local tokenizer for a remote model: the composer shows no draft count."""

    def cancel(self, request_id: str) -> None:
        with self._lock:
            live = self._live.get(request_id)
        if live is not None and live.stream is not None:
            live.stream.cancel()

    def end_session(self, session_id: str) -> None:
        """Nothing is held here for a conversation (the remote server decides what it keeps)."""

    def shutdown(self) -> None:
        """Cancel every request; idempotent. Does not wait for the sockets to close."""
        self.closed = True
        self._frame.stop()
        with self._lock:
            lives = list(self._live.values())
            self._live.clear()
        for live in lives:
            if live.stream is not None:
                live.stream.cancel()

    # -- streams -----------------------------------------------------------------------------

    def _start(self, live: _Remote, messages: list[dict[str, str]], params: dict[str, Any]) -> None:
        if self.closed:
            self.update_received.emit(StreamUpdate(live.request_id, error="the remote model was removed",
                                                   error_code="not_found"))
            return
        rid = live.request_id

        def on_event(event: Event) -> None:  # the request's HTTP thread: append only
            with self._lock:
                target = self._live.get(rid)
                if target is not None:
                    target.events.append(event)

        with self._lock:
            self._live[rid] = live
        # NOTE: the connection is opened on the stream's own thread (a slow or unreachable
        # host must not stall the GUI); the window report goes out with the first frame.
        live.stream = self._client.chat(messages, params, on_event)
        if not self._frame.isActive():
            self._frame.start()

    def _flush(self) -> None:
        with self._lock:
            batches = [(live, live.events) for live in self._live.values() if live.events or live.window]
            for live, _events in batches:
                live.events = []
        for live, events in batches:
            update = self._fold(live, events)
            if live.finished:
                with self._lock:
                    self._live.pop(live.request_id, None)
            self.update_received.emit(update)
        with self._lock:
            idle = not self._live
        if idle:
            self._frame.stop()

    def _fold(self, live: _Remote, events: list[Event]) -> StreamUpdate:
        text: list[str] = []
        thinking: list[str] = []
        thinking_ended = False
        done = None
        error = code = None
        for ev in events:
            if isinstance(ev, Token):
                text.append(ev.text)
                thinking_ended = thinking_ended or live.thinking
            elif isinstance(ev, ThinkingDelta):
                thinking.append(ev.text)
                live.thinking = True
            elif isinstance(ev, Done):
                live.finished = True
                done = dataclasses.replace(reply_stats(ev.stats), reuse_source="remote")
            elif isinstance(ev, Error):
                live.finished = True
                error, code = ev.reason, ev.code
        window, live.window = live.window, None  # reported once, with the first frame
        return StreamUpdate(
            live.request_id, "".join(text), "".join(thinking), thinking_ended,
            len(text), done, error, code, "remote", None, None, window,
        )


__all__ = ["RemoteBridge", "chat_messages", "chat_params", "estimate_tokens"]
