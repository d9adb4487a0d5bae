"""Chat orchestration on the GUI thread: storage ⇄ replies ⇄ widgets.

The controller owns the sidebar catalog, routes every user action (send, stop, regenerate,
edit-and-branch, continue a cut reply, switch branch, pick the chat's model or overflow
policy, rename, delete/undo, export) through storage, hands replies to the ``ReplyRunner``
and announces changes with signals the widgets re-render from.

Storage failures are the environment's (a locked, full or read-only database): each is
shown to the user through ``error_raised`` from one place, :meth:`ChatController._db`.
Anything else is a bug and is left to propagate, loudly.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import QObject, Signal

from app.conversation.state import NextTurn
from app.conversation.titles import distinct_title, title_from
from app.conversation.window import OverflowPolicy, WindowState
from app.remote.endpoint import is_remote_id
from app.storage import (
    DEFAULT_TITLE,
    Conversation,
    Message,
    SamplingSettings,
    Storage,
    StorageError,
)
from app.storage.export import conversation_markdown
from app.storage.text import check_text
from app.ui.bridges import ModelBridges
from app.ui.chat.replies import ContextUse, LiveReply, ReplyRunner
from app.ui.chat.tool_steps import ToolSteps
from app.ui.state.conversation_catalog import ConversationCatalog, ConversationEntry
from app.ui.state.library_memory import ModelFiles

log = logging.getLogger(__name__)

T = TypeVar("T")


class ChatController(QObject):
    conversation_changed = Signal(str)  # messages/branch changed: re-render
    reply_progressed = Signal(str)  # the live reply of this conversation grew
    busy_changed = Signal(str, bool)
    conversation_updated = Signal(str)  # title / settings / model
    conversation_deleted = Signal(str, str)  # id, title
    context_changed = Signal(str)  # the conversation's context meter changed
    models_changed = Signal()  # a model was loaded or unloaded, or the default changed
    error_raised = Signal(str)  # the app's (storage, export): not tied to one chat
    info_raised = Signal(str)  # what was done, where (an export)
    chat_error = Signal(str, str)  # conversation id, why its reply failed
    failure_cleared = Signal(str)  # that error no longer holds
    model_file_requested = Signal(str, str)  # conversation id, a GGUF to load for it

    def __init__(
        self,
        storage: Storage,
        models: ModelBridges,
        *,
        default_model_id: str = "",
        default_sampling: SamplingSettings | None = None,
        default_system_prompt: str = "",
    ) -> None:
        super().__init__()
        self.storage = storage
        self.models = models
        self.default_model_id = default_model_id
        self.default_sampling = default_sampling or SamplingSettings()
        self.default_system_prompt = default_system_prompt
        self.catalog = ConversationCatalog()
        self.replies = ReplyRunner(storage, models)
        self.tools = ToolSteps(storage, self.replies)
        """MCP servers' tools in chats that enable them (the agent loop, ``app.tools``)."""
        self.model_files: ModelFiles | None = None
        """Where each local model was loaded from (set when a Library can load files): a chat
        whose model is not loaded offers to load it again, or to locate a file that is gone."""
        self.query = ""
        r = self.replies
        r.changed.connect(self.conversation_changed)
        r.progressed.connect(self.reply_progressed)
        r.busy_changed.connect(self._on_busy_changed)
        r.context_changed.connect(self.context_changed)
        r.error_raised.connect(self.error_raised)
        r.chat_error.connect(self.chat_error)
        r.failure_cleared.connect(self.failure_cleared)
        r.reply_saved.connect(self._upsert)
        models.opened.connect(self._on_model_opened)
        models.released.connect(self._on_model_released)

    @property
    def failed(self) -> dict[str, str]:
        """Conversation id → the text of its last failed reply."""
        return self.replies.failed

    def failure(self, cid: str | None) -> str | None:
        """Why the conversation's last reply failed (in this run or the last), while that
        still holds."""
        if not cid:
            return None
        loaded = self.models.get(self.model_of(cid)) is not None
        self.replies.restore_failure(cid, model_loaded=loaded)
        return self.failed.get(cid)

    def _db(self, call: Callable[[], T], what: str = "") -> T | None:
        """Run a storage call; a database failure is shown and gives None."""
        try:
            return call()
        except StorageError as exc:
            self.error_raised.emit(f"{what}: {exc}" if what else str(exc))
            return None

    # -- models ------------------------------------------------------------------------------

    def model_of(self, cid: str | None) -> str:
        """The model a conversation replies with (its own, else the default for new chats)."""
        conv = self.conversation(cid) if cid else None
        return conv.model_id if conv is not None and conv.model_id else self.default_model_id

    def model_file(self, cid: str | None) -> Path | None:
        """The file this chat's model was last loaded from, when the chat failed because that
        model is not loaded (None otherwise, and for remote models)."""
        if not cid or self.model_files is None or cid not in self.replies.not_loaded:
            return None
        model_id = self.model_of(cid)
        if not model_id or is_remote_id(model_id):
            return None
        return self.model_files.get(model_id)

    def set_model(self, cid: str, model_id: str) -> None:
        """Let the conversation reply with ``model_id`` from now on (also the new default)."""
        old = self.model_of(cid)
        if self._db(lambda: self.storage.update_conversation(cid, model_id=model_id)) is None:
            return
        self.default_model_id = model_id
        if old != model_id:
            bridge = self.models.get(old)
            if bridge is not None:
                bridge.end_session(cid)  # free its seq on the old model
        self.replies.clear_failure(cid)
        self.conversation_updated.emit(cid)
        self.conversation_changed.emit(cid)
        self.models_changed.emit()

    def _on_model_opened(self, model_id: str) -> None:
        # A remote model never takes the place of a local default that is still loading.
        remote_over_default = is_remote_id(model_id) and bool(self.default_model_id)
        if not remote_over_default and (
            not self.default_model_id or self.models.get(self.default_model_id) is None
        ):
            self.default_model_id = model_id
        # "This chat's model is not loaded" no longer holds for the chats of this model: the
        # card under their unanswered message offers Retry instead.
        for cid in list(self.replies.not_loaded):
            if self.models.get(self.model_of(cid)) is not None:
                self.replies.clear_failure(cid)
                self.conversation_changed.emit(cid)
        self.models_changed.emit()

    def _on_model_released(self, model_id: str) -> None:
        if self.default_model_id == model_id:
            ids = self.models.ids()
            self.default_model_id = ids[0] if ids else model_id
        self.models_changed.emit()

    # -- overflow policy and the model's view ----------------------------------------------

    def policy(self, cid: str) -> OverflowPolicy:
        return self._db(lambda: self.replies.state.policy(cid)) or OverflowPolicy.DROP_OLDEST

    def own_policy(self, cid: str) -> OverflowPolicy | None:
        return self._db(lambda: self.replies.state.own_policy(cid))

    def set_policy(self, cid: str, policy: OverflowPolicy | None) -> None:
        """The conversation's overflow policy; None follows the app-wide default."""
        self._db(lambda: self.replies.state.set_policy(cid, policy))
        self.conversation_updated.emit(cid)

    def default_policy(self) -> OverflowPolicy:
        return self._db(self.replies.state.default_policy) or OverflowPolicy.DROP_OLDEST

    def set_default_policy(self, policy: OverflowPolicy | str) -> None:
        chosen = OverflowPolicy.parse(policy)
        self._db(lambda: self.replies.state.set_default_policy(chosen))

    def window(self, cid: str) -> WindowState:
        """Where the model's view of the conversation starts (for the divider)."""
        return self._db(lambda: self.replies.state.window(cid)) or WindowState()

    def context_use(self, cid: str, turn: NextTurn | None = None) -> ContextUse | None:
        """How full the model's view of the branch shown is: the last request's figures, or
        for another branch of the conversation (switched to since) that branch's own count
        with the same context size and limit. ``turn``: the chat as just read (``read_turn``),
        not read again."""
        use = self.replies.context.get(cid)
        if use is None or not use.leaf_id or self.is_busy(cid):
            return use
        conv = turn.conversation if turn is not None else self.conversation(cid)
        leaf = conv.active_leaf_id if conv is not None else None
        if leaf is None or leaf == use.leaf_id:
            return use
        branch = turn.branch if turn is not None else self.branch(cid)
        return replace(use, used=_context_tokens(branch), leaf_id=leaf)

    def last_context_tokens(self, cid: str) -> int:
        """Tokens the model's view held after the branch's last reply (from its stats)."""
        return _context_tokens(self.branch(cid))

    def title_of(self, cid: str) -> str | None:
        conv = self.conversation(cid)
        return conv.title if conv is not None else None

    # -- conversations -------------------------------------------------------------------

    def refresh(self, query: str | None = None) -> None:
        if query is not None:
            self.query = query
        convs = self._db(
            lambda: self.storage.search(self.query) if self.query else self.storage.list_conversations()
        )
        if convs is not None:
            self.catalog.reset([_entry(c) for c in convs])

    def new_conversation(self) -> Conversation | None:
        conv = self._db(
            lambda: self.storage.create_conversation(
                system_prompt=self.default_system_prompt,
                # Bound at the first reply when no model is loaded now (see ``_start``).
                model_id=self.default_model_id if self.models.get(self.default_model_id) else "",
                sampling=self.default_sampling,
            )
        )
        if conv is None:
            return None
        if self.query:
            self.refresh("")
        else:
            self.catalog.upsert(_entry(conv))
        return conv

    def conversation(self, cid: str | None) -> Conversation | None:
        if not cid:
            return None
        try:
            return self.storage.get_conversation(cid)
        except StorageError:  # deleted meanwhile, or the database is unreadable right now
            return None

    def rename(self, cid: str, title: str) -> None:
        conv = self._db(lambda: self.storage.rename_conversation(cid, title))
        if conv is not None:
            self.catalog.upsert(_entry(conv))
            self.conversation_updated.emit(cid)

    def update_settings(
        self,
        cid: str,
        *,
        system_prompt: str | None = None,
        sampling: SamplingSettings | None = None,
    ) -> None:
        done = self._db(
            lambda: self.storage.update_conversation(
                cid, system_prompt=system_prompt, sampling=sampling
            )
        )
        if done is not None:
            self.conversation_updated.emit(cid)

    def delete(self, cid: str) -> None:
        """Soft delete; :meth:`undo_delete` brings it back until the next start."""
        self.stop(cid)
        conv = self.conversation(cid)

        def delete() -> bool:
            self.storage.delete_conversation(cid)
            return True

        if conv is None or self._db(delete) is None:
            return
        bridge = self.models.get(conv.model_id)
        if bridge is not None:
            bridge.end_session(cid)
        self.catalog.remove(cid)
        self.conversation_deleted.emit(cid, conv.title)

    def undo_delete(self, cid: str) -> None:
        conv = self._db(lambda: self.storage.undo_delete(cid))
        if conv is not None:
            self.catalog.upsert(_entry(conv))

    def export_title(self, cid: str) -> str:
        """The conversation's title in full: a title cut for the sidebar ("Note 0: please
        keep in mind that the lanterns o…") is its first message's first line, whole."""
        conv = self.conversation(cid)
        title = conv.title if conv is not None else ""
        if title.endswith("…"):
            first = next((m.content for m in self.branch(cid) if m.role == "user"), "")
            line = first.strip().splitlines()[0] if first.strip() else ""
            if line:
                return line
        return title or "Chat"

    def other_versions(self, cid: str) -> int:
        """Versions of the branch's messages that are not on it (edits, regenerated replies)."""
        return sum(self.siblings(m.id)[1] - 1 for m in self.branch(cid))

    def export(self, cid: str, path: str | Path, fmt: str) -> bool:
        """Write the conversation as ``markdown`` (the branch on screen, under its full title)
        or ``json`` (every branch) to ``path``, and say where it went."""
        try:
            if fmt == "json":
                text = self.storage.export_json(cid)
            else:
                conv = self.storage.get_conversation(cid)
                text = conversation_markdown(replace(conv, title=self.export_title(cid)), self.branch(cid),
                                             self.storage.documents(cid))  # fmt: skip
            Path(path).write_text(text, encoding="utf-8")
        except (StorageError, OSError) as exc:
            self.error_raised.emit(f"Export failed: {exc}")
            return False
        words = f"Exported “{self.export_title(cid)}” to {path}."
        others = self.other_versions(cid) if fmt != "json" else 0
        if others:
            many = others > 1
            words += (f" It holds the branch on screen; {others} other version{'s' if many else ''} of "
                      f"its messages {'are' if many else 'is'} not in it (Export as JSON keeps every branch).")
        self.info_raised.emit(words)
        return True

    # -- messages ------------------------------------------------------------------------

    def branch(self, cid: str) -> list[Message]:
        return self._db(lambda: self.storage.active_branch(cid)) or []

    def branch_with_positions(self, cid: str) -> list[tuple[Message, tuple[int, int]]]:
        """The active branch with each message's (1-based position, count) among siblings."""
        rows = self._db(lambda: self.storage.branch_with_siblings(cid)) or []
        return [(m, (sib.index + 1, sib.count)) for m, sib in rows]

    def siblings(self, message_id: str) -> tuple[int, int]:
        """(1-based position, count) among the message's siblings."""
        sib = self._db(lambda: self.storage.siblings(message_id))
        return (1, 1) if sib is None else (sib.index + 1, sib.count)

    def live_reply(self, cid: str) -> LiveReply | None:
        return self.replies.live(cid)

    def is_busy(self, cid: str) -> bool:
        return self.replies.is_busy(cid)

    def read_turn(self, cid: str) -> NextTurn | None:
        """The one read of a chat that a message sent now goes with (``send``); None when the
        database failed (the error is shown)."""
        return self._db(lambda: self.replies.state.next_turn(cid))

    def send(self, cid: str, text: str, turn: NextTurn | None = None) -> bool:
        """Send ``text`` as the chat's next user message, with ``turn`` (``read_turn``, read
        now when not given). False when nothing was sent (the composer keeps the text):
        empty, the chat busy, or the database failing.

        One way: the request goes (``ReplyRunner.send``), the runner stores the message while
        the engine reads; then the chat is named after its first message."""
        text = text.strip()
        if not text or self.is_busy(cid):
            return False
        if self._db(lambda: check_text("the message text", text)) is None:
            return False  # (before the engine or the database sees it)
        turn = turn or self.read_turn(cid)
        if turn is None:
            return False
        turn = self._adopt_default_model(turn)
        conv = turn.conversation
        message = Message(str(uuid.uuid4()), cid, conv.active_leaf_id, "user", text)
        stored = self.replies.send(turn, message)
        if stored is None:
            return False
        entry = ConversationEntry(cid, conv.title, stored.created)
        if conv.title == DEFAULT_TITLE and conv.active_leaf_id is None:
            title = self._db(lambda: self._new_title(cid, text))
            renamed = self._db(lambda: self.storage.rename_conversation(cid, title)) if title else None
            if renamed is not None:
                entry = _entry(renamed)
                self.conversation_updated.emit(cid)
        self.catalog.upsert(entry)  # (after the request is on its way: the sidebar can wait)
        return True

    def regenerate(self, cid: str, message_id: str | None = None) -> bool:
        """A new reply to the user message above ``message_id`` (or the active leaf)."""
        if self.is_busy(cid):
            return False

        def target_user() -> str | None:
            target = message_id or self.storage.get_conversation(cid).active_leaf_id
            if target is None:
                return None
            msg = self.storage.get_message(target)
            user_id = msg.id if msg.role in ("user", "tool") else msg.parent_id  # a tool result is answered too
            if user_id is not None:
                self.storage.set_active_leaf(cid, user_id)
            return user_id

        user_id = self._db(target_user)
        if user_id is None:
            return False
        self._start(cid, user_id)
        return True

    retry = regenerate

    def continue_reply(self, cid: str, message_id: str) -> bool:
        """Go on writing a reply that was cut at the context end (the overflow policy makes
        room first); the continued reply becomes a new version beside the cut one."""
        if self.is_busy(cid):
            return False
        msg = self._db(lambda: self.storage.get_message(message_id))
        if msg is None or msg.role != "assistant" or msg.parent_id is None:
            return False
        self._start(cid, msg.id, continue_of=msg)
        return True

    def edit(self, cid: str, message_id: str, text: str) -> bool:
        """Edit a user message: a new sibling branch from its parent; the old one stays."""
        text = text.strip()
        if not text or self.is_busy(cid):
            return False

        def add() -> Message:
            original = self.storage.get_message(message_id)
            return self.storage.add_message(cid, original.parent_id, "user", text)

        user = self._db(add)
        if user is None:
            return False
        self._start(cid, user.id)
        return True

    def switch_branch(self, cid: str, message_id: str, step: int) -> None:
        if self.is_busy(cid):
            return

        def select() -> str:
            sib = self.storage.siblings(message_id)
            return self.storage.select_branch(sib.ids[(sib.index + step) % sib.count])

        if self._db(select) is None:
            return
        self.replies.clear_failure(cid)
        self.conversation_changed.emit(cid)
        self.context_changed.emit(cid)  # the meter counts the branch shown

    def stop(self, cid: str) -> None:
        self.replies.stop(cid)

    def shutdown(self) -> None:
        self.replies.shutdown()
        self.tools.shutdown()

    # -- helpers ----------------------------------------------------------------------------

    def _start(self, cid: str, leaf_id: str, continue_of: Message | None = None) -> None:
        conv = self.conversation(cid)
        if conv is not None and not conv.model_id and self.default_model_id:
            model_id = self.default_model_id  # (as ``_adopt_default_model``)
            self._db(lambda: self.storage.update_conversation(cid, model_id=model_id))
        self.replies.start(cid, leaf_id, continue_of=continue_of)

    def _adopt_default_model(self, turn: NextTurn) -> NextTurn:
        """A chat made while no model was loaded replies with the one loaded now."""
        conv = turn.conversation
        if conv.model_id or not self.default_model_id:
            return turn
        model_id = self.default_model_id
        updated = self._db(lambda: self.storage.update_conversation(conv.id, model_id=model_id))
        return turn if updated is None else replace(turn, conversation=updated)

    def _new_title(self, cid: str, text: str) -> str:
        """``text``'s title, distinct from the other chats' in the sidebar (they would look
        the same when they start with the same words)."""
        others = [e for e in self.catalog.entries() if e.id != cid]
        base = title_from(text)
        alike = []
        for e in others:
            if e.title == base:
                branch = self.storage.active_branch(e.id)
                first = next((m.content for m in branch if m.role == "user"), "")
                alike.append(first)
        return distinct_title(text, {e.title for e in others}, alike)

    def _upsert(self, cid: str) -> None:
        conv = self.conversation(cid)
        if conv is not None:
            self.catalog.upsert(_entry(conv))

    def _on_busy_changed(self, cid: str, busy: bool) -> None:
        self.catalog.set_busy(cid, busy)
        self.busy_changed.emit(cid, busy)


def _context_tokens(branch: Sequence[Message]) -> int:
    """Tokens the model's view held after ``branch``'s last reply (from its stats)."""
    for msg in reversed(branch):
        if msg.role == "assistant" and msg.stats is not None:
            return msg.stats.prompt_tokens + msg.stats.completion_tokens
    return 0


def _entry(conv: Conversation) -> ConversationEntry:
    return ConversationEntry(conv.id, conv.title, conv.updated)

