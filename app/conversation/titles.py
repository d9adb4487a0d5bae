"""A new chat's title from its first message, distinct from the titles already in the list.

Two chats that start the same way ("Summarise this text for me: …", "Note 1: please keep in
mind …") would otherwise get the same 48 characters as their title and look identical in the
sidebar, which shows the first ~24 characters of a title. The second one's title keeps its
first word and then shows where it differs ("Summarise … the harbour report of…"); a message
that is entirely the same as another chat's gets a number ("Summarise this … (2)"). No Qt.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from app.storage import DEFAULT_TITLE

MAX_TITLE = 48
HEAD_WORDS = 1
SHOWN = 24
"""About what the sidebar shows of a title before it elides it: where titles must differ."""


def title_from(text: str) -> str:
    """The first line of ``text``, cut to ``MAX_TITLE`` characters."""
    line = text.strip().splitlines()[0] if text.strip() else DEFAULT_TITLE
    return _cut(line)


def distinct_title(text: str, taken: Collection[str], alike: Sequence[str] = ()) -> str:
    """``title_from(text)``, or when another chat already has that title, one that is not.

    ``alike``: the first messages of the chats that have that title; the new title then
    goes on from the first word where ``text`` differs from all of them."""
    base = title_from(text)
    if base not in taken:
        return base
    words = text.split()
    shown = len(base.rstrip("…").split())  # the title's words (the last may be cut)
    same = max((_common_words(words, other.split()) for other in alike), default=shown)
    start = max(HEAD_WORDS, same - 1)  # one word before the first that differs
    for skip in range(start, len(words) if same < len(words) else 0):
        candidate = _cut(" ".join(words[:HEAD_WORDS]) + " … " + " ".join(words[skip:]))
        if candidate not in taken and candidate != base:
            return candidate
    head = _cut(" ".join(words[:2]), MAX_TITLE - SHOWN + 6)
    n = 2
    while f"{head} … ({n})" in taken:
        n += 1
    return f"{head} … ({n})"


def _common_words(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def _cut(line: str, room: int = 0) -> str:
    limit = MAX_TITLE - room
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
