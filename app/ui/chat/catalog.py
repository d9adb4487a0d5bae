"""The sidebar's plain-Python state: the listed conversations and which ones are busy.

Every mutation goes through a few methods that notify listeners before and after, so a Qt
item model can be a thin adapter (STYLE §2). No Qt here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ConversationEntry:
    id: str
    title: str
    updated: float
    busy: bool = False


class CatalogListener(Protocol):
    def before_reset(self) -> None: ...
    def after_reset(self) -> None: ...
    def before_insert(self, row: int) -> None: ...
    def after_insert(self, row: int) -> None: ...
    def before_remove(self, row: int) -> None: ...
    def after_remove(self, row: int) -> None: ...
    def before_move(self, row: int, dest: int) -> None: ...
    def after_move(self, row: int, dest: int) -> None: ...
    def changed(self, row: int) -> None: ...


class ConversationCatalog:
    """Ordered newest-first; ``busy`` ids survive resets (e.g. a search while generating)."""

    def __init__(self) -> None:
        self._entries: list[ConversationEntry] = []
        self._busy: set[str] = set()
        self._listeners: list[CatalogListener] = []

    def add_listener(self, listener: CatalogListener) -> None:
        self._listeners.append(listener)

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, row: int) -> ConversationEntry:
        return self._entries[row]

    def entries(self) -> tuple[ConversationEntry, ...]:
        return tuple(self._entries)

    def row_of(self, conversation_id: str) -> int:
        for i, e in enumerate(self._entries):
            if e.id == conversation_id:
                return i
        return -1

    def is_busy(self, conversation_id: str) -> bool:
        return conversation_id in self._busy

    def reset(self, entries: list[ConversationEntry]) -> None:
        for lis in self._listeners:
            lis.before_reset()
        self._entries = [replace(e, busy=e.id in self._busy) for e in entries]
        for lis in self._listeners:
            lis.after_reset()

    def upsert(self, entry: ConversationEntry) -> None:
        """Insert or update; an entry whose ``updated`` grew moves to the top."""
        entry = replace(entry, busy=entry.id in self._busy)
        row = self.row_of(entry.id)
        if row >= 0 and entry.updated == self._entries[row].updated:
            self._entries[row] = entry
            self._changed(row)
            return
        if row >= 0:
            self._move(row, entry)
            return
        pos = 0
        while pos < len(self._entries) and self._entries[pos].updated > entry.updated:
            pos += 1
        for lis in self._listeners:
            lis.before_insert(pos)
        self._entries.insert(pos, entry)
        for lis in self._listeners:
            lis.after_insert(pos)

    def _move(self, row: int, entry: ConversationEntry) -> None:
        """Move an existing entry to its place by ``updated`` (a move keeps the selection)."""
        rest = self._entries[:row] + self._entries[row + 1 :]
        pos = 0
        while pos < len(rest) and rest[pos].updated > entry.updated:
            pos += 1
        if pos == row:
            self._entries[row] = entry
            self._changed(row)
            return
        # Qt's destination is "insert before this row" in pre-move numbering.
        dest = pos if pos < row else pos + 1
        for lis in self._listeners:
            lis.before_move(row, dest)
        self._entries = rest[:pos] + [entry] + rest[pos:]
        for lis in self._listeners:
            lis.after_move(row, dest)
        self._changed(pos)

    def remove(self, conversation_id: str) -> None:
        row = self.row_of(conversation_id)
        if row < 0:
            return
        for lis in self._listeners:
            lis.before_remove(row)
        del self._entries[row]
        for lis in self._listeners:
            lis.after_remove(row)

    def set_busy(self, conversation_id: str, busy: bool) -> None:
        if busy:
            self._busy.add(conversation_id)
        else:
            self._busy.discard(conversation_id)
        row = self.row_of(conversation_id)
        if row >= 0 and self._entries[row].busy != busy:
            self._entries[row] = replace(self._entries[row], busy=busy)
            self._changed(row)

    def _changed(self, row: int) -> None:
        for lis in self._listeners:
            lis.changed(row)
