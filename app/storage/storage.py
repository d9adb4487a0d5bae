"""The app database: conversations, their message trees, and app settings.

:class:`Storage` is the one object the app talks to. Its parts: ``app.storage.db`` (the
SQLite file and sessions), ``app.storage.messages`` (message trees), this module
(conversations, search, settings), ``app.storage.export`` (Markdown / JSON). A value that is
not storable text (``bytes``, an unpaired surrogate) is refused before anything is written
with ``InvalidTextError`` (a ``StorageError``), see ``app.storage.text``.
"""

from __future__ import annotations

import copy
import logging
import time
import uuid
from typing import Any

from sqlalchemy import delete, or_, select

from app.storage.db import conversation_record, message_record
from app.storage.documents import DocumentStore
from app.storage.export import conversation_json, conversation_markdown
from app.storage.messages import MessageStore
from app.storage.records import Conversation, SamplingSettings
from app.storage.schema import ConversationRow, MessageRow, SettingRow
from app.storage.text import check_json, check_text

log = logging.getLogger(__name__)

DEFAULT_TITLE = "New chat"
_MISSING = object()


def session_key(conversation_id: str) -> str:
    """Settings key of a conversation's engine-session state (the tokens its KV holds)."""
    return f"session/{conversation_id}"


class Storage(MessageStore, DocumentStore):
    """Conversations, messages, documents and settings in one SQLite file."""

    # -- conversations -------------------------------------------------------------------

    def create_conversation(
        self,
        title: str = DEFAULT_TITLE,
        *,
        system_prompt: str = "",
        model_id: str = "",
        sampling: SamplingSettings | None = None,
    ) -> Conversation:
        now = time.time()
        row = ConversationRow(
            id=str(uuid.uuid4()),
            title=check_text("the title", title),
            created=now,
            updated=now,
            system_prompt=check_text("the system prompt", system_prompt),
            model_id=check_text("the model id", model_id),
            sampling=_sampling_dict(sampling or SamplingSettings()),
            active_leaf_id=None,
            deleted_at=None,
        )
        with self._session() as s:
            s.add(row)
        return conversation_record(row)

    def get_conversation(self, conversation_id: str) -> Conversation:
        def load() -> Conversation:
            with self._session() as s:
                return conversation_record(self._row(s, conversation_id))

        return self._cache.read(("conversation", conversation_id), load)

    def list_conversations(self, *, include_deleted: bool = False) -> list[Conversation]:
        """Newest activity first."""
        stmt = select(ConversationRow).order_by(ConversationRow.updated.desc())
        if not include_deleted:
            stmt = stmt.where(ConversationRow.deleted_at.is_(None))
        with self._session() as s:
            return [conversation_record(r) for r in s.scalars(stmt)]

    def rename_conversation(self, conversation_id: str, title: str) -> Conversation:
        title = check_text("the title", title).strip() or DEFAULT_TITLE
        with self._session() as s:
            row = self._row(s, conversation_id)
            row.title = title
            return conversation_record(row)

    def update_conversation(
        self,
        conversation_id: str,
        *,
        system_prompt: str | None = None,
        model_id: str | None = None,
        sampling: SamplingSettings | None = None,
    ) -> Conversation:
        if system_prompt is not None:
            check_text("the system prompt", system_prompt)
        if model_id is not None:
            check_text("the model id", model_id)
        sampling_data = _sampling_dict(sampling) if sampling is not None else None
        with self._session() as s:
            row = self._row(s, conversation_id)
            if system_prompt is not None:
                row.system_prompt = system_prompt
            if model_id is not None:
                row.model_id = model_id
            if sampling_data is not None:
                row.sampling = sampling_data
            return conversation_record(row)

    def delete_conversation(self, conversation_id: str) -> None:
        """Soft delete: hidden from lists and search until :meth:`undo_delete` or a purge."""
        with self._session() as s:
            self._row(s, conversation_id).deleted_at = time.time()

    def undo_delete(self, conversation_id: str) -> Conversation:
        with self._session() as s:
            row = self._row(s, conversation_id)
            row.deleted_at = None
            return conversation_record(row)

    def purge_deleted(self) -> int:
        """Remove soft-deleted conversations, their messages and every per-chat setting for
        good: the records keyed ``<kind>/<conversation id>`` (session, window, overflow policy,
        failure, type-ahead, and any added later)."""
        with self._session() as s:
            ids = list(
                s.scalars(select(ConversationRow.id).where(ConversationRow.deleted_at.is_not(None)))
            )
            if ids:
                s.execute(delete(MessageRow).where(MessageRow.conversation_id.in_(ids)))
                s.execute(delete(ConversationRow).where(ConversationRow.id.in_(ids)))
                per_chat = [SettingRow.key.endswith(f"/{i}", autoescape=True) for i in ids]
                s.execute(delete(SettingRow).where(or_(*per_chat)))
        if ids:  # their documents went with them (a cascade); a text no chat lists goes too
            self.purge_documents()
        return len(ids)

    def search(self, query: str) -> list[Conversation]:
        """Conversations whose title or any message contains ``query`` (case-insensitive)."""
        query = check_text("the search text", query).strip()
        if not query:
            return self.list_conversations()
        pattern = f"%{_escape_like(query)}%"
        in_messages = select(MessageRow.conversation_id).where(
            MessageRow.content.ilike(pattern, escape="\\")
        )
        stmt = (
            select(ConversationRow)
            .where(ConversationRow.deleted_at.is_(None))
            .where(
                or_(
                    ConversationRow.title.ilike(pattern, escape="\\"),
                    ConversationRow.id.in_(in_messages),
                )
            )
            .order_by(ConversationRow.updated.desc())
        )
        with self._session() as s:
            return [conversation_record(r) for r in s.scalars(stmt)]

    # -- export --------------------------------------------------------------------------

    def export_markdown(self, conversation_id: str) -> str:
        """The active branch as a Markdown document."""
        conv = self.get_conversation(conversation_id)
        docs = self.documents(conversation_id)
        return conversation_markdown(conv, self.active_branch(conversation_id), docs)

    def export_json(self, conversation_id: str) -> str:
        """The whole conversation (every branch) and its active path as JSON text."""
        conv = self.get_conversation(conversation_id)
        with self._session() as s:
            rows = list(
                s.scalars(
                    select(MessageRow)
                    .where(MessageRow.conversation_id == conversation_id)
                    .order_by(MessageRow.created)
                )
            )
            messages = [message_record(r) for r in rows]
        active = [m.id for m in self.active_branch(conversation_id)]
        return conversation_json(conv, messages, active, self.documents(conversation_id))

    # -- settings ------------------------------------------------------------------------

    def get_setting(self, key: str, default: Any = None) -> Any:
        def load() -> Any:
            with self._session() as s:
                row = s.get(SettingRow, key)
                return _MISSING if row is None else row.value

        value = self._cache.read(("setting", key), load)
        if value is _MISSING:
            return default
        if isinstance(value, (dict, list)):
            return copy.deepcopy(value)  # JSON data: the caller may change its copy
        return value

    def set_setting(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON data) under ``key``; bad text raises :class:`InvalidTextError`."""
        check_text("the setting name", key)
        check_json(f"the setting {key!r}", value)
        with self._session() as s:
            row = s.get(SettingRow, key)
            if row is None:
                s.add(SettingRow(key=key, value=value))
            else:
                row.value = value

    def delete_setting(self, key: str) -> None:
        with self._session() as s:
            s.execute(delete(SettingRow).where(SettingRow.key == key))


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _sampling_dict(sampling: SamplingSettings) -> dict[str, Any]:
    return dict(check_json("the sampling settings", sampling.to_dict()))
