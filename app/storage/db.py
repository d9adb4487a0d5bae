"""The database underneath :class:`~app.storage.Storage`: the SQLite file, short sessions,
and the conversion of ORM rows to the frozen records callers get. No Qt.

SQLite in WAL mode through SQLAlchemy 2.0. Every public method of the stores opens a short
session and returns frozen records (``app.storage.records``), so callers never hold ORM
objects; any database failure surfaces as :class:`StorageError` with a readable message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.storage.errors import StorageError
from app.storage.records import Conversation, Message, ReplyStats, SamplingSettings
from app.storage.schema import Base, ConversationRow, MessageRow
from app.storage.text import as_text


class Database:
    """One SQLite file: its engine, a session per call, and the row lookups every store needs."""

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


def conversation_record(row: ConversationRow) -> Conversation:
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


def message_record(row: MessageRow) -> Message:
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
