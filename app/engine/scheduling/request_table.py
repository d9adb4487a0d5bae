"""The request table: seq id → the request running on it, in admission order.

The scheduler owns the one table; ``Admitter`` is the only one that adds to it (``add``),
``Finisher`` the only one that takes out of it (``remove``); everyone else reads it as a
``Mapping`` (``Shares``, ``ReadAhead``, the tick). Scheduler thread only.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import TypeVar, overload

from app.engine.request import Request

T = TypeVar("T")


class RequestTable(Mapping[int, Request]):
    def __init__(self) -> None:
        self._by_seq: dict[int, Request] = {}

    def add(self, req: Request) -> None:
        """``req`` runs on its seq now (a seq runs one request at a time)."""
        if req.seq_id in self._by_seq:
            raise RuntimeError(f"seq {req.seq_id} already runs request {self._by_seq[req.seq_id].ref}")
        self._by_seq[req.seq_id] = req

    def remove(self, req: Request) -> None:
        """``req`` has ended: its seq runs nothing now."""
        if self._by_seq.get(req.seq_id) is not req:
            raise RuntimeError(f"request {req.ref} is not running on seq {req.seq_id}")
        del self._by_seq[req.seq_id]

    def by_ref(self, ref: int) -> Request | None:
        """The running request ``ref``, if it runs."""
        return next((r for r in self._by_seq.values() if r.ref == ref), None)

    def in_session(self, session_id: str) -> bool:
        """A request of this session is running."""
        return any(r.options.session_id == session_id for r in self._by_seq.values())

    # Mapping: the dict's own views (the tick reads them every tick).

    def __getitem__(self, seq_id: int) -> Request:
        return self._by_seq[seq_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_seq)

    def __len__(self) -> int:
        return len(self._by_seq)

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._by_seq

    @overload
    def get(self, seq_id: int, /) -> Request | None: ...
    @overload
    def get(self, seq_id: int, default: Request | T, /) -> Request | T: ...
    def get(self, seq_id: int, default: object = None) -> object:
        # The dict's own: Mapping.get raises and catches a KeyError for every free seq, and
        # the scheduler asks for each of its seqs every tick (``Scheduler._slots``).
        return self._by_seq.get(seq_id, default)

    def keys(self) -> KeysView[int]:
        return self._by_seq.keys()

    def values(self) -> ValuesView[Request]:
        return self._by_seq.values()

    def items(self) -> ItemsView[int, Request]:
        return self._by_seq.items()

    def __repr__(self) -> str:
        return f"RequestTable({ {seq: r.ref for seq, r in self._by_seq.items()} })"
