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
as messages; its view (the overflow policies: drop the oldest turns, summarise them, or stop)
is planned by ``app.conversation.window`` on an estimate of 3 characters a token, which the
context meter shows until the server reports the real counts; and
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

from app.conversation.requests import GenerationRequest, Params, SummaryRequest, WindowReport
from app.conversation.window import (
    Budget,
    Message,
    WindowPlan,
    fitted_summary_request,
    index_of,
    plan_window,
    view_messages,
)
from app.engine.events import Done, Error, Event, ThinkingDelta, Token
from app.remote.client import RemoteClient, RemoteStream
from app.remote.endpoint import RemoteEndpoint
from app.ui.bridge_records import StreamUpdate
from app.ui.engine_bridge import DEFAULT_REPLY_TOKENS, FRAME_MS, reply_stats

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3
"""For the view and the context meter (no local tokenizer); on the low side, so a view cut by
it fits more often than not (English runs ~4 characters a token in common tokenizers)."""



@dataclass(slots=True)
class _Remote:
    request_id: str
    window: WindowReport | None = None
    stream: RemoteStream | None = None
    events: list[Event] = field(default_factory=list)
    finished: bool = False
    thinking: bool = False  # reasoning text arrived (its end is the first answer text after it)


def chat_messages(request: GenerationRequest, start: int = -1, summary: str | None = None) -> list[Message]:
    """The OpenAI ``messages`` of a request's view: the system prompt (with the summary of
    older turns appended — some servers' templates take one system message only) and the
    turns from ``start`` (default: the view the conversation has kept)."""
    turns = request.messages
    if start < 0:
        found = index_of(turns, request.window.start_id)
        start, summary = (found, request.window.summary) if found >= 0 else (0, "")
    messages, extra = view_messages(turns, start, summary or "", merge_summary=True)
    system = (request.system + extra).strip()
    return [{"role": "system", "content": system}, *messages] if system else messages


def plan(request: GenerationRequest, n_ctx: int, max_tokens: int) -> tuple[WindowPlan, WindowReport]:
    """The view to send under the conversation's overflow policy (``app.conversation.window``),
    sized with ``estimate_tokens`` — a remote model's tokenizer is not here."""
    turns = request.messages
    budget = Budget.for_reply(n_ctx, max_tokens)

    def count(start: int, summary: str) -> int:
        return estimate_tokens(chat_messages(request, start, summary))

    chosen = plan_window(turns, request.window, count, budget, request.policy)
    if chosen.kind == "summarise" and not request.allow_summarise:
        chosen = WindowPlan("cut", chosen.start, "", count(chosen.start, ""))
    start_id = turns[chosen.start].id if chosen.start > 0 else None
    ids = tuple(t.id for t in turns[chosen.summarise_from : chosen.start]) if chosen.kind == "summarise" else ()
    report = WindowReport(chosen.kind, start_id, chosen.summary, chosen.num_tokens, budget.n_ctx, budget.limit, ids)
    return chosen, report


def chat_params(params: Params) -> dict[str, Any]:
    """Engine options (docs/design.md §1 names) → OpenAI fields; llama.cpp's extensions (``top_k``,
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


def estimate_tokens(messages: list[Message]) -> int:
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
        params = chat_params(request.params)
        chosen, report = plan(request, self.n_ctx, int(params["max_tokens"]))
        if not chosen.can_send:  # summarise first, or the policy says stop: no request
            self.update_received.emit(StreamUpdate(request.request_id, window=report))
            return
        messages = chat_messages(request, chosen.start, chosen.summary)
        # The reply stops where the remote context (as the user gave it) would be full.
        params["max_tokens"] = max(1, min(int(params["max_tokens"]), self.n_ctx - report.num_tokens))
        self._start(_Remote(request.request_id, report), messages, params)

    def summarise(self, request: SummaryRequest) -> None:
        params = chat_params(request.params)
        budget = Budget.for_reply(self.n_ctx, DEFAULT_REPLY_TOKENS)  # as EngineBridge does
        params["max_tokens"] = budget.summary_tokens
        messages = fitted_summary_request(request.turns, request.previous, estimate_tokens, budget.limit)
        self._start(_Remote(request.request_id), messages, params)

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

    def _start(self, live: _Remote, messages: list[Message], params: dict[str, Any]) -> None:
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


__all__ = ["RemoteBridge", "chat_messages", "chat_params", "estimate_tokens", "plan"]
