"""Which failures are the environment's and which are ours (qutebrowser's ``misc/sql.py``
split: ``KnownError`` vs ``BugError``).

The environment's: a full disk or quota, a read-only or vanished directory, an I/O error,
a database that another program holds locked, a damaged database file. The cache counts
them, keeps going, and keeps the latest one of each kind as a ``Problem`` in plain words for
the UI and ``hearth cache`` to show. Anything else — a ``TypeError``, a ``KeyError``, an SQL
statement SQLite rejects as malformed — is a bug in Hearth: it is logged with its traceback
and counted as ``internal_errors``, never filed under a user's disk.
"""

from __future__ import annotations

import errno
import sqlite3
import threading
import time
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError

# errno values that describe the machine, not the program
_ENV_ERRNOS = {
    errno.ENOSPC: "disk_full",
    errno.EDQUOT: "disk_full",
    errno.EFBIG: "disk_full",
    errno.EROFS: "read_only",
    errno.EACCES: "read_only",
    errno.EPERM: "read_only",
    errno.EIO: "io_error",
    errno.ENOENT: "missing",
    errno.ENOTDIR: "missing",
    errno.EISDIR: "missing",
    errno.ENAMETOOLONG: "missing",
    errno.EMFILE: "resources",
    errno.ENFILE: "resources",
    errno.ENOMEM: "resources",
    errno.EBUSY: "locked",
    errno.ESTALE: "io_error",
}

# SQLite primary result codes (sqlite3.h), the low byte of an extended code
_SQLITE_CODES = {
    5: "locked",  # SQLITE_BUSY
    6: "locked",  # SQLITE_LOCKED
    7: "resources",  # SQLITE_NOMEM
    8: "read_only",  # SQLITE_READONLY
    10: "io_error",  # SQLITE_IOERR
    11: "damaged",  # SQLITE_CORRUPT
    13: "disk_full",  # SQLITE_FULL
    14: "missing",  # SQLITE_CANTOPEN
    15: "locked",  # SQLITE_PROTOCOL
    26: "damaged",  # SQLITE_NOTADB
}

_WORDS = {
    "disk_full": "the disk holding the cache is full",
    "read_only": "the cache directory cannot be written (read-only or no permission)",
    "io_error": "the disk reported an input/output error",
    "missing": "the cache directory is missing or is not a directory",
    "resources": "the system ran out of memory or file handles",
    "locked": "the cache database is locked by another program",
    "damaged": "the cache database file is damaged",
}


def environment_kind(exc: BaseException) -> str | None:
    """The kind of environment failure ``exc`` is (``disk_full``, ``read_only``, …), or
    None when it is not one (then it is a bug)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int):
            return _SQLITE_CODES.get(code & 0xFF)
        return None
    if isinstance(exc, OSError):
        return _ENV_ERRNOS.get(exc.errno or -1, "io_error" if exc.errno is None else None)
    return None


def is_environment_error(exc: BaseException) -> bool:
    return environment_kind(exc) is not None


@dataclass(frozen=True, slots=True)
class Problem:
    """One kind of environment failure the cache met, in words a user can act on."""

    kind: str
    message: str  # plain words, e.g. "the disk holding the cache is full"
    detail: str  # the system's own message
    count: int
    last_seen: float  # unix seconds


class Problems:
    """The latest environment failure of each kind, with how often it happened."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_kind: dict[str, Problem] = {}

    def note(self, exc: BaseException, doing: str) -> Problem:
        kind = environment_kind(exc) or "io_error"
        with self._lock:
            old = self._by_kind.get(kind)
            problem = Problem(
                kind=kind,
                message=f"{_WORDS[kind]} ({doing})",
                detail=str(exc),
                count=(old.count if old else 0) + 1,
                last_seen=time.time(),
            )
            self._by_kind[kind] = problem
            return problem

    def all(self) -> tuple[Problem, ...]:
        with self._lock:
            return tuple(sorted(self._by_kind.values(), key=lambda p: p.last_seen))
