"""Beyond the seed: shared prompt heads between live seqs.

NOTE: when several conversations with one system prompt start together, none of them is in
the cache yet; the first prefills the shared head and the others share its cells
(``Backend.seq_cp``) instead of prefilling it again. An idle session's seq is a donor too.

A request whose donor has not prefilled the head yet waits (``Request.share_from``); it
takes the head as soon as the donor's KV holds it (``on_progress``, after the donor's
prefill slice or its own share), and prefills its whole prompt itself if the donor leaves
first (``on_leaving``). Requests computed with other adapter weights are never donors.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from app.cache.prefix import common_prefix_len
from app.engine.backend import Backend
from app.engine.request import Request
from app.engine.sessions import SeqPool

log = logging.getLogger(__name__)

SHARE_MIN_TOKENS = 32


class Shares:
    def __init__(self, backend: Backend, reqs: Mapping[int, Request], pool: SeqPool) -> None:
        self._backend = backend
        self._reqs = reqs
        self._pool = pool

    def setup(self, req: Request, weights_epoch: int) -> bool:
        """Share the longest head another live seq holds or will hold; False when none is long enough."""
        prompt = req.prompt_tokens
        best_n, donor_seq, donor_req = 0, -1, None
        for other in self._reqs.values():
            if other is req or other.finishing or other.weights_epoch != weights_epoch:
                continue
            n = common_prefix_len(other.prompt_tokens, prompt)
            if n > best_n:
                best_n, donor_seq, donor_req = n, other.seq_id, other
        for session in self._pool.sessions.values():
            n = common_prefix_len(session.tokens, prompt)
            if n > best_n:
                best_n, donor_seq, donor_req = n, session.seq_id, None
        n = min(best_n, len(prompt) - 1)  # the last prompt token is prefilled for logits
        if n < SHARE_MIN_TOKENS:
            return False
        req.cache.reused("partial", n)
        if donor_req is None or len(donor_req.context_tokens) >= n:
            self._take(req, donor_seq, n)
        else:
            req.share_from = (donor_req.ref, n)
        return True

    def on_progress(self, donor: Request) -> None:
        """The donor's KV grew: waiters whose head it now holds take it."""
        for waiter in self._waiters(donor):
            assert waiter.share_from is not None
            n = waiter.share_from[1]
            if len(donor.context_tokens) >= n:
                self._take_guarded(waiter, donor.seq_id, n)

    def on_leaving(self, donor: Request) -> None:
        """The donor finishes or fails (its seq is still as it was): waiters take what it
        holds, or go back to prefilling their whole prompt."""
        for waiter in self._waiters(donor):
            assert waiter.share_from is not None
            n = waiter.share_from[1]
            if donor.error is None and len(donor.context_tokens) >= n:
                self._take_guarded(waiter, donor.seq_id, n)
            else:
                waiter.share_from = None
                waiter.prefill_cursor = list(waiter.prompt_tokens)
                waiter.cache.reused("cold", 0)

    def _waiters(self, donor: Request) -> list[Request]:
        return [
            r for r in self._reqs.values()
            if r.share_from is not None and r.share_from[0] == donor.ref and not r.finishing
        ]  # fmt: skip

    def _take_guarded(self, req: Request, src_seq: int, n: int) -> None:
        try:
            self._take(req, src_seq, n)
        except Exception as exc:
            log.exception("sharing %d tokens from seq %d into seq %d failed", n, src_seq, req.seq_id)
            req.fail(exc)

    def _take(self, req: Request, src_seq: int, n: int) -> None:
        self._backend.seq_cp(src_seq, req.seq_id, n)
        req.context_tokens = list(req.prompt_tokens[:n])
        req.prefill_cursor = list(req.prompt_tokens[n:])
        req.share_from = None
        self.on_progress(req)  # a request waiting for this one's head may take it now

