"""Where a new request's first tokens come from, and the record of why (issue 13).

A request starts from the longest prefix of its prompt that is already computed anywhere:

* its **own session's seq** — what the sticky conversation's seq holds, trimmed at the first
  token where the new prompt differs (regenerate, edit, branch: ``seq_rm`` from there);
* **another live seq** — a running request or an idle session whose tokens share a head with
  the prompt (copied, ``app.engine.shares``);
* the **cache** — any saved row sharing a head with the prompt, longer rows and rows that
  diverge from it included, restored and cut to the shared cells (``CacheHooks.lookup``);
* nothing: a cold prefill (with the policy's cold-save split).

The candidate that reuses the most wins; ties go to the one that costs least (the own seq,
then a live seq, then the cache), and the cache is only read when it would do better than
the seqs (``lookup``'s ``min_tokens``). The last prompt token is always prefilled again, for
fresh logits, so at most ``len(prompt) - 1`` tokens are reused.

Every request leaves a ``Reuse`` record in its ``Stats``: where its reused tokens came from,
how many, how many it shared with the best candidate, and on a miss why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from app.cache.prefix import common_prefix_len
from app.engine.backend import Backend
from app.engine.cache_hooks import MIN_RESTORE_TOKENS, CacheHooks, Hit, Miss
from app.engine.events import MissReason, Reuse
from app.engine.request import Mode, Request
from app.engine.shares import Shares

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OwnSeq:
    """The request's session seq and the tokens it holds."""

    seq_id: int
    tokens: Sequence[int]
    session_id: str


class Reuser:
    def __init__(self, backend: Backend, shares: Shares) -> None:
        self._backend = backend
        self._shares = shares

    def start(self, req: Request, cache: CacheHooks, weights_epoch: int, own: OwnSeq | None = None) -> None:
        """Set up ``req``'s seq and prefill cursor from the best candidate. Without ``own``
        the seq is empty; with it, the seq holds ``own.tokens``."""
        prompt = req.prompt_tokens
        limit = len(prompt) - 1  # the last prompt token is always prefilled
        n_own = min(common_prefix_len(own.tokens, prompt), limit) if own else 0
        head = self._shares.best(req, weights_epoch, skip_seq=own.seq_id if own else None)
        n_live = min(head.n, limit) if head else 0
        live_ok = head is not None and self._shares.can_use(head, n_live)
        floor = max(n_own, n_live if live_ok else 0)
        found = _lookup(cache, req, floor)
        shared = max(
            common_prefix_len(own.tokens, prompt) if own else 0,
            head.n if head else 0,
            len(found.tokens) if isinstance(found, Hit) else (found.tokens_shared if found else 0),
        )
        if isinstance(found, Hit) and self._restore(cache, req, found, shared):
            return
        if own is not None and n_own >= 1 and n_own >= (n_live if live_ok else 0):
            self._trim_own(cache, req, own, n_own, shared)
            return
        if own is not None:
            self._backend.seq_rm(req.seq_id, 0)  # the session's old conversation goes
        if head is not None and live_ok:
            self._shares.use(req, head, n_live)
            req.cache.reuse = Reuse("live", n_live, shared, None, head.origin_session)
            cache.count_live()  # one hit accounting: every reuse is a hit (app.conversation)
            return
        reason: MissReason = "nothing_shared"
        if isinstance(found, Miss):
            reason = found.reason
        if shared >= 1 and reason == "nothing_shared":
            reason = "too_short"
        _cold(cache, req, Reuse("none", 0, shared, reason, None))

    # ------------------------------------------------------------------ the candidates

    def _restore(self, cache: CacheHooks, req: Request, hit: Hit, shared: int) -> bool:
        """Load the hit into the seq; the cells past the prompt's last token are prefilled."""
        t0 = time.perf_counter_ns()
        ok = self._backend.kv_unpack(req.seq_id, hit.payload)
        cache.count_load(time.perf_counter_ns() - t0)
        if not ok:
            log.warning("cached KV for a %d-token prefix did not load; going on without it", len(hit.tokens))
            self._backend.seq_rm(req.seq_id, 0)
            return False
        prompt = req.prompt_tokens
        n = len(hit.tokens)
        keep = min(n, len(prompt) - 1)
        self._backend.seq_rm(req.seq_id, keep)  # re-prefill from the last prompt token on
        req.context_tokens = list(prompt[:keep])
        req.prefill_cursor = list(prompt[keep:])
        req.cache.reused(hit.kind, n)
        req.cache.reuse = Reuse("cache", keep, shared, None, hit.origin_session)
        return True

    def _trim_own(self, cache: CacheHooks, req: Request, own: OwnSeq, n: int, shared: int) -> None:
        """Keep the session seq's first ``n`` cells; prefill the rest of the prompt."""
        self._backend.seq_rm(req.seq_id, n)
        req.context_tokens = list(req.prompt_tokens[:n])
        req.prefill_cursor = list(req.prompt_tokens[n:])
        req.cache.reused("sticky", n)
        req.cache.reuse = Reuse("session", n, shared, None, own.session_id)
        cache.count_sticky()


def _lookup(cache: CacheHooks, req: Request, floor: int) -> Hit | Miss | None:
    """The cache's best, when it can beat ``floor`` reused tokens (None: cache off)."""
    if req.meta is None:
        return None
    need = max(MIN_RESTORE_TOKENS, floor + 1)
    if need > len(req.prompt_tokens):
        return None  # a seq already offers every token a restore could give
    return cache.lookup(
        req.meta, req.prompt_tokens, req.options.parent_key, req.options.session_id, min_tokens=need
    )


def _cold(cache: CacheHooks, req: Request, reuse: Reuse) -> None:
    cache.count_miss()
    req.cache.reuse = reuse
    prompt = req.prompt_tokens
    split = cache.cold_split(len(prompt)) if req.mode is not Mode.PREFILL_ONLY else 0
    if split:
        req.prefill_cursor = list(prompt[:split])
        req.cold_save_remaining = list(prompt[split:])
    else:
        req.prefill_cursor = list(prompt)
