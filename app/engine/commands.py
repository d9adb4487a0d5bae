"""What other threads ask of a model's scheduler thread: one frozen record per command.

``Model`` posts these (``Scheduler.post`` / ``Scheduler.call``); ``Scheduler.execute`` runs
each between two ticks, on the scheduler thread. They are the whole thread boundary: a
record holds only immutable values, and the ``Future`` or callbacks an admission carries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.cache.keys import KeyMeta
from app.engine.admission import Admission
from app.engine.cache_hooks import Arrival, SaveReason
from app.engine.speculation.draft_model import DraftModel


@dataclass(frozen=True, slots=True)
class Admit:
    """Start ``admission`` on a seq, or queue it; a bad one raises to the caller."""

    admission: Admission
    arrival: Arrival | None = None
    """Settled once admitted (``Arrivals``: a burst no longer waits for it)."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """End request ``ref`` (idempotent; unknown refs are ignored)."""

    ref: int


@dataclass(frozen=True, slots=True)
class EndSession:
    """Release the session's seq unless a request of it runs (idempotent)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class SaveInFlight:
    """``evict`` / ``shutdown``: save every in-flight request's context."""

    reason: SaveReason


@dataclass(frozen=True, slots=True)
class Embed:
    """The embedding of ``tokens`` (the context is the scheduler thread's)."""

    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ChangeAdapters:
    """Run ``change`` (a ``LoraSet`` call: llama.cpp's adapter calls need the context's
    thread), then give new requests ``new_meta()`` — also after a failed change, whose
    native state cannot be trusted to equal the old one. The one command that carries code:
    the adapter set is the ``Model``'s, not the scheduler's."""

    change: Callable[[], Any]
    new_meta: Callable[[], KeyMeta]


@dataclass(frozen=True, slots=True)
class Verify:
    """Greedy check of ``drafts`` after ``prefix`` on a free seq (``Busy`` unless idle)."""

    prefix: tuple[int, ...]
    drafts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AttachDraft:
    """Draft with ``draft`` for the requests that name it (None: no draft model). The draft
    model is handed over: built and calibrated on the caller's thread, used only by the
    scheduler's from then on."""

    draft: DraftModel | None


@dataclass(frozen=True, slots=True)
class WindDown:
    """Unload: ``shutdown`` saves (when ``save``), then every request ends cancelled."""

    save: bool


Command = Admit | Cancel | EndSession | SaveInFlight | Embed | ChangeAdapters | Verify | AttachDraft | WindDown
