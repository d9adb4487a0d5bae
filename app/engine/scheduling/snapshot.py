"""What a scheduler publishes after every loop iteration (``SchedulerSnapshot``): its phase,
its seqs as slots, its recent ticks and speculation counters — built on the scheduler thread
and replaced whole, so any thread may read it without a lock (``Scheduler.snapshot``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from app.engine.config import ModelConfig
from app.engine.events import SchedulerSnapshot, SlotInfo, SlotState, TickInfo
from app.engine.scheduling.parts import SchedulerParts


class Observed(SchedulerParts, Protocol):
    """What a snapshot reads of its scheduler (``app.engine.scheduling.scheduler.Scheduler``)."""

    @property
    def phase(self) -> str: ...
    @property
    def config(self) -> ModelConfig: ...
    @property
    def ticks(self) -> Iterable[TickInfo]: ...
    @property
    def num_generated(self) -> int: ...
    @property
    def free_slots(self) -> tuple[SlotInfo, ...]: ...


def snapshot_of(s: Observed) -> SchedulerSnapshot:
    return SchedulerSnapshot(
        phase=s.phase,
        pending_len=len(s.admission.pending),
        last_cache_hit=s.admission.last_hit,
        slots=slots_of(s),
        recent_ticks=tuple(s.ticks),
        num_tokens_generated=s.num_generated,
        recent_reuse=tuple(s.finisher.recent_reuse),
        speculative=s.speculator.enabled,
        num_drafted=s.speculator.num_drafted,
        num_accepted=s.speculator.num_accepted,
        draft_model=None if s.speculator.draft is None else s.speculator.draft.model_id,
        draft_max=draft_max_setting(s),
    )


def draft_max_setting(s: Observed) -> int:
    return s.config.draft_max if s.speculator.enabled else 0


def slots_of(s: Observed) -> tuple[SlotInfo, ...]:
    sessions = s.pool.sessions
    owners = {seq.seq_id: (sid, len(seq.tokens)) for sid, seq in sessions.items()} if sessions else {}
    slots = []
    free = s.free_slots
    for seq in range(s.config.n_seq_max):
        req = s.reqs.get(seq)
        if req is not None:
            busy: SlotState = "prefilling" if req.is_prefilling else "generating"
            if req.is_background:
                busy = "reading_ahead"
            slots.append(SlotInfo(
                seq, busy, req.options.session_id, len(req.context_tokens), req.num_drafted, req.num_accepted,
                len(req.drafted),
            ))  # fmt: skip
        elif seq in owners:
            slots.append(SlotInfo(seq, "pinned", owners[seq][0], owners[seq][1]))
        else:
            slots.append(free[seq])
    return tuple(slots)
