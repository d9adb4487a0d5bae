"""The sidebar's plain-Python state: the listed conversations and which ones are busy.

An :class:`~app.ui.state.observable.ObservableList` of frozen entries, newest activity first; the
sidebar's Qt model is a thin adapter over it (STYLE §2). No Qt here.

While the pointer is over the list (``hold_order``), an entry whose activity changed (a reply
finished) stays where it is, so nothing moves under the pointer; the order catches up when
the pointer leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.ui.state.observable import ObservableList


@dataclass(frozen=True, slots=True)
class ConversationEntry:
    id: str
    title: str
    updated: float
    busy: bool = False


def _entry_id(entry: ConversationEntry) -> str:
    return entry.id


class ConversationCatalog(ObservableList[ConversationEntry, str]):
    """Ordered newest-first; ``busy`` ids survive resets (e.g. a search while generating)."""

    def __init__(self) -> None:
        super().__init__(_entry_id)
        self._busy: set[str] = set()
        self._held = False

    def entry(self, row: int) -> ConversationEntry:
        return self[row]

    def entries(self) -> tuple[ConversationEntry, ...]:
        return tuple(self.items())

    def row_of(self, conversation_id: str) -> int:
        row = self.position(conversation_id)
        return -1 if row is None else row

    def is_busy(self, conversation_id: str) -> bool:
        return conversation_id in self._busy

    def reset(self, entries: list[ConversationEntry]) -> None:
        self._reset(replace(e, busy=e.id in self._busy) for e in entries)

    def upsert(self, entry: ConversationEntry) -> None:
        """Insert or update; an entry whose ``updated`` grew moves to its place by age."""
        entry = replace(entry, busy=entry.id in self._busy)
        row = self.row_of(entry.id)
        if row >= 0 and entry.updated == self[row].updated:
            self._replace(row, entry)
            return
        if row >= 0:
            self._replace(row, entry)
            if not self._held:
                # A move keeps the selection, where a remove + insert would drop it.
                self._move(row, self._place(entry, skip=row))
            return
        self._insert(self._place(entry), [entry])

    def remove(self, conversation_id: str) -> None:
        row = self.row_of(conversation_id)
        if row >= 0:
            self._remove(row, row)

    def set_busy(self, conversation_id: str, busy: bool) -> None:
        if busy:
            self._busy.add(conversation_id)
        else:
            self._busy.discard(conversation_id)
        row = self.row_of(conversation_id)
        if row >= 0 and self[row].busy != busy:
            self._replace(row, replace(self[row], busy=busy))

    @property
    def is_order_held(self) -> bool:
        return self._held

    def hold_order(self, held: bool) -> None:
        """Keep rows where they are (``True``); ``False`` moves them to their place by age."""
        self._held = held
        if held:
            return
        newest_first = sorted(self.items(), key=lambda e: -e.updated)  # stable for ties
        for target, entry in enumerate(newest_first):
            row = self.row_of(entry.id)
            if row != target:
                self._move(row, target)

    def _place(self, entry: ConversationEntry, skip: int = -1) -> int:
        """Where ``entry`` belongs by ``updated`` among the others (``skip``: its own row)."""
        pos = 0
        for i, other in enumerate(self.items()):
            if i != skip and other.updated > entry.updated:
                pos += 1
        return pos
