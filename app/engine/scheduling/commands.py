"""What other threads ask of a model's scheduler thread: one frozen record per command.

``Model`` posts these (``Scheduler.post`` / ``Scheduler.call``); ``CommandRunner.execute``
runs each between two ticks, on the scheduler thread. They are the whole thread boundary: a
record holds only immutable values, and the ``Future`` or callbacks an admission carries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, assert_never

from app.cache.keys import KeyMeta
from app.engine.backend import Backend
from app.engine.cache_hooks import Arrival, Arrivals, SaveReason
from app.engine.errors import Busy, EngineError
from app.engine.scheduling.admission import Admission
from app.engine.scheduling.parts import SchedulerParts
from app.engine.scheduling.read_ahead import ReadAhead
from app.engine.scheduling.saves import Saver
from app.engine.speculation.draft_model import DraftModel
from app.engine.speculation.lookup import drop_drafts


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

class Commanded(SchedulerParts, Protocol):
    """The parts of a scheduler its commands act on (``app.engine.scheduling.scheduler.Scheduler``)."""

    @property
    def backend(self) -> Backend: ...
    @property
    def arrivals(self) -> Arrivals: ...
    @property
    def read_ahead(self) -> ReadAhead: ...
    @property
    def saver(self) -> Saver: ...
    def dispatch(self) -> None: ...
    def hold_writes(self) -> None: ...
    def abandon(self, exc: Exception) -> None: ...


class CommandRunner:
    """What each command does, on the scheduler thread (``Scheduler.post`` / ``call`` run
    ``execute``): admit, cancel, end a session, save, change adapters, attach a draft model,
    verify, wind down."""

    def __init__(self, scheduler: Commanded) -> None:
        self.s = scheduler

    def execute(self, cmd: Command) -> Any:
        """Run a command posted from another thread (``app.engine.scheduling.commands``)."""
        match cmd:
            case Admit(adm, arrival):
                try:
                    self.admit(adm)
                finally:
                    if arrival is not None:
                        self.s.arrivals.settle(arrival)
            case Cancel(ref):
                self.cancel(ref)
            case EndSession(sid):
                self.end_session(sid)
            case SaveInFlight(reason):
                return self.save_in_flight(reason)
            case Embed(tokens):
                return self.s.backend.embed(list(tokens))
            case ChangeAdapters(change, new_meta):
                try:
                    return change()
                finally:
                    self.adapters_changed(new_meta())
            case Verify(prefix, drafts):
                return self.verify(prefix, drafts)
            case AttachDraft(draft):
                self.attach_draft(draft)
            case WindDown(save):
                self.wind_down(save)
            case _:
                assert_never(cmd)
        return None

    def admit(self, adm: Admission) -> None:
        """Admit ``adm``; background reads of its session, and of the seqs it waits for, make way."""
        self.s.read_ahead.make_way(adm)
        self.s.admission.admit(adm)
        if self.s.read_ahead.yield_seqs():
            self.s.dispatch()
        self.s.hold_writes()  # before its arrival ends (``Model._post_admit``): no gap in the hold

    def cancel(self, ref: int) -> None:
        """Idempotent, unknown refs ignored. A running request ends now, between two ticks
        (the seed observes a cancel at the next tick boundary); a waiting one never starts."""
        req = self.s.reqs.by_ref(ref)
        if req is None:
            self.s.admission.cancel(ref)
        elif not req.finishing:
            req.mark("cancelled")
            self.s.finisher.end(req)
            self.s.dispatch()

    def end_session(self, sid: str) -> None:
        """Idempotent: unknown sessions and sessions with a request in flight are left alone."""
        session = self.s.pool.session(sid)
        if session is not None and session.seq_id not in self.s.reqs:
            self.s.pool.drop(sid)

    def save_in_flight(self, reason: SaveReason) -> int:
        """``evict`` / ``shutdown``: one save per in-flight request with a non-empty context
        (pending drafts dropped first: a save holds committed tokens only)."""
        for req in self.s.reqs.values():
            drop_drafts(self.s.backend, req)
        return self.s.saver.in_flight(list(self.s.reqs.values()), reason)

    def adapters_changed(self, meta: KeyMeta | None) -> None:
        """The model's weights changed (LoRA set or scale): KV computed before is no longer
        what this model would compute. Idle sessions are released (their saves stay valid
        under the old fingerprint), new requests get the new cache identity, and in-flight
        requests keep theirs — and are no donors of shared prompt heads for new ones, nor
        pin their seq to their session when they finish."""
        self.s.admission.new_weights(meta)

    def attach_draft(self, draft: DraftModel | None) -> None:
        """Draft with ``draft`` (None: no draft model) for the requests that name it; the
        one it replaces is closed here, on the thread that used it."""
        old = self.s.speculator.attach(draft)
        if old is not None and old is not draft:
            old.close()

    def verify(self, prefix: Sequence[int], drafts: Sequence[int]) -> tuple[int, int | None]:
        """Greedy speculative check on a free seq; ``Busy`` unless the model is idle."""
        seq_id = self.s.pool.peek()
        if self.s.reqs or self.s.admission.pending or seq_id is None:
            raise Busy("verify needs an idle model")
        self.s.pool.clear_for_use(seq_id)  # its leftover cells (``SeqPool.leave``) are gone after
        return self.s.backend.verify(seq_id, list(prefix), list(drafts))

    def wind_down(self, save: bool) -> None:
        """Unload: ``shutdown`` saves (when ``save``), then every request ends cancelled."""
        if save:
            self.save_in_flight("shutdown")
        self.s.abandon(EngineError("the model was unloaded", code="cancelled"))
        old = self.s.speculator.attach(None)
        if old is not None:
            old.close(save)  # its seqs are saved (under its own key) and its backend freed
