"""The replies being written, on the GUI thread: request → (summary) → stream → stored reply.

``ReplyRunner`` turns "answer the branch ending at this message" into a request to the bridge
of the conversation's model (from one read of the chat, ``NextTurn``; a new message is stored
here, right after its request goes: ``send``), follows its ``StreamUpdate``s (prefill progress, text, the view
the bridge chose), and stores the finished reply. When the view must be summarised first it
asks the model for the summary, keeps it as the conversation's ``WindowState``, and sends
the reply request again. A model unloaded under a streaming reply ends that reply with a
clear error (the chat works again once a model is loaded).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, Signal

from app.conversation.requests import GenerationRequest, SummaryRequest, WindowReport
from app.conversation.state import ConversationState, NextTurn, ReplyFailure, SessionState
from app.conversation.window import Turn, WindowState, check_summary, clean_summary
from app.remote.endpoint import is_remote_id
from app.storage import Message, ReplyStats, Storage, StorageError
from app.ui.bridge_records import StreamUpdate
from app.ui.bridges import ModelBridges
from app.ui.chat.params import infer_params

log = logging.getLogger(__name__)

UNLOADED = "unloaded"
"""``ReplyStats.finish_reason`` of a reply kept when its model was unloaded under it."""


@dataclass(slots=True)
class LiveReply:
    """A reply being generated (GUI-thread state)."""

    request_id: str
    conversation_id: str
    parent_id: str
    model_id: str = ""
    text: str = ""
    thinking: str = ""
    thinking_done: bool = False
    num_tokens: int = 0
    started: float = 0.0
    stopping: bool = False
    prefill: tuple[int, int] | None = None
    prefill_rate: float | None = None
    """Prompt tokens read per second so far (for the time-left estimate)."""
    summarising: bool = False
    summary: str = ""
    """While ``summarising``: the summary of older turns written so far."""
    summarised: tuple[tuple[Turn, ...], str] = ((), "")
    """While ``summarising``: the turns and the previous summary the summary replaces."""
    continued: str = ""
    """For Continue: the cut reply's text, which the new text extends."""
    request: GenerationRequest | None = None
    leaf_id: str = ""
    """The message the request answers from (the branch's leaf when it started)."""
    _prefill_t0: tuple[float, int] | None = None

    def reset_prefill(self) -> None:
        self.prefill, self.prefill_rate, self._prefill_t0 = None, None, None

    def note_prefill(self, done: int, total: int, now: float) -> None:
        if self._prefill_t0 is None:
            self._prefill_t0 = (now, done)
        else:
            t0, d0 = self._prefill_t0
            if now > t0 and done > d0:
                self.prefill_rate = (done - d0) / (now - t0)
        self.prefill = (done, total)


@dataclass(frozen=True, slots=True)
class ContextUse:
    """How full a conversation's context is: ``used`` of ``n_ctx`` tokens (``limit`` is the
    longest prompt that still leaves room for a reply)."""

    used: int
    n_ctx: int
    limit: int
    leaf_id: str = ""
    """The last message of the branch ``used`` was counted for (the meter of another branch
    of the same conversation must not show it)."""


class ReplyHooks:
    """What a chat's tools add to its replies (``app.ui.chat.tool_steps.ToolSteps``): the
    tools a request offers, the tool step a reply's calls start, its busy time and its Stop.
    These defaults add nothing."""

    def request(self, cid: str, history: list[Message], request: GenerationRequest) -> GenerationRequest:
        return request

    def replied(self, cid: str, reply: Message) -> None:
        return None

    def busy(self, cid: str) -> bool:
        return False

    def stop(self, cid: str) -> None:
        return None


class ReplyRunner(QObject):
    changed = Signal(str)  # re-render this conversation
    progressed = Signal(str)  # its live reply grew
    busy_changed = Signal(str, bool)
    reply_saved = Signal(str)  # a reply was stored (the sidebar moves the chat up)
    context_changed = Signal(str)
    error_raised = Signal(str)
    chat_error = Signal(str, str)  # conversation id, what went wrong with its reply
    failure_cleared = Signal(str)  # the conversation's error no longer holds

    def __init__(self, storage: Storage, models: ModelBridges) -> None:
        super().__init__()
        self.storage = storage
        self.state = ConversationState(storage)
        self.models = models
        self._live: dict[str, LiveReply] = {}  # conversation id → live reply
        self._by_request: dict[str, str] = {}  # request id → conversation id
        self.failed: dict[str, str] = {}  # conversation id → last error text
        self._restored: set[str] = set()  # conversations whose saved failure was read
        self.not_loaded: set[str] = set()
        """Conversations whose error is that their model is not loaded (it goes away when
        the model is loaded)."""
        self.context: dict[str, ContextUse] = {}
        self.hooks = ReplyHooks()
        models.update_received.connect(self._on_update_received)
        models.released.connect(self._on_model_released)

    def live(self, cid: str) -> LiveReply | None:
        return self._live.get(cid)

    def is_busy(self, cid: str) -> bool:
        return cid in self._live or self.hooks.busy(cid)

    def writing(self, model_id: str | None = None) -> list[str]:
        """The conversations whose reply (or its summary) is being written, by ``model_id`` or
        by any model."""
        return [cid for cid, live in self._live.items() if model_id is None or live.model_id == model_id]

    def writing_on(self, model_id: str) -> bool:
        """A reply (or its summary) is being written by ``model_id``."""
        return any(live.model_id == model_id for live in self._live.values())

    # -- starting ---------------------------------------------------------------------------

    def start(self, cid: str, leaf_id: str, *, continue_of: Message | None = None) -> None:
        """Answer the branch that ends at ``leaf_id`` (a user message), or with
        ``continue_of`` go on writing that cut reply (``leaf_id`` is then its id)."""
        self.clear_failure(cid)
        try:
            turn = self.state.next_turn(cid, leaf_id)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return
        if self._submit(turn, leaf_id, continue_of):
            self._announce(cid)

    def send(self, turn: NextTurn, message: Message) -> Message | None:
        """Answer ``message``, a new user message under ``turn``'s branch (read once, by the
        caller), then store it; the message as stored. None when it could not be stored (the
        error is shown, the request withdrawn: no reply is kept for a message that is not).

        NOTE: the request goes before the message is stored and the chat redrawn, so that the
        engine reads the prompt meanwhile. Traced at B11's typed turns (one llama.cpp thread,
        2026-12-03): Enter to the prefill's start took 7-23 ms when the message was stored
        first (~6 ms of SQLAlchemy, the reads of the branch and settings, and the worker's
        wait for the GIL while the GUI thread redrew); 2.2-3.5 ms now, of Enter to paint's
        46-61 ms (the 6 tokens left to read take ~40 of them)."""
        cid = message.conversation_id
        self.clear_failure(cid)
        self._submit(replace(turn, branch=(*turn.branch, message)), message.id, None)
        try:
            stored = self.storage.add_message(cid, message.parent_id, "user", message.content, message_id=message.id)
        except StorageError as exc:
            self._withdraw(cid)
            self.error_raised.emit(f"Could not save the message: {exc}")
            return None
        self._announce(cid)
        return stored

    def _announce(self, cid: str) -> None:
        """The reply is on its way: the chat redraws, the others hear it."""
        if cid in self._live:
            self.busy_changed.emit(cid, True)
        self.changed.emit(cid)

    def _withdraw(self, cid: str) -> None:
        """The message ``send`` answered could not be stored: its request is cancelled and
        forgotten (no reply is kept for it), and so is a failure it recorded."""
        live = self._live.pop(cid, None)
        if live is not None:
            self._by_request.pop(live.request_id, None)
            bridge = self.models.get(live.model_id)
            if bridge is not None:
                bridge.cancel(live.request_id)
        self.clear_failure(cid)

    def _submit(self, turn: NextTurn, leaf_id: str, continue_of: Message | None) -> bool:
        """The request for ``turn`` (its branch ends at ``leaf_id``) to the chat's model; False
        when that model is not loaded (the failure is shown)."""
        conv, cid = turn.conversation, turn.conversation.id
        bridge = self.models.get(conv.model_id)
        if bridge is None:
            self._fail_early(cid, leaf_id, _not_loaded(conv.model_id, self.models.ids()))
            return False
        request = replace(
            self._request(turn, self._draft_models(conv.model_id)),
            request_id=str(uuid.uuid4()),
            continue_reply=continue_of is not None,
        )
        parent = continue_of.parent_id if continue_of is not None else leaf_id
        live = LiveReply(request.request_id, cid, parent or "", conv.model_id, started=time.monotonic())
        if continue_of is not None:
            live.continued = live.text = continue_of.content
        live.request = request
        live.leaf_id = leaf_id
        self._live[cid] = live
        self._by_request[request.request_id] = cid
        # NOTE: submitted before the chat redraws and before anyone hears it is busy (the
        # sidebar, the composer, type-ahead: ~1.5 ms of the GUI thread in B11's traces): the
        # engine starts reading meanwhile (the redraw took 10-40 ms of B11's time to first
        # token, loaded). A local model's bridge returns once the engine reads the prompt, or
        # after 15 ms at most (``EngineBridge.submit``). A remote model's bridge may answer
        # within ``submit`` (a view it cannot send): the reply has then ended already, and
        # the redraw shows that.
        bridge.submit(request)
        return True

    def _request(self, turn: NextTurn, draft_models: tuple[str, ...] = ()) -> GenerationRequest:
        """The request ``turn`` makes (no id yet), with the tools its chat offers."""
        conv = turn.conversation
        request = GenerationRequest(
            request_id="",
            session_id=conv.id,
            messages=tuple(Turn(m.id, m.role, m.content) for m in turn.branch if m.role != "system"),
            system=turn.system,
            params=infer_params(conv.sampling, draft_models),
            session=turn.session,
            window=turn.window,
            policy=turn.policy,
        )
        return self.hooks.request(conv.id, list(turn.branch), request)

    def _draft_models(self, model_id: str) -> tuple[str, ...]:
        """The models that can draft for ``model_id``: the local ones loaded (a remote model
        neither drafts nor is drafted for)."""
        if is_remote_id(model_id):
            return ()
        return tuple(i for i in self.models.ids() if not is_remote_id(i))

    def next_turn_request(self, cid: str) -> GenerationRequest | None:
        """The request a message sent now would make, less the message (type-ahead reads it
        with the draft as the last user turn, ``app.ui.chat.type_ahead``): the active branch
        and the chat's settings as ``start`` takes them. None when the database cannot say."""
        try:
            turn = self.state.next_turn(cid)
        except StorageError as exc:
            log.info("no read-ahead for %s: %s", cid, exc)
            return None
        return self._request(turn)  # a tool chat reads ahead with its tools

    def _fail_early(self, cid: str, leaf_id: str, text: str) -> None:
        self._set_failure(cid, ReplyFailure(leaf_id, text, not_loaded=True))
        self.changed.emit(cid)
        self.chat_error.emit(cid, text[:1].upper() + text[1:])

    def report_failure(self, cid: str, leaf_id: str, text: str) -> None:
        """A failure after the reply (a tool step's): its card, with Retry, under ``leaf_id``."""
        self._set_failure(cid, ReplyFailure(leaf_id, text))
        self.changed.emit(cid)
        self.chat_error.emit(cid, text[:1].upper() + text[1:])

    def _set_failure(self, cid: str, failure: ReplyFailure) -> None:
        """Remember why the reply failed, here and in the database (a restart shows it)."""
        self.failed[cid] = failure.text
        if failure.not_loaded:
            self.not_loaded.add(cid)
        self._save_failure(cid, failure)

    def clear_failure(self, cid: str) -> None:
        """The conversation's last error no longer holds (a new request, another branch or
        model, the model loaded)."""
        self.not_loaded.discard(cid)
        self._restored.add(cid)
        if self.failed.pop(cid, None) is not None:
            self._save_failure(cid, None)
            self.failure_cleared.emit(cid)

    def restore_failure(self, cid: str, *, model_loaded: bool) -> None:
        """Once a session: the failure a previous run recorded for this conversation, if the
        branch still ends where it happened and it still holds."""
        if cid in self._restored or cid in self.failed:
            return
        self._restored.add(cid)
        try:
            failure = self.state.failure(cid)
            if failure is None:
                return
            conv = self.storage.get_conversation(cid)
        except StorageError as exc:
            log.warning("could not read the last failure of %s: %s", cid, exc)
            return
        if conv.active_leaf_id != failure.message_id or (failure.not_loaded and model_loaded):
            self._save_failure(cid, None)
            return
        self.failed[cid] = failure.text
        if failure.not_loaded:
            self.not_loaded.add(cid)

    def _save_failure(self, cid: str, failure: ReplyFailure | None) -> None:
        try:
            self.state.save_failure(cid, failure)
        except StorageError as exc:  # the card shows it in this session anyway
            log.warning("could not save the last failure of %s: %s", cid, exc)

    def stop(self, cid: str) -> None:
        self.hooks.stop(cid)
        live = self._live.get(cid)
        if live is None:
            return
        live.stopping = True
        bridge = self.models.get(live.model_id)
        if bridge is not None:
            bridge.cancel(live.request_id)

    def shutdown(self) -> None:
        for cid in list(self._live):
            self.stop(cid)

    # -- updates ----------------------------------------------------------------------------

    def _on_update_received(self, update: StreamUpdate) -> None:
        cid = self._by_request.get(update.request_id)
        live = self._live.get(cid) if cid else None
        if cid is None or live is None or live.request_id != update.request_id:
            return
        if update.window is not None and not self._on_window(cid, live, update.window):
            return
        if update.prefill is not None:
            live.note_prefill(*update.prefill, time.monotonic())
        if live.summarising:
            self._on_summary_update(cid, live, update)
            return
        live.text += update.text
        live.thinking += update.thinking
        live.thinking_done = live.thinking_done or update.thinking_ended
        live.num_tokens += update.num_tokens
        if update.error is not None:
            self._finish_failed(cid, live, update.error)
        elif update.done is not None:
            self._finish(cid, live, update)
        else:
            self.progressed.emit(cid)

    def _on_window(self, cid: str, live: LiveReply, report: WindowReport) -> bool:
        """Keep the view the bridge chose; False when no reply follows this update."""
        self.context[cid] = ContextUse(
            report.num_tokens, report.n_ctx, report.limit, live.leaf_id
        )
        self.context_changed.emit(cid)
        if report.kind in ("fits", "cut"):
            window = WindowState(report.start_id, report.summary)
            try:
                kept = self.state.window(cid)
            except StorageError:
                kept = WindowState()
            if (kept.start_id, kept.summary) == (window.start_id, window.summary):
                window = kept  # the same view: keep why it has no summary, if it says
            self._save_window(cid, window)
            return True
        if report.kind == "summarise":
            self._ask_summary(cid, live, report)
            return False
        self._finish_failed(cid, live, _overflow_text(report))
        return False

    def _ask_summary(self, cid: str, live: LiveReply, report: WindowReport) -> None:
        request = live.request
        bridge = self.models.get(live.model_id)
        if request is None or bridge is None:
            self._finish_failed(
                cid, live, _not_loaded(live.model_id, self.models.ids()), not_loaded=True
            )
            return
        turns = tuple(t for t in request.messages if t.id in report.summarise_ids)
        rid = str(uuid.uuid4())
        self._by_request.pop(live.request_id, None)
        live.request_id, live.summarising = rid, True
        live.summarised = (turns, report.summary)
        live.request = replace(request, window=WindowState(report.start_id, report.summary))
        self._by_request[rid] = cid
        self.progressed.emit(cid)
        bridge.summarise(SummaryRequest(rid, turns, report.summary, request.params))

    def _on_summary_update(self, cid: str, live: LiveReply, update: StreamUpdate) -> None:
        live.summary += update.text
        if update.error is not None:
            self._finish_failed(cid, live, f"could not summarise the older messages: {update.error}")
            return
        if update.done is None:
            self.progressed.emit(cid)
            return
        request = live.request
        bridge = self.models.get(live.model_id)
        if live.stopping or update.done.finish_reason == "cancelled":
            self._end(cid, live)  # stopped while summarising: no reply, the view is unchanged
            self.changed.emit(cid)
            return
        if request is None or bridge is None:
            self._finish_failed(
                cid, live, _not_loaded(live.model_id, self.models.ids()), not_loaded=True
            )
            return
        window = self._checked_summary(request.window.start_id, live)
        self._save_window(cid, window)
        rid = str(uuid.uuid4())
        self._by_request.pop(live.request_id, None)
        live.request_id, live.summarising, live.summary = rid, False, ""
        live.reset_prefill()
        live.request = replace(request, request_id=rid, window=window, allow_summarise=False)
        self._by_request[rid] = cid
        self.changed.emit(cid)
        bridge.submit(live.request)

    def _checked_summary(self, start_id: str | None, live: LiveReply) -> WindowState:
        """The view with the model's summary when it is usable (``check_summary``); else the
        oldest turns are dropped, and the view says why there is no summary."""
        turns, previous = live.summarised
        why = check_summary(live.summary, turns, previous)
        if why:
            log.info("summary of %d turns not used: it %s: %r", len(turns), why, live.summary[:200])
            return WindowState(start_id, "", no_summary=why)
        return WindowState(start_id, clean_summary(live.summary))

    def _finish(self, cid: str, live: LiveReply, update: StreamUpdate) -> None:
        self._end(cid, live)
        if update.session is not None:
            self._save_session(cid, update.session)
        stats = update.done
        saved: Message | None = None
        if live.text != live.continued or live.thinking:
            try:
                saved = self.storage.add_message(
                    cid, live.parent_id, "assistant", live.text, thinking=live.thinking, stats=stats
                )
            except StorageError as exc:
                self.error_raised.emit(f"Could not save the reply: {exc}")
            else:
                self.reply_saved.emit(cid)
                self.hooks.replied(cid, saved)
        if stats is not None and cid in self.context:
            used = stats.prompt_tokens + stats.completion_tokens
            leaf = saved.id if saved is not None else live.leaf_id
            self.context[cid] = replace(self.context[cid], used=used, leaf_id=leaf)
            self.context_changed.emit(cid)
        self.changed.emit(cid)

    def _finish_failed(
        self, cid: str, live: LiveReply, text: str, *, not_loaded: bool = False
    ) -> None:
        self._end(cid, live)
        self._set_failure(cid, ReplyFailure(live.leaf_id, text, not_loaded))
        self.changed.emit(cid)
        self.chat_error.emit(cid, f"Generation failed: {text}")

    def _on_model_released(self, model_id: str) -> None:
        """The model is being unloaded: its bridge is gone, so its replies end here."""
        for cid, live in list(self._live.items()):
            if live.model_id != model_id:
                continue
            if live.summarising or live.text == live.continued:
                text = _released_text(model_id, self.models.label(model_id))
                self._finish_failed(cid, live, text, not_loaded=True)
            else:
                self._keep_partial(cid, live)

    def _keep_partial(self, cid: str, live: LiveReply) -> None:
        """The model went away mid-reply: keep what it wrote, marked as interrupted (a
        Continue on it goes on once a model is loaded)."""
        self._end(cid, live)
        use = self.context.get(cid)
        stats = ReplyStats(
            prompt_tokens=use.used if use is not None else 0,
            completion_tokens=live.num_tokens,
            finish_reason=UNLOADED,
        )
        try:
            self.storage.add_message(
                cid, live.parent_id, "assistant", live.text, thinking=live.thinking, stats=stats
            )
        except StorageError as exc:
            self.error_raised.emit(f"Could not save the reply: {exc}")
        else:
            self.reply_saved.emit(cid)
        self.changed.emit(cid)
        label = self.models.label(live.model_id)
        gone = (f"The remote model {label} was removed or changed" if is_remote_id(live.model_id)
                else f"The model {label} was unloaded")
        self.chat_error.emit(cid, f"{gone} while it was replying: the reply so far is kept "
                             "(Continue under it goes on once a model is there).")

    def _end(self, cid: str, live: LiveReply) -> None:
        self._live.pop(cid, None)
        self._by_request.pop(live.request_id, None)
        self.busy_changed.emit(cid, False)

    # -- state ------------------------------------------------------------------------------

    def _save_session(self, cid: str, state: SessionState) -> None:
        try:
            self.state.save_session(cid, state)
        except StorageError as exc:  # only an optimisation: the next turn sends the full prompt
            log.warning("could not save the session state of %s: %s", cid, exc)

    def _save_window(self, cid: str, window: WindowState) -> None:
        try:
            if self.state.window(cid) != window:
                self.state.save_window(cid, window)
        except StorageError as exc:
            self.error_raised.emit(f"Could not save where the model's view starts: {exc}")


def _released_text(model_id: str, label: str) -> str:
    if is_remote_id(model_id):  # removed in the Library, or its address/key changed
        return f"the remote model {label} was removed or changed while it was replying. Press Retry."
    return f"the model {model_id} was unloaded while it was replying. Load a model and press Retry."


def _not_loaded(model_id: str, loaded: list[str]) -> str:
    if not model_id:
        return "no model is chosen for this chat; pick one at the top of the chat."
    if loaded:
        return (f"this chat's model, {model_id}, is not loaded. Pick a loaded model at the "
                "top of the chat, or load it from the Library.")
    return f"this chat's model, {model_id}, is not loaded. Load a model in the Library."


def _overflow_text(report: WindowReport) -> str:
    if report.kind == "too_long":
        return (f"the message is too long for this model: the prompt needs {report.num_tokens:,} "
                f"tokens, and at most {report.limit:,} of the {report.n_ctx:,}-token context "
                "can be prompt (the rest is kept for the reply).")
    return (f"this chat has reached the model's context: its prompt would be {report.num_tokens:,} "
            f"tokens, and a prompt may use at most {report.limit:,} of the {report.n_ctx:,}-token "
            f"context ({report.n_ctx - report.limit:,} are kept for the reply). Its overflow policy is "
            "“stop at the limit”: choose another policy in the chat settings, or start a new chat.")
