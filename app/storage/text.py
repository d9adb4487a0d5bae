"""What the app database accepts as text, and how text leaves it. No Qt.

SQLite stores text as UTF-8, so a Python ``str`` holding an unpaired UTF-16 surrogate (which
a paste or a bad decoder can produce) cannot be written, and a ``bytes`` value would be stored
as a BLOB that later breaks export. Every value a caller hands in is checked here first and
refused with :class:`InvalidTextError` — a clear message, nothing written. Values read back
are made safe for export even when an older database holds such rows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from app.storage.errors import InvalidTextError

log = logging.getLogger(__name__)

JSON_SCALARS = (bool, int, float, type(None))


def check_text(name: str, value: object) -> str:
    """``value`` if it is a ``str`` that encodes to UTF-8, else :class:`InvalidTextError`."""
    if not isinstance(value, str):
        raise InvalidTextError(f"{name} must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        raise InvalidTextError(
            f"{name} contains an unpaired surrogate (U+{code:04X}) at character {exc.start}: "
            "it is not valid Unicode text, so it cannot be stored"
        ) from None
    return value


def check_json(name: str, value: object) -> Any:
    """``value`` if it is JSON made of dicts, lists, numbers, booleans, None and valid text."""
    if isinstance(value, str):
        return check_text(name, value)
    if isinstance(value, JSON_SCALARS):
        return value
    if isinstance(value, Mapping):
        for key, item in value.items():
            check_text(f"{name} key", key)
            check_json(f"{name}[{key!r}]", item)
        return value
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_json(f"{name}[{i}]", item)
        return value
    raise InvalidTextError(f"{name} must be JSON data, not {type(value).__name__}")


def as_text(value: object) -> str:
    """A stored text column as ``str``; an older database may hold bytes (decoded, not lost)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        text = raw.decode("utf-8", errors="replace")
        log.warning("a text column held %d bytes instead of text; decoded as UTF-8", len(raw))
        return text
    return str(value)


def encodable(text: str) -> str:
    """``text`` with any unpaired surrogate replaced by U+FFFD, so it always encodes to UTF-8.

    Valid surrogate pairs are joined; used on export, where an older database may hold JSON
    strings with ``\\udXXX`` escapes.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
