"""The environment's failures are counted and shown; our bugs are logged with a traceback
and counted apart (#15 item 12, qutebrowser's KnownError/BugError split)."""

from __future__ import annotations

import errno
import logging
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from app.cache.errors import environment_kind, is_environment_error
from app.cache.store import CacheStore
from tests.unit.cache.conftest import META, save

PROMPT = list(range(700, 740))


def real_locked_error(tmp_path: Path) -> sqlite3.OperationalError:
    """The exception SQLite really raises when another program holds the database."""
    path = tmp_path / "locked.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("INSERT INTO t VALUES (1)")
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        other.close()
        holder.close()
    raise AssertionError("the second writer was not refused")


def real_readonly_error(tmp_path: Path) -> sqlite3.OperationalError:
    path = tmp_path / "ro.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
    ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        ro.execute("INSERT INTO t VALUES (1)")
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        ro.close()
    raise AssertionError("a read-only database accepted a write")


def test_classification(tmp_path: Path) -> None:
    assert environment_kind(OSError(errno.ENOSPC, "No space left on device")) == "disk_full"
    assert environment_kind(OSError(errno.EROFS, "Read-only file system")) == "read_only"
    assert environment_kind(OSError(errno.EIO, "Input/output error")) == "io_error"
    locked = real_locked_error(tmp_path)
    assert environment_kind(locked) == "locked"
    assert environment_kind(OperationalError("INSERT", {}, locked)) == "locked"  # wrapped
    assert environment_kind(real_readonly_error(tmp_path)) == "read_only"
    # bugs: wrong types, missing keys, SQL that SQLite rejects as malformed
    assert not is_environment_error(TypeError("unsupported operand"))
    assert not is_environment_error(KeyError("status"))
    try:
        sqlite3.connect(":memory:").execute("SELEC nonsense")
    except sqlite3.OperationalError as exc:
        assert not is_environment_error(exc)


def test_locked_database_is_counted_and_shown_and_the_save_still_serves(
    store: CacheStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = real_locked_error(tmp_path)

    def refuse(*args: object, **kwargs: object) -> None:
        raise OperationalError("UPDATE cache_rows", {}, locked)

    monkeypatch.setattr(store._db, "put", refuse)
    monkeypatch.setattr(store._db, "update", refuse)
    save(store, PROMPT)
    counters = store.counters()
    assert counters["db_errors"] == 2 and counters["internal_errors"] == 0
    assert counters["save_errors"] == 0  # the blob itself was written
    (problem,) = store.problems()
    assert problem.kind == "locked" and problem.count == 2
    assert "locked by another program" in problem.message
    row = store.lookup_exact(META, PROMPT)  # the in-memory catalog stays authoritative
    assert row is not None and store.load(row) is not None


def test_a_bug_in_a_database_call_is_logged_with_its_traceback(
    store: CacheStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def buggy(*args: object, **kwargs: object) -> None:
        raise TypeError("unsupported operand type(s)")

    save(store, PROMPT)
    store.expected_internal_errors = 1  # type: ignore[attr-defined]
    monkeypatch.setattr(store._db, "update", buggy)
    row = store.lookup_exact(META, PROMPT)
    assert row is not None
    with caplog.at_level(logging.ERROR):
        assert store.pin(row.key)
    counters = store.counters()
    assert counters["internal_errors"] == 1
    assert counters["db_errors"] == 0 and counters["save_errors"] == 0
    assert store.problems() == ()  # nothing for the user to fix
    bug = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert bug and bug[0].exc_info is not None and "TypeError" in caplog.text


def test_a_full_disk_is_a_problem_to_show(store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cache.blobs import tiers

    def no_space(fd: int, data: bytes | memoryview) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tiers, "_write_all", no_space)
    save(store, PROMPT)
    assert store.counters()["save_errors"] == 1 and store.counters()["internal_errors"] == 0
    (problem,) = store.problems()
    assert problem.kind == "disk_full" and "full" in problem.message
