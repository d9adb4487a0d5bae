"""The app database: conversations, their message trees, and app settings.

SQLite in WAL mode through SQLAlchemy 2.0. Every public method opens a short session and
returns frozen records (``app.storage.records``), so callers never hold ORM objects. Any
database failure surfaces as :class:`StorageError` carrying a readable message; a value that
is not storable text (``bytes``, an unpaired surrogate) is refused before anything is written
with ``InvalidTextError`` (a ``StorageError``), see ``app.storage.text``. Export lives in
``app.storage.export``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, delete, event, or_, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.storage.errors import StorageError
from app.storage.export import conversation_json, conversation_markdown
from app.storage.records import Conversation, Message, ReplyStats, SamplingSettings, Siblings
from app.storage.schema import Base, ConversationRow, MessageRow, SettingRow
from app.storage.text import as_text, check_json, check_text

log = logging.getLogger(__name__)

DEFAULT_TITLE = "New chat"


def session_key(conversation_id: str) -> str:
    """Settings key of a conversation's engine-session state (the tokens its KV holds)."""
    return f"session/{conversation_id}"


class Storage:
    """Conversations, messages and settings in one SQLite file."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        try:
            self.db_path.parent.mkdir(parents=True, exist_ok=True)
            self._engine = create_engine(f"sqlite:///{self.db_path}", future=True)
            event.listen(self._engine, "connect", _on_connect)
            Base.metadata.create_all(self._engine)
        except (SQLAlchemyError, OSError) as exc:
            raise StorageError(f"cannot open the database at {self.db_path}: {exc}") from exc
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)

    def close(self) -> None:
        self._engine.dispose()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise StorageError(f"database error: {exc}") from exc
        finally:
            session.close()

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
        return _conversation(row)

    def get_conversation(self, conversation_id: str) -> Conversation:
        with self._session() as s:
            return _conversation(self._row(s, conversation_id))

    def list_conversations(self, *, include_deleted: bool = False) -> list[Conversation]:
        """Newest activity first."""
        stmt = select(ConversationRow).order_by(ConversationRow.updated.desc())
        if not include_deleted:
            stmt = stmt.where(ConversationRow.deleted_at.is_(None))
        with self._session() as s:
            return [_conversation(r) for r in s.scalars(stmt)]

    def rename_conversation(self, conversation_id: str, title: str) -> Conversation:
        title = check_text("the title", title).strip() or DEFAULT_TITLE
        with self._session() as s:
            row = self._row(s, conversation_id)
            row.title = title
            return _conversation(row)

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
            return _conversation(row)

    def delete_conversation(self, conversation_id: str) -> None:
        """Soft delete: hidden from lists and search until :meth:`undo_delete` or a purge."""
        with self._session() as s:
            self._row(s, conversation_id).deleted_at = time.time()

    def undo_delete(self, conversation_id: str) -> Conversation:
        with self._session() as s:
            row = self._row(s, conversation_id)
            row.deleted_at = None
            return _conversation(row)

    def purge_deleted(self) -> int:
        """Remove soft-deleted conversations and their messages for good."""
        with self._session() as s:
            ids = list(
                s.scalars(select(ConversationRow.id).where(ConversationRow.deleted_at.is_not(None)))
            )
            if ids:
                s.execute(delete(MessageRow).where(MessageRow.conversation_id.in_(ids)))
                s.execute(delete(ConversationRow).where(ConversationRow.id.in_(ids)))
                s.execute(
                    delete(SettingRow).where(SettingRow.key.in_([session_key(i) for i in ids]))
                )
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
            return [_conversation(r) for r in s.scalars(stmt)]

    # -- messages ------------------------------------------------------------------------

    def add_message(
        self,
        conversation_id: str,
        parent_id: str | None,
        role: str,
        content: str,
        *,
        thinking: str = "",
        stats: ReplyStats | None = None,
        error: str = "",
        make_active: bool = True,
    ) -> Message:
        """Append a message under ``parent_id`` (None = a root); by default it becomes the leaf."""
        if role not in ("user", "assistant", "system"):
            raise ValueError(f"unknown role {role!r}")
        check_text("the message text", content)
        check_text("the thinking text", thinking)
        check_text("the error text", error)
        stats_data = check_json("the reply stats", stats.to_dict()) if stats else None
        now = time.time()
        with self._session() as s:
            conv = self._row(s, conversation_id)
            if parent_id is not None:
                parent = s.get(MessageRow, parent_id)
                if parent is None or parent.conversation_id != conversation_id:
                    raise StorageError(f"parent message {parent_id} is not in this conversation")
            row = MessageRow(
                id=str(uuid.uuid4()),
                conversation_id=conversation_id,
                parent_id=parent_id,
                role=role,
                content=content,
                thinking=thinking,
                stats=stats_data,
                error=error,
                created=_monotonic_after(s, conversation_id, now),
            )
            s.add(row)
            conv.updated = now
            if make_active:
                conv.active_leaf_id = row.id
            s.flush()
            return _message(row)

    def get_message(self, message_id: str) -> Message:
        with self._session() as s:
            row = s.get(MessageRow, message_id)
            if row is None:
                raise StorageError(f"no message {message_id}")
            return _message(row)

    def path_to(self, message_id: str | None) -> list[Message]:
        """Messages from the root down to ``message_id`` (inclusive)."""
        if message_id is None:
            return []
        out: list[Message] = []
        with self._session() as s:
            current = s.get(MessageRow, message_id)
            while current is not None:
                out.append(_message(current))
                current = s.get(MessageRow, current.parent_id) if current.parent_id else None
        out.reverse()
        return out

    def active_branch(self, conversation_id: str) -> list[Message]:
        """The messages on the conversation's active branch, root first."""
        return self.path_to(self.get_conversation(conversation_id).active_leaf_id)

    def branch_with_siblings(self, conversation_id: str) -> list[tuple[Message, Siblings]]:
        """The active branch, root first, each message with its siblings — in one query.

        This is what the chat view renders; one round trip keeps switching chats cheap.
        """
        with self._session() as s:
            conv = self._row(s, conversation_id)
            rows = list(
                s.scalars(
                    select(MessageRow)
                    .where(MessageRow.conversation_id == conversation_id)
                    .order_by(MessageRow.created)
                )
            )
            leaf_id = conv.active_leaf_id
        by_id = {r.id: r for r in rows}
        children: dict[str | None, list[str]] = {}
        for r in rows:
            children.setdefault(r.parent_id, []).append(r.id)
        path: list[MessageRow] = []
        current = by_id.get(leaf_id) if leaf_id else None
        while current is not None:
            path.append(current)
            current = by_id.get(current.parent_id) if current.parent_id else None
        path.reverse()
        out = []
        for r in path:
            ids = tuple(children.get(r.parent_id, [r.id]))
            out.append((_message(r), Siblings(ids=ids, index=ids.index(r.id))))
        return out

    def set_active_leaf(self, conversation_id: str, message_id: str | None) -> None:
        with self._session() as s:
            conv = self._row(s, conversation_id)
            if message_id is not None:
                row = s.get(MessageRow, message_id)
                if row is None or row.conversation_id != conversation_id:
                    raise StorageError(f"message {message_id} is not in this conversation")
            conv.active_leaf_id = message_id

    def select_branch(self, message_id: str) -> str:
        """Make the branch through ``message_id`` active, following its newest descendants.

        Returns the new active leaf.
        """
        with self._session() as s:
            row = s.get(MessageRow, message_id)
            if row is None:
                raise StorageError(f"no message {message_id}")
            leaf = row
            while True:
                child = s.scalars(
                    select(MessageRow)
                    .where(MessageRow.conversation_id == row.conversation_id)
                    .where(MessageRow.parent_id == leaf.id)
                    .order_by(MessageRow.created.desc())
                    .limit(1)
                ).first()
                if child is None:
                    break
                leaf = child
            self._row(s, row.conversation_id).active_leaf_id = leaf.id
            return leaf.id

    def children(self, conversation_id: str, parent_id: str | None) -> list[Message]:
        with self._session() as s:
            return [_message(r) for r in s.scalars(self._children_stmt(conversation_id, parent_id))]

    def siblings(self, message_id: str) -> Siblings:
        """The message and its siblings (same parent), oldest first, and its index."""
        msg = self.get_message(message_id)
        ids = tuple(m.id for m in self.children(msg.conversation_id, msg.parent_id))
        return Siblings(ids=ids, index=ids.index(message_id))

    @staticmethod
    def _children_stmt(conversation_id: str, parent_id: str | None) -> Any:
        stmt = select(MessageRow).where(MessageRow.conversation_id == conversation_id)
        if parent_id is None:
            stmt = stmt.where(MessageRow.parent_id.is_(None))
        else:
            stmt = stmt.where(MessageRow.parent_id == parent_id)
        return stmt.order_by(MessageRow.created)

    # -- export --------------------------------------------------------------------------

    def export_markdown(self, conversation_id: str) -> str:
        """The active branch as a Markdown document."""
        conv = self.get_conversation(conversation_id)
        return conversation_markdown(conv, self.active_branch(conversation_id))

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
            messages = [_message(r) for r in rows]
        active = [m.id for m in self.active_branch(conversation_id)]
        return conversation_json(conv, messages, active)

    # -- settings ------------------------------------------------------------------------

    def get_setting(self, key: str, default: Any = None) -> Any:
        with self._session() as s:
            row = s.get(SettingRow, key)
            return default if row is None else row.value

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

    # -- helpers -------------------------------------------------------------------------

    @staticmethod
    def _row(s: Session, conversation_id: str) -> ConversationRow:
        row = s.get(ConversationRow, conversation_id)
        if row is None:
            raise StorageError(f"no conversation {conversation_id}")
        return row


def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


def _monotonic_after(s: Session, conversation_id: str, now: float) -> float:
    """A creation time strictly after the conversation's newest message, so order is stable."""
    latest = s.scalars(
        select(MessageRow.created)
        .where(MessageRow.conversation_id == conversation_id)
        .order_by(MessageRow.created.desc())
        .limit(1)
    ).first()
    return max(now, latest + 1e-6) if latest is not None else now


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _conversation(row: ConversationRow) -> Conversation:
    return Conversation(
        id=row.id,
        title=as_text(row.title),
        created=row.created,
        updated=row.updated,
        system_prompt=as_text(row.system_prompt),
        model_id=as_text(row.model_id),
        sampling=SamplingSettings.from_dict(row.sampling),
        active_leaf_id=row.active_leaf_id,
        deleted=row.deleted_at is not None,
    )


def _message(row: MessageRow) -> Message:
    return Message(
        id=row.id,
        conversation_id=row.conversation_id,
        parent_id=row.parent_id,
        role=row.role,
        content=as_text(row.content),
        thinking=as_text(row.thinking),
        stats=ReplyStats.from_dict(row.stats),
        error=as_text(row.error),
        created=row.created,
    )


def _sampling_dict(sampling: SamplingSettings) -> dict[str, Any]:
    return dict(check_json("the sampling settings", sampling.to_dict()))
