"""The scheduler's saves: pack a seq's KV and hand it to the cache writer (docs/design.md §4).

Five moments: ``cold`` (after the policy's trimmed prefix is prefilled, and the checkpoints
of a state that cannot be cut: ``app.engine.checkpoints``), ``continued`` (every
``continued_interval`` tokens, after the decode that pushed the last of them), ``finish``,
``evict`` (an idle session released, or ``Model.evict``) and ``shutdown``. The pack runs on
the scheduler thread between backend calls, when the seq holds exactly the saved tokens (the
cache-key invariant), by ``app.engine.seq_cache`` (a draft model's saves go the same way);
the file write runs on the writer thread.

A save is an optimisation, never a reason to fail a request: the pack only reads the KV, so
a failed save is logged with its traceback and the request goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from app.cache.keys import KeyMeta
from app.engine.backend import Backend
from app.engine.cache_hooks import CacheHooks, SaveReason
from app.engine.request import Request
from app.engine.scheduling.sessions import Session
from app.engine.seq_cache import save_seq

log = logging.getLogger(__name__)


class Saver:
    def __init__(self, backend: Backend, cache: CacheHooks) -> None:
        self._backend = backend
        self._cache = cache

    def save(self, req: Request, reason: SaveReason, n: int | None = None) -> bytes | None:
        """Save the request's whole context (its seq holds exactly ``context_tokens``), or
        its first ``n`` tokens (the packed seq cut to them)."""
        tokens = req.context_tokens if n is None else req.context_tokens[:n]
        key = self._save(req.meta, req.seq_id, tokens, reason, req.options.session_id, cut=n is not None)
        if key is not None:
            req.cache.num_created = max(req.cache.num_created, len(tokens) - req.cache.num_reused)
        return key

    def prefill_point(self, req: Request, reason: SaveReason) -> None:
        """The prefill reached one of the request's save points (``Request.stops``): the
        policy's cold split, or a checkpoint of a state that cannot be cut (saved as
        ``cold`` too: the seq holds a head of the prompt, read before the reply)."""
        self.save(req, reason)
        req.cache.last_save_at = len(req.context_tokens)

    def cold_after_first(self, req: Request) -> None:
        """The deferred cold save (``CacheAccount.cold_after_first``), once the first reply
        token is out and before it is decoded: the seq holds the whole prompt; its first
        ``n`` cells are saved."""
        n, req.cache.cold_after_first = req.cache.cold_after_first, 0
        if req.meta is None or not 0 < n <= len(req.context_tokens):
            return
        self.save(req, "cold", n)
        req.cache.last_save_at = max(req.cache.last_save_at, n)

    def continued(self, req: Request) -> None:
        """After a decode: a continued save when the policy's interval has passed."""
        if self.continued_due(req):
            self.save(req, "continued")
            req.cache.last_save_at = len(req.context_tokens)

    def continued_due(self, req: Request) -> bool:
        """Will the decode about to run be followed by a continued save? (Speculation pushes
        no drafts then, so the seq holds exactly the saved tokens.)"""
        return not req.finishing and self._cache.wants_continued(len(req.context_tokens), req.cache.last_save_at)

    def finish(self, req: Request) -> None:
        """Not for a background read (type-ahead): a draft is no turn; its session's seq keeps
        it, and an ``evict`` save keeps it when the seq is released."""
        if not req.is_background and self._cache.wants_finish(len(req.context_tokens)):
            req.cache.finish_key = self.save(req, "finish")

    def session(self, meta: KeyMeta | None, sid: str, session: Session) -> None:
        """An idle session is released: save what its seq holds (``evict``)."""
        self._save(meta, session.seq_id, session.tokens, "evict", sid)

    def in_flight(self, reqs: Iterable[Request], reason: SaveReason) -> int:
        """``evict`` / ``shutdown``: one save per in-flight request with a non-empty context."""
        num = 0
        for req in reqs:
            if req.context_tokens and self.save(req, reason) is not None:
                req.cache.last_save_at = len(req.context_tokens)
                num += 1
        return num

    def _save(
        self, meta: KeyMeta | None, seq_id: int, tokens: Sequence[int], reason: SaveReason, session_id: str | None,
        *, cut: bool = False,
    ) -> bytes | None:
        """Pack the seq and queue the save (``seq_cache.save_seq``)."""
        if meta is None or not tokens:
            return None
        try:
            return save_seq(self._backend, self._cache, meta, seq_id, tokens, reason, session_id, cut=cut)
        except Exception:
            log.exception("a %s save of seq %d (%d tokens) failed; generation goes on", reason, seq_id, len(tokens))
            return None
