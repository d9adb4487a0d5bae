"""Beyond the seed: shared prompt heads between live seqs.

NOTE: when several conversations with one system prompt start together, none of them is in
the cache yet; the first prefills the shared head and the others get a copy of its cells
(``Backend.seq_cp``: pack, cut, load — each seq has a KV stream of its own) instead of
prefilling it again. An idle session's seq is a donor too. Admission weighs a live head
against the cache and the request's own session seq (``app.engine.scheduling.admission``).

A request whose donor has not prefilled the head yet waits (``Request.share_from``); it
takes the head as soon as the donor's KV holds it (``on_progress``, after the donor's
prefill slice or its own share), and prefills its whole prompt itself if the donor leaves
first (``on_leaving``). Requests computed with other adapter weights are never donors.

A state that cannot be cut (``MemoryCaps.cut_states``: recurrent, hybrid, sliding window)
is copied only whole, at the moment the donor holds exactly the shared head: an idle
session's seq when the prompt extends everything it holds, a running donor when its prefill
reaches the head — the donor's slices stop there (``Request.stops``) so that moment exists.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from app.cache.prefix import common_prefix_len
from app.engine.backend import Backend
from app.engine.request import Request
from app.engine.scheduling.sessions import SeqPool

log = logging.getLogger(__name__)

SHARE_MIN_TOKENS = 32


@dataclass(frozen=True, slots=True)
class LiveHead:
    """The longest head of a prompt that another live seq holds, or will hold."""

    n: int  # tokens of the prompt it shares
    seq_id: int  # the donor's seq
    donor: Request | None  # a running donor; None for an idle session's seq
    origin_session: str | None  # the donor's session, when it has one


class Shares:
    def __init__(self, backend: Backend, reqs: Mapping[int, Request], pool: SeqPool) -> None:
        self._backend = backend
        self._reqs = reqs
        self._pool = pool

    def best(
        self, req: Request, weights_epoch: int, *, skip_seq: int | None = None, limit: int | None = None
    ) -> LiveHead | None:
        """The live seq sharing the longest usable head with ``req``'s prompt (at most
        ``limit`` tokens): a running request (what it holds once its prompt and reply are in)
        or an idle session's seq, other than ``skip_seq``. Requests computed with other
        adapter weights are no donors; a state that cannot be cut gives only a head it holds
        (or will hold, between two prefill slices) whole."""
        prompt = req.prompt_tokens
        cap = len(prompt) if limit is None else limit
        whole_only = not self._backend.info.memory.cut_states
        best: LiveHead | None = None
        for other in self._reqs.values():
            if other is req or other.finishing or other.weights_epoch != weights_epoch:
                continue
            n = min(common_prefix_len(other.prompt_tokens + other.generated, prompt), cap)
            if other.is_background:  # never wait for the lowest priority: take what it holds
                n = min(n, len(other.context_tokens))
            if whole_only and not _can_stop(other, n):
                continue
            if n > (best.n if best else 0):
                best = LiveHead(n, other.seq_id, other, other.options.session_id)
        for sid, session in self._pool.sessions.items():
            if session.seq_id == skip_seq:
                continue
            n = min(common_prefix_len(session.tokens, prompt), cap)
            if whole_only and n != len(session.tokens):
                continue
            if n > (best.n if best else 0):
                best = LiveHead(n, session.seq_id, None, sid)
        return best

    def can_use(self, head: LiveHead, n: int) -> bool:
        """Worth taking ``n`` tokens of ``head``: any head already computed (a copy costs a
        few ms), but a request waits for a donor still prefilling only for a long head."""
        if n < 1:
            return False
        waiting = head.donor is not None and len(head.donor.context_tokens) < n
        return not waiting or n >= SHARE_MIN_TOKENS

    def use(self, req: Request, head: LiveHead, n: int) -> None:
        """Give ``req`` the first ``n`` tokens of ``head``: now, or once the donor holds them."""
        req.cache.reused("partial", n)
        if head.donor is None or len(head.donor.context_tokens) >= n:
            self._take(req, head.seq_id, n)
        else:
            req.share_from = (head.donor.ref, n)
            if not self._backend.info.memory.cut_states:
                head.donor.stop_at(n)  # a whole-state copy needs the donor to hold exactly n

    def on_progress(self, donor: Request) -> None:
        """The donor's KV grew: waiters whose head it now holds take it (a state that cannot
        be cut only at exactly the head; once the donor is past it, the waiter goes cold)."""
        whole_only = not self._backend.info.memory.cut_states
        for waiter in self._waiters(donor):
            assert waiter.share_from is not None
            n = waiter.share_from[1]
            held = len(donor.context_tokens)
            if held == n or (held > n and not whole_only):
                self._take_guarded(waiter, donor.seq_id, n)
            elif held > n:
                self._go_cold(waiter)

    def on_leaving(self, donor: Request) -> None:
        """The donor finishes or fails (its seq is still as it was): waiters take what it
        holds, or go back to prefilling their whole prompt."""
        whole_only = not self._backend.info.memory.cut_states
        for waiter in self._waiters(donor):
            assert waiter.share_from is not None
            n = waiter.share_from[1]
            held = len(donor.context_tokens)
            if donor.error is None and (held == n or (held > n and not whole_only)):
                self._take_guarded(waiter, donor.seq_id, n)
            else:
                self._go_cold(waiter)

    def _go_cold(self, waiter: Request) -> None:
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



def _can_stop(donor: Request, n: int) -> bool:
    """Does (or will) the donor hold exactly ``n`` tokens between two ticks? It does now,
    or its prompt's prefill still has to pass position ``n`` (its slices can stop there)."""
    held = len(donor.context_tokens)
    return held == n or (held < n <= len(donor.prompt_tokens) and donor.share_from is None)
