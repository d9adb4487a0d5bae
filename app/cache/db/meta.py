"""Cache metadata in SQLite (SQLAlchemy 2.0 ORM, WAL): one ``CacheRow`` per saved KV state.

The database is an index, not the truth: every field of a row can be rebuilt from its blob
file (``app.cache.blobs.kvc_whole``), except the user pin. ``MetaDB`` opens the database, and when the
file is corrupt (or not a database at all) moves it aside and starts an empty one; the store
then re-registers every blob. Callers serialise access (the store holds a lock).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Boolean,
    Float,
    Integer,
    LargeBinary,
    String,
    create_engine,
    delete,
    event,
    select,
    text,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.pool import StaticPool

from app.cache.contents.chunk_index import Chunk
from app.cache.contents.rows import Row, make_row
from app.cache.errors import environment_kind

log = logging.getLogger(__name__)

STATUS_WRITING = "writing"
STATUS_AVAILABLE = "available"


class Base(DeclarativeBase):
    pass


class CacheRow(Base):
    __tablename__ = "cache_rows"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)  # hex
    model_id: Mapped[str] = mapped_column(String, default="", index=True)
    fingerprint: Mapped[str] = mapped_column(String(64))  # hex
    quant_type: Mapped[str] = mapped_column(String)
    ctx_hash: Mapped[str] = mapped_column(String(64))  # hex
    n_tokens: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[bytes] = mapped_column(LargeBinary)  # u32-LE
    tier: Mapped[str] = mapped_column(String, index=True)
    location: Mapped[str] = mapped_column(String, default="")
    size: Mapped[int] = mapped_column(Integer)
    checksum: Mapped[int] = mapped_column(Integer)  # CRC32C of the payload
    save_reason: Mapped[str] = mapped_column(String)
    context_size: Mapped[int] = mapped_column(Integer, default=0)
    prompt_preview: Mapped[str] = mapped_column(String, default="")
    created: Mapped[float] = mapped_column(Float)
    last_used: Mapped[float] = mapped_column(Float)
    hits: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String, default=STATUS_WRITING)
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)
    session_id: Mapped[str] = mapped_column(String, default="", server_default="")
    format: Mapped[int] = mapped_column(Integer, default=1, server_default="1")  # KVC 1 or 2
    chunk_size: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class CacheChunk(Base):
    """One stored KVC v2 chunk (``app.cache.blobs.kvc_chunked``): an index of its file's header."""

    __tablename__ = "cache_chunks"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)  # hex
    parent: Mapped[str] = mapped_column(String(64), index=True)  # hex
    start: Mapped[int] = mapped_column(Integer)
    chunk_size: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[bytes] = mapped_column(LargeBinary)  # u32-LE
    tier: Mapped[str] = mapped_column(String)
    size: Mapped[int] = mapped_column(Integer)
    created: Mapped[float] = mapped_column(Float)


class Counter(Base):
    """Lifetime counter totals, added to on close so ``hearth cache stats`` can show them."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[int] = mapped_column(Integer, default=0)


ROW_FIELDS = tuple(c.name for c in CacheRow.__table__.columns)
CHUNK_FIELDS = tuple(c.name for c in CacheChunk.__table__.columns)


def _text(raw: bytes) -> str:
    """TEXT values as ``str`` even when damaged: a bad byte must cost its row, not the read."""
    return raw.decode("utf-8", "replace")


def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.text_factory = _text
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


class MetaDB:
    """The cache's SQLite database. ``rebuilt`` is True when it started empty.

    A damaged file (not a database, failing ``quick_check``) is moved aside and a new one
    started. A file that cannot be opened for writing — a read-only or missing data dir, a
    database another program holds locked — is left alone: an in-memory database stands in
    (``in_memory``, with ``unusable`` saying why) so the cache keeps working for this session;
    the files remain the truth for the next one.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rebuilt = not path.exists()
        self.in_memory = False
        self.unusable: BaseException | None = None
        try:
            self._engine, self._sessions = self._open()
            return
        except (SQLAlchemyError, OSError, ValueError) as exc:  # ValueError: undecodable schema text
            first = exc
        if environment_kind(first) in (None, "damaged"):
            log.warning("cache database %s is damaged (%s); moving it aside", path, first)
            self._move_aside()
            self.rebuilt = True
            try:
                self._engine, self._sessions = self._open()
                return
            except (SQLAlchemyError, OSError, ValueError) as exc:
                first = exc
        log.error("cache database %s cannot be written (%s); using memory", path, first)
        self.unusable = first
        self.in_memory = True
        self.rebuilt = True
        self._engine, self._sessions = self._open()

    def _open(self) -> tuple[Engine, sessionmaker[Session]]:
        if self.in_memory:
            engine = create_engine(
                "sqlite://",
                connect_args={"check_same_thread": False},
                poolclass=StaticPool,
            )
        else:
            engine = create_engine(
                f"sqlite:///{self.path}", connect_args={"check_same_thread": False}
            )
        event.listen(engine, "connect", _on_connect)
        try:
            with engine.connect() as conn:
                check = conn.execute(text("PRAGMA quick_check")).scalar()
                if check != "ok":
                    raise SQLAlchemyError(f"quick_check: {check}")
            Base.metadata.create_all(engine)
            _add_missing_columns(engine)
            with Session(engine) as s:  # the tables must be readable, not just present
                s.execute(select(CacheRow.key).limit(1)).all()
        except BaseException:
            engine.dispose()
            raise
        return engine, sessionmaker(engine, expire_on_commit=False)

    def _move_aside(self) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{self.path}{suffix}")
            if src.is_file():
                dst = Path(f"{self.path}.corrupt-{stamp}{suffix}")
                try:
                    os.replace(src, dst)
                except OSError:  # a read-only dir: the caller falls back to memory
                    with contextlib.suppress(OSError):
                        src.unlink(missing_ok=True)

    def start_over(self, why: BaseException) -> None:
        """The file opened but its tables cannot be read through: move it aside and start an
        empty database (the store then re-registers every file)."""
        log.warning("cache database %s is damaged (%s); moving it aside", self.path, why)
        self._engine.dispose()
        self.rebuilt = True
        if not self.in_memory:
            self._move_aside()
        try:
            self._engine, self._sessions = self._open()
        except (SQLAlchemyError, OSError, ValueError) as exc:
            self.unusable = exc
            self.in_memory = True
            self._engine, self._sessions = self._open()

    def close(self) -> None:
        self._engine.dispose()

    # -- rows ---------------------------------------------------------------------------

    def all_rows(self) -> list[dict[str, Any]]:
        """Every row's stored values, *as stored* (no type conversion): a damaged value is
        the caller's to judge (``app.cache.repair.reconcile``), not a failure of the whole read."""
        return self._raw(CacheRow.__tablename__, ROW_FIELDS)

    def _raw(self, table: str, fields: tuple[str, ...]) -> list[dict[str, Any]]:
        with self._sessions() as s:
            result = s.execute(text(f"SELECT {', '.join(fields)} FROM {table}"))  # noqa: S608 — our names
            return [dict(zip(fields, values, strict=True)) for values in result]

    def put(self, fields: dict[str, Any]) -> None:
        """Insert or replace a row."""
        with self._sessions.begin() as s:
            s.merge(CacheRow(**fields))

    def put_many(self, rows: Iterable[dict[str, Any]]) -> None:
        with self._sessions.begin() as s:
            for fields in rows:
                s.merge(CacheRow(**fields))

    def update(self, key_hex: str, **fields: Any) -> None:
        with self._sessions.begin() as s:
            s.execute(update(CacheRow).where(CacheRow.key == key_hex).values(**fields))

    def delete(self, keys_hex: Iterable[str]) -> None:
        keys = list(keys_hex)
        if not keys:
            return
        with self._sessions.begin() as s:
            for i in range(0, len(keys), 500):
                s.execute(delete(CacheRow).where(CacheRow.key.in_(keys[i : i + 500])))

    def delete_tier(self, tier: str) -> int:
        with self._sessions.begin() as s:
            result = s.execute(delete(CacheRow).where(CacheRow.tier == tier))
            return int(getattr(result, "rowcount", 0) or 0)

    # -- chunks -------------------------------------------------------------------------

    def all_chunks(self) -> list[dict[str, Any]]:
        """Every chunk's stored values, as stored (see ``all_rows``)."""
        return self._raw(CacheChunk.__tablename__, CHUNK_FIELDS)

    def put_chunks(self, chunks: Iterable[dict[str, Any]]) -> None:
        with self._sessions.begin() as s:
            for fields in chunks:
                s.merge(CacheChunk(**fields))

    def update_chunk(self, key_hex: str, **fields: Any) -> None:
        with self._sessions.begin() as s:
            s.execute(update(CacheChunk).where(CacheChunk.key == key_hex).values(**fields))

    def delete_chunks(self, keys_hex: Iterable[str]) -> None:
        keys = list(keys_hex)
        with self._sessions.begin() as s:
            for i in range(0, len(keys), 500):
                s.execute(delete(CacheChunk).where(CacheChunk.key.in_(keys[i : i + 500])))

    # -- counters -----------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """The lifetime totals; a damaged entry (not a name and an integer) is left out."""
        out: dict[str, int] = {}
        for fields in self._raw(Counter.__tablename__, ("name", "value")):
            name, value = fields["name"], fields["value"]
            if isinstance(name, str) and isinstance(value, int) and not isinstance(value, bool):
                out[name] = value
        return out

    def add_counters(self, deltas: dict[str, int]) -> None:
        with self._sessions.begin() as s:
            for name, delta in deltas.items():
                if not delta:
                    continue
                row = s.get(Counter, name)
                if row is None:
                    s.add(Counter(name=name, value=delta))
                else:  # a damaged total (not an integer) starts again from this delta
                    row.value = (row.value if isinstance(row.value, int) else 0) + delta


def _add_missing_columns(engine: Engine) -> None:
    """Columns added since a database was created (``ALTER TABLE ADD COLUMN`` with the
    model's server default): older databases keep their rows."""
    with engine.begin() as conn:
        for table in Base.metadata.sorted_tables:
            info = list(conn.execute(text(f"PRAGMA table_info({table.name})")))
            have = {r[1] for r in info}
            for _cid, name, _kind, notnull, default, pk in info:
                if name not in table.columns and notnull and default is None and not pk:
                    # NOTE: a flipped byte in the schema text renamed "fingerprint" to
                    # "finggrprint": every insert then failed its NOT NULL constraint.
                    raise SQLAlchemyError(f"unknown required column {table.name}.{name}")
            for column in table.columns:
                if column.name in have:
                    continue
                default = column.server_default
                clause = f" DEFAULT {default.arg!r}" if default is not None else ""  # type: ignore[attr-defined]
                kind = column.type.compile(dialect=engine.dialect)
                conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}{clause}"))
                log.info("cache database: added column %s.%s", table.name, column.name)


def chunk_fields(chunk: Chunk) -> dict[str, Any]:
    """A stored chunk as database column values."""
    return {
        "key": chunk.key.hex(), "parent": chunk.parent.hex(), "start": chunk.start,
        "chunk_size": chunk.chunk_size, "tokens": chunk.tokens_le, "tier": chunk.tier,
        "size": chunk.size, "created": chunk.created,
    }  # fmt: skip


def chunk_from_fields(f: dict[str, Any]) -> Chunk:
    """Inverse of ``chunk_fields``."""
    return Chunk(
        key=bytes.fromhex(f["key"]), parent=bytes.fromhex(f["parent"]), start=f["start"],
        tokens_le=f["tokens"], chunk_size=f["chunk_size"], tier=f["tier"], size=f["size"],
        created=f["created"],
    )  # fmt: skip


def row_fields(row: Row) -> dict[str, Any]:
    """A Row as database column values."""
    return {
        "key": row.key.hex(), "model_id": row.model_id, "fingerprint": row.fingerprint,
        "quant_type": row.quant_type, "ctx_hash": row.ctx_hash, "n_tokens": row.n_tokens,
        "tokens": row.tokens_le, "tier": row.tier, "location": row.location,
        "size": row.size, "checksum": row.checksum, "save_reason": row.save_reason,
        "context_size": row.context_size, "prompt_preview": row.prompt_preview,
        "created": row.created, "last_used": row.last_used, "hits": row.hits,
        "status": row.status, "pinned": row.pinned, "session_id": row.session_id,
        "format": row.format, "chunk_size": row.chunk_size,
    }  # fmt: skip


def row_from_fields(f: dict[str, Any]) -> Row:
    """Inverse of ``row_fields``."""
    return make_row(
        key=bytes.fromhex(f["key"]), model_id=f["model_id"], fingerprint=f["fingerprint"],
        quant_type=f["quant_type"], ctx_hash=f["ctx_hash"], tokens_le=f["tokens"],
        tier=f["tier"], size=f["size"], save_reason=f["save_reason"], created=f["created"],
        last_used=f["last_used"], hits=f["hits"], pinned=bool(f["pinned"]),
        status=f["status"], location=f["location"], checksum=f["checksum"],
        context_size=f["context_size"], prompt_text=f["prompt_preview"],
        session_id=f.get("session_id") or "", format=f.get("format") or 1,
        chunk_size=f.get("chunk_size") or 0,
    )  # fmt: skip
