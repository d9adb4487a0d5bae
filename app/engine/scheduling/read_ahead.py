"""Type-ahead's side of the scheduler (docs/engine-api.md, Type-ahead): the background ``prefill_only``.

While a message is being written, the app reads the draft into its chat's sticky seq with
``Model.read_ahead`` (``prefill_only`` with ``priority="background"``), so that on Enter the
ordinary request finds almost all of its prompt held already (plain sticky reuse: its reply
is the one it would be without). Such a request is the lowest priority and never gets in
the way:

* **a real prompt goes first**: no background slice in a tick while any other request has
  prompt tokens to read (``ReadAhead.plan``); a real admission on the same session ends the
  background request at once, keeping what it read as the session's state (``make_way``,
  which also lets a newer draft replace an older one); a real admission that waits for a
  seq takes the seq of a background request (``yield_seqs``); background admissions wait
  behind real ones (``Admitter.dispatch``); a request waiting to share a prompt head never
  waits for a background donor (``Shares.best``);
* **a streaming reply loses at most ``SHARE`` of its time**: a tick with decode rows gets
  at most one background slice of ``SLICE_WHILE_DECODING`` tokens, and only once the ticks
  since the last such slice took ``1/SHARE - 1`` times as long as that tick;
* **it uses the idle cores**: a tick of a background slice alone runs on
  ``ModelConfig.n_threads_background`` threads (every core by default), since no request
  has anything to compute then; a slice next to decode rows runs on the requests' threads;
* **it is no request**: no hit, miss or prompt tokens counted (``cache_hooks.QuietCache``), no finish
  save, no reuse record; the real request's ``Reuse.tokens_read_ahead`` says how much of
  what it reused was read ahead.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping

from app.engine.backend import PrefillOp
from app.engine.batch import TickPlan
from app.engine.request import Request
from app.engine.scheduling.admission import Admission, Admitter
from app.engine.scheduling.finishing import Finisher

SHARE = 0.05
"""At most this share of a streaming reply's time goes to background slices.
NOTE: B11's goal is a streaming chat at >= 0.9 x its rate with nobody typing. A 16-token
slice next to one decode row makes a ~70 ms tick where a decode tick alone is ~10 ms; a
share of 5 % still reads ~11 draft tokens a second while a reply streams, several times
what a typist writes (8 characters, about 2 tokens, a second)."""

SLICE_WHILE_DECODING = 16
"""The largest background slice in a tick with decode rows: a streaming reply pauses for one
slice (~60 ms on a 2-core CPU), never for a whole prefill chunk."""

CHUNK = 64
"""The largest background slice while nothing streams. NOTE: a real prompt that arrives
while such a slice runs waits for it (a ``llama_decode`` cannot be interrupted): 64 tokens
are ~0.25 s at the start of a chat, against ~0.5 s for the default 128-token chunk."""


class ReadAhead:
    """The scheduler's background requests: their slices, and how they make way."""

    def __init__(self, reqs: Mapping[int, Request], admission: Admitter, finisher: Finisher, *, n_batch: int,
                 chunk_size: int | None) -> None:  # fmt: skip
        self._reqs = reqs
        self._admission = admission
        self._finisher = finisher
        self._n_batch = n_batch
        self._chunk = CHUNK if chunk_size is None else min(CHUNK, chunk_size)
        self._ready_at = 0.0
        """``perf_counter()`` before which no background slice joins decode rows."""
        self._charged = False
        """The planned tick has a background slice next to decode rows."""

    # ------------------------------------------------------------------ the tick

    def plan(self, plan: TickPlan, reqs: Collection[Request]) -> TickPlan:
        """``plan`` (the real requests' tick) plus, when nothing real waits, one background slice."""
        self._charged = False
        background = [r for r in reqs if r.is_background and r.prefill_cursor and not r.finishing]
        if not background or any(r.prefill_cursor and not r.is_background and not r.finishing for r in reqs):
            return plan
        decoding = plan.num_decode_rows > 0
        if decoding and time.perf_counter() < self._ready_at:
            return plan
        cap = min(SLICE_WHILE_DECODING if decoding else self._chunk, self._n_batch - len(plan.ops))
        if cap <= 0:
            return plan
        req = background[0]
        n = req.next_slice_len(cap)
        op = PrefillOp(req.seq_id, tuple(req.prefill_cursor[:n]), len(req.context_tokens), False)
        self._charged = decoding
        return TickPlan((*plan.ops, op), background=not plan.ops)

    def record(self, tick_ms: float) -> None:
        """The planned tick ran in ``tick_ms``: a background slice next to decode rows makes
        the next one wait until the others have had their share."""
        if self._charged:
            self._ready_at = time.perf_counter() + tick_ms / 1000 * (1 / SHARE - 1)
            self._charged = False

    # ------------------------------------------------------------------ making way

    def make_way(self, adm: Admission) -> None:
        """Before ``adm`` is admitted: its session's background request ends now (the seq
        keeps what it read, pinned to the session) and a waiting one never starts."""
        sid = adm.options.session_id
        if sid is None:
            return
        for req in [r for r in self._reqs.values() if r.is_background and r.options.session_id == sid]:
            self._end(req)
        for waiting in [a for a in self._admission.pending if a.options.priority == "background"]:
            if waiting.options.session_id == sid:
                self._admission.cancel(waiting.ref)

    def yield_seqs(self) -> bool:
        """Real admissions wait for a seq: as many background requests end (their seqs stay
        pinned to their sessions, which the waiting admissions may then release). True when
        one did."""
        num_waiting = sum(1 for a in self._admission.pending if a.options.priority != "background")
        running = [r for r in self._reqs.values() if r.is_background]
        for req in running[:num_waiting]:
            self._end(req)
        return bool(running[:num_waiting])

    def _end(self, req: Request) -> None:
        """End between two ticks: the seq holds exactly ``context_tokens``."""
        if not req.finishing:
            req.mark("cancelled")
        self._finisher.end(req)

