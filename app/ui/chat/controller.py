"""Chat orchestration on the GUI thread: storage ⇄ engine bridge ⇄ widgets.

The controller owns the live (streaming) replies and the sidebar catalog, routes every user
action (send, stop, regenerate, edit-and-branch, switch branch, rename, delete/undo,
export) through storage, and announces changes with signals the widgets re-render from.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.storage import (
    DEFAULT_TITLE,
    Conversation,
    Message,
    ReplyStats,
    SamplingSettings,
    Storage,
    StorageError,
    session_key,
)
from app.ui.chat.catalog import ConversationCatalog, ConversationEntry
from app.ui.chat.params import infer_params
from app.ui.engine_bridge import (
    ChatTurn,
    EngineBridge,
    GenerationRequest,
    SessionState,
    StreamUpdate,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LiveReply:
    """A reply being generated (GUI-thread state)."""

    request_id: str
    conversation_id: str
    parent_id: str
    text: str = ""
    thinking: str = ""
    thinking_done: bool = False
    num_tokens: int = 0
    started: float = 0.0
    stopping: bool = False


class ChatController(QObject):
    conversation_changed = Signal(str)  # messages/branch changed: re-render
    reply_progressed = Signal(str)  # the live reply of this conversation grew
    busy_changed = Signal(str, bool)
    conversation_updated = Signal(str)  # title / settings
    conversation_deleted = Signal(str, str)  # id, title
    error_raised = Signal(str)

    def __init__(
        self,
        storage: Storage,
        bridge: EngineBridge | None,
        *,
        model_id: str = "",
        default_sampling: SamplingSettings | None = None,
        default_system_prompt: str = "",
    ) -> None:
        super().__init__()
        self.storage = storage
        self.bridge = bridge
        self.model_id = model_id
        self.default_sampling = default_sampling or SamplingSettings()
        self.default_system_prompt = default_system_prompt
        self.catalog = ConversationCatalog()
        self._live: dict[str, LiveReply] = {}  # conversation id → live reply
        self._by_request: dict[str, str] = {}  # request id → conversation id
        self.failed: dict[str, str] = {}  # conversation id → last error text
        self.query = ""
        if bridge is not None:
            bridge.update_received.connect(self._on_update_received)

    def set_bridge(self, bridge: EngineBridge, model_id: str) -> None:
        """Adopt a model loaded later (e.g. from the Models view) when none was loaded."""
        self.bridge = bridge
        self.model_id = model_id
        bridge.update_received.connect(self._on_update_received)

    # -- conversations -------------------------------------------------------------------

    def refresh(self, query: str | None = None) -> None:
        if query is not None:
            self.query = query
        try:
            convs = (
                self.storage.search(self.query) if self.query else self.storage.list_conversations()
            )
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return
        self.catalog.reset([_entry(c) for c in convs])

    def new_conversation(self) -> Conversation | None:
        try:
            conv = self.storage.create_conversation(
                system_prompt=self.default_system_prompt,
                model_id=self.model_id,
                sampling=self.default_sampling,
            )
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return None
        if self.query:
            self.refresh("")
        else:
            self.catalog.upsert(_entry(conv))
        return conv

    def conversation(self, cid: str) -> Conversation | None:
        try:
            return self.storage.get_conversation(cid)
        except StorageError:
            return None

    def rename(self, cid: str, title: str) -> None:
        try:
            conv = self.storage.rename_conversation(cid, title)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return
        self.catalog.upsert(_entry(conv))
        self.conversation_updated.emit(cid)

    def update_settings(
        self,
        cid: str,
        *,
        system_prompt: str | None = None,
        sampling: SamplingSettings | None = None,
    ) -> None:
        try:
            self.storage.update_conversation(cid, system_prompt=system_prompt, sampling=sampling)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return
        self.conversation_updated.emit(cid)

    def delete(self, cid: str) -> None:
        """Soft delete; :meth:`undo_delete` brings it back until the next start."""
        self.stop(cid)
        try:
            conv = self.storage.get_conversation(cid)
            self.storage.delete_conversation(cid)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return
        if self.bridge is not None:
            self.bridge.end_session(cid)
        self.catalog.remove(cid)
        self.conversation_deleted.emit(cid, conv.title)

    def undo_delete(self, cid: str) -> None:
        try:
            conv = self.storage.undo_delete(cid)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return
        self.catalog.upsert(_entry(conv))

    def export(self, cid: str, path: str | Path, fmt: str) -> bool:
        """Write the conversation as ``markdown`` or ``json`` to ``path``."""
        try:
            text = (
                self.storage.export_json(cid)
                if fmt == "json"
                else self.storage.export_markdown(cid)
            )
            Path(path).write_text(text, encoding="utf-8")
        except (StorageError, OSError) as exc:
            self.error_raised.emit(f"Export failed: {exc}")
            return False
        return True

    # -- messages ------------------------------------------------------------------------

    def branch(self, cid: str) -> list[Message]:
        try:
            return self.storage.active_branch(cid)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return []

    def branch_with_positions(self, cid: str) -> list[tuple[Message, tuple[int, int]]]:
        """The active branch with each message's (1-based position, count) among siblings."""
        try:
            rows = self.storage.branch_with_siblings(cid)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return []
        return [(m, (sib.index + 1, sib.count)) for m, sib in rows]

    def siblings(self, message_id: str) -> tuple[int, int]:
        """(1-based position, count) among the message's siblings."""
        try:
            sib = self.storage.siblings(message_id)
        except StorageError:
            return (1, 1)
        return (sib.index + 1, sib.count)

    def live_reply(self, cid: str) -> LiveReply | None:
        return self._live.get(cid)

    def is_busy(self, cid: str) -> bool:
        return cid in self._live

    def send(self, cid: str, text: str) -> bool:
        text = text.strip()
        if not text or self.is_busy(cid):
            return False
        try:
            conv = self.storage.get_conversation(cid)
            user = self.storage.add_message(cid, conv.active_leaf_id, "user", text)
            if conv.title == DEFAULT_TITLE and conv.active_leaf_id is None:
                self.storage.rename_conversation(cid, _title_from(text))
                self.conversation_updated.emit(cid)
            self.catalog.upsert(_entry(self.storage.get_conversation(cid)))
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return False
        self._start(cid, user.id)
        return True

    def regenerate(self, cid: str, message_id: str | None = None) -> bool:
        """A new reply to the user message above ``message_id`` (or the active leaf)."""
        if self.is_busy(cid):
            return False
        try:
            target = message_id or self.storage.get_conversation(cid).active_leaf_id
            if target is None:
                return False
            msg = self.storage.get_message(target)
            user_id = msg.id if msg.role == "user" else msg.parent_id
            if user_id is None:
                return False
            self.storage.set_active_leaf(cid, user_id)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return False
        self._start(cid, user_id)
        return True

    retry = regenerate

    def edit(self, cid: str, message_id: str, text: str) -> bool:
        """Edit a user message: a new sibling branch from its parent; the old one stays."""
        text = text.strip()
        if not text or self.is_busy(cid):
            return False
        try:
            original = self.storage.get_message(message_id)
            user = self.storage.add_message(cid, original.parent_id, "user", text)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return False
        self._start(cid, user.id)
        return True

    def switch_branch(self, cid: str, message_id: str, step: int) -> None:
        if self.is_busy(cid):
            return
        try:
            sib = self.storage.siblings(message_id)
            target = sib.ids[(sib.index + step) % sib.count]
            self.storage.select_branch(target)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return
        self.failed.pop(cid, None)
        self.conversation_changed.emit(cid)

    def stop(self, cid: str) -> None:
        live = self._live.get(cid)
        if live is not None and self.bridge is not None:
            live.stopping = True
            self.bridge.cancel(live.request_id)

    def shutdown(self) -> None:
        for cid in list(self._live):
            self.stop(cid)

    # -- generation ----------------------------------------------------------------------

    def _start(self, cid: str, user_id: str) -> None:
        self.failed.pop(cid, None)
        if self.bridge is None:
            self.failed[cid] = "No model is loaded."
            self.conversation_changed.emit(cid)
            self.error_raised.emit("No model is loaded; open the Models tab to load one.")
            return
        try:
            conv = self.storage.get_conversation(cid)
            history = self.storage.path_to(user_id)
        except StorageError as exc:
            self.error_raised.emit(str(exc))
            return
        request = GenerationRequest(
            request_id=str(uuid.uuid4()),
            session_id=cid,
            messages=tuple(ChatTurn(m.role, m.content) for m in history if m.role != "system"),
            system=conv.system_prompt,
            params=infer_params(conv.sampling),
            session=self._load_session(cid),
        )
        live = LiveReply(request.request_id, cid, user_id, started=time.monotonic())
        self._live[cid] = live
        self._by_request[request.request_id] = cid
        self.catalog.set_busy(cid, True)
        self.busy_changed.emit(cid, True)
        self.conversation_changed.emit(cid)
        self.bridge.submit(request)

    def _on_update_received(self, update: StreamUpdate) -> None:
        cid = self._by_request.get(update.request_id)
        live = self._live.get(cid) if cid else None
        if cid is None or live is None or live.request_id != update.request_id:
            return
        live.text += update.text
        live.thinking += update.thinking
        live.thinking_done = live.thinking_done or update.thinking_ended
        live.num_tokens += update.num_tokens
        if update.error is not None:
            self._end(cid, live)
            self.failed[cid] = update.error
            self.conversation_changed.emit(cid)
            self.error_raised.emit(f"Generation failed: {update.error}")
            return
        if update.done is not None:
            self._end(cid, live)
            if update.session is not None:
                self._save_session(cid, update.session)
            if live.text or live.thinking:
                d = update.done
                stats = ReplyStats(
                    ttft_ms=d.ttft_ms,
                    tokens_per_s=d.tokens_per_s,
                    cache_hit_kind=d.cache_hit_kind,
                    cache_read=d.cache_read,
                    cache_created=d.cache_created,
                    prompt_tokens=d.prompt_tokens,
                    completion_tokens=d.completion_tokens,
                    finish_reason=d.finish_reason,
                )
                try:
                    self.storage.add_message(
                        cid,
                        live.parent_id,
                        "assistant",
                        live.text,
                        thinking=live.thinking,
                        stats=stats,
                    )
                    self.catalog.upsert(_entry(self.storage.get_conversation(cid)))
                except StorageError as exc:
                    self.error_raised.emit(f"Could not save the reply: {exc}")
            self.conversation_changed.emit(cid)
            return
        self.reply_progressed.emit(cid)

    def _load_session(self, cid: str) -> SessionState | None:
        try:
            data = self.storage.get_setting(session_key(cid))
            if not data:
                return None
            return SessionState(
                str(data["model_id"]),
                tuple(int(t) for t in data["prompt"]),
                tuple(int(t) for t in data["generated"]),
                bool(data["ended_with_eog"]),
            )
        except (StorageError, KeyError, TypeError, ValueError) as exc:
            log.info("ignoring the stored session state of %s: %s", cid, exc)
            return None

    def _save_session(self, cid: str, state: SessionState) -> None:
        data = {
            "model_id": state.model_id,
            "prompt": list(state.prompt),
            "generated": list(state.generated),
            "ended_with_eog": state.ended_with_eog,
        }
        try:
            self.storage.set_setting(session_key(cid), data)
        except StorageError as exc:
            log.warning("could not save the session state of %s: %s", cid, exc)

    def _end(self, cid: str, live: LiveReply) -> None:
        self._live.pop(cid, None)
        self._by_request.pop(live.request_id, None)
        self.catalog.set_busy(cid, False)
        self.busy_changed.emit(cid, False)


def _entry(conv: Conversation) -> ConversationEntry:
    return ConversationEntry(conv.id, conv.title, conv.updated)


def _title_from(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else DEFAULT_TITLE
    return line if len(line) <= 48 else line[:47].rstrip() + "…"
