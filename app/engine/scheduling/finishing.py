"""How a request ends (the seed's ``finish_req``): finish save, release, one ``Done`` or ``Error``.

``Finisher.end`` runs for every request that leaves the request table, whatever the reason
(finished, cancelled, failed, the model unloaded), and guarantees exactly one terminal event
and one resolution of the request's future. Releasing never raises: if a native call fails
while the request's seq is handed back, the request ends with an ``Error`` instead of ``Done``
and the seq is cleared before its next use (``SeqPool.quarantine``).
"""

from __future__ import annotations

import logging
import time
from collections import deque

from app.engine.backend import Backend
from app.engine.errors import EngineError
from app.engine.events import Done, Error, ReuseRecord
from app.engine.request import Request
from app.engine.scheduling.admission import Admitter
from app.engine.scheduling.request_table import RequestTable
from app.engine.scheduling.saves import Saver
from app.engine.scheduling.sessions import SeqPool
from app.engine.scheduling.shares import Shares
from app.engine.speculation.lookup import drop_drafts

log = logging.getLogger(__name__)

RECENT_REUSE = 50


class Finisher:
    def __init__(
        self,
        backend: Backend,
        reqs: RequestTable,
        pool: SeqPool,
        saver: Saver,
        shares: Shares,
        admission: Admitter,
    ) -> None:
        self._backend = backend
        self._reqs = reqs
        self._pool = pool
        self._saver = saver
        self._shares = shares
        self._admission = admission
        self.recent_reuse: deque[ReuseRecord] = deque(maxlen=RECENT_REUSE)
        """What the last requests reused (``SchedulerSnapshot.recent_reuse``), newest last."""

    def end(self, req: Request) -> None:
        """Finish save (unless it failed), release the seq, then exactly one Done or Error."""
        req.times.finished_at = time.perf_counter()
        if req.error is None:
            try:
                drop_drafts(self._backend, req)  # its seq holds exactly its tokens when saved or pinned
                req.text.flush()
                self._saver.finish(req)
            except Exception as exc:
                log.exception("finishing request %d failed", req.ref)
                req.fail(exc)
        self._release(req)
        self._resolve(req)

    def _release(self, req: Request) -> None:
        """Out of the table; free the sampler; pin the seq to the request's session, or give
        it back to the pool."""
        self._reqs.remove(req)
        self._shares.on_leaving(req)  # waiters take the shared head while the seq holds it
        if req.sampler is not None:
            sampler, req.sampler = req.sampler, None
            try:
                self._backend.free_sampler(sampler)
            except Exception as exc:
                log.exception("freeing request %d's sampler failed", req.ref)
                req.fail(exc)
        sid = req.options.session_id
        if sid is not None and req.error is None and req.weights_epoch == self._admission.weights_epoch:
            self._pool.pin(sid, req.seq_id, req.context_tokens, req.read_ahead_from)
            return
        if sid is None and req.error is None and not req.is_background and req.context_tokens:
            # Its seq holds exactly its tokens (drafts dropped): the next taker may start from them.
            self._pool.leave(req.seq_id, req.context_tokens, req.weights_epoch)
            return
        try:
            self._pool.give_back(req.seq_id)
        except Exception as exc:
            log.exception("clearing request %d's seq %d failed", req.ref, req.seq_id)
            req.fail(exc)

    def _resolve(self, req: Request) -> None:
        if req.ended:
            return
        req.ended = True
        self._admission.count_prompt(req)
        if not req.is_background:  # a background read is no request (app.engine.scheduling.read_ahead)
            self.recent_reuse.append(ReuseRecord(
                req.options.session_id, req.num_prompt_tokens, req.cache.reuse, req.cache.hit_kind, time.time()
            ))  # fmt: skip
        if req.error is not None:
            err = req.error
            if not isinstance(err, EngineError):  # a bug, logged where it happened
                err = EngineError(f"internal error: {err!r}")
            if not req.result.done():
                req.result.set_exception(err)
            req.emit(Error(str(err), err.code))
            return
        stats = req.stats()
        if not req.result.done():
            req.result.set_result(req.outcome(stats))
        req.emit(Done(stats))
