"""Conversation titles for the dashboard: a row's or a tree node's ``session_id`` → the chat's
title, remembered until the next refresh (a title lookup is a database read, and a table
asks for it on every paint)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

SessionNamer = Callable[[str], str | None]


class ConversationTitles:
    def __init__(self, namer: SessionNamer | None) -> None:
        self._namer = namer
        self._known: dict[str, str | None] = {}

    def title(self, session_id: str | None) -> str | None:
        """The conversation's title, or None (no session, not a chat, or no namer)."""
        if not session_id or self._namer is None:
            return None
        if session_id not in self._known:
            self._known[session_id] = self._namer(session_id)
        return self._known[session_id]

    def quoted(self, session_ids: Iterable[str]) -> list[str]:
        """“Title” for each session that is a known chat, in order, without repeats."""
        out: list[str] = []
        for sid in session_ids:
            t = self.title(sid)
            if t and f"“{t}”" not in out:
                out.append(f"“{t}”")
        return out

    def clear(self) -> None:
        """Forget what was read (titles may have been renamed)."""
        self._known.clear()
