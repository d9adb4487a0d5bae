"""The database underneath :class:`~app.storage.Storage`: the SQLite file, short sessions,
and the conversion of ORM rows to the frozen records callers get. No Qt.

SQLite in WAL mode through SQLAlchemy 2.0. Every public method of the stores opens a short
session and returns frozen records (``app.storage.records``), so callers never hold ORM
objects; any database failure surfaces as :class:`StorageError` with a readable message.

The reads the chat view repeats on every chat switch (a conversation, a setting, the shown
branch) are kept in :class:`ReadCache` until the next write: one ORM round trip costs ~1 ms
of Python on the GUI thread (~10 ms on a loaded machine), and a switch asked for about
fifteen (B6). Any statement that is not a SELECT, by any session of this engine, drops what
it can change (``kinds_written``: a write to the settings table, the settings read; to the
conversations or messages, the conversations and branches read; any other statement,
everything), and again once its session has committed, so a read that raced a write is never
kept. The app has one process per database; another process's writes are not seen by it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.storage.errors import StorageError
from app.storage.records import Conversation, Message, ReplyStats, SamplingSettings
from app.storage.schema import Base, ConversationRow, MessageRow
from app.storage.text import as_text

T = TypeVar("T")
_MISSING = object()


class ReadCache:
    """Values read since the last write; ``generation`` counts the writes seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[Hashable, object] = {}
        self.generation = 0

    def read(self, key: Hashable, load: Callable[[], T]) -> T:
        """The cached value of ``key``, else ``load()`` (kept unless a write came meanwhile)."""
        with self._lock:
            value = self._values.get(key, _MISSING)
            generation = self.generation
        if value is not _MISSING:
            return value  # type: ignore[return-value]  # stored by this method as a T
        loaded = load()
        with self._lock:
            if self.generation == generation:
                self._values[key] = loaded
        return loaded

    def invalidate(self, kinds: Collection[str] | None = None) -> None:
        """Drop the values of ``kinds`` (a key's first item), or every value when None."""
        with self._lock:
            self.generation += 1
            if kinds is None:
                self._values.clear()
            else:
                for key in [k for k in self._values if isinstance(k, tuple) and k[:1] and k[0] in kinds]:
                    del self._values[key]


SETTINGS: frozenset[str] = frozenset({"setting"})
CHATS: frozenset[str] = frozenset({"conversation", "branch"})
_WRITE = re.compile(r"\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)\s+\"?(\w+)", re.IGNORECASE)


def kinds_written(statement: str) -> frozenset[str] | None:
    """The cache kinds a statement that is not a SELECT can change; None: any.

    NOTE: a message written (every send, every reply) used to drop the settings read too,
    and the send then read ~10 of them again from SQLite on the GUI thread (a trace of B11's typed turns).
    The settings table has no foreign key and no trigger: only a statement naming it changes
    it. The messages' cascade from conversations stays inside ``CHATS``."""
    m = _WRITE.match(statement)
    table = m.group(1).lower() if m else None
    if table == "settings":
        return SETTINGS
    if table in ("conversations", "messages"):
        return CHATS
    return None


class Database:
    """One SQLite file: its engine, a session per call, and the row lookups every store needs."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        self._cache = ReadCache()
        self._written = threading.local()
        """Per thread: the kinds the current session's statements wrote (None in it: any)."""
        try:
            self.db_path.parent.mkdir(parents=True, exist_ok=True)
            self._engine = create_engine(f"sqlite:///{self.db_path}", future=True)
            event.listen(self._engine, "connect", _on_connect)
            event.listen(self._engine, "after_cursor_execute", self._on_executed)
            Base.metadata.create_all(self._engine)
        except (SQLAlchemyError, OSError) as exc:
            raise StorageError(f"cannot open the database at {self.db_path}: {exc}") from exc
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)

    def close(self) -> None:
        self._engine.dispose()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        session = self._sessions()
        outer: set[str | None] | None = getattr(self._written, "kinds", None)
        written: set[str | None] = set()
        self._written.kinds = written
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise StorageError(f"database error: {exc}") from exc
        finally:
            session.close()
            self._written.kinds = outer  # a nested session committed on its own: its writes are its own
            if written:  # after the commit: a read that raced it is not kept
                self._cache.invalidate(None if None in written else {k for k in written if k is not None})

    def _on_executed(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip()[:6].upper().startswith("SELECT"):
            return
        kinds = kinds_written(statement)
        self._cache.invalidate(kinds)
        written: set[str | None] | None = getattr(self._written, "kinds", None)
        if written is not None:
            written.update([None] if kinds is None else kinds)

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
