"""Where a new request's first tokens come from, and the record of why (docs/design.md §2).

A request starts from the longest prefix of its prompt that is already computed anywhere:

* its **own session's seq** — what the sticky conversation's seq holds, trimmed at the first
  token where the new prompt differs (regenerate, edit, branch: ``seq_rm`` from there);
* **another live seq** — a running request or an idle session whose tokens share a head with
  the prompt (copied, ``app.engine.scheduling.shares``);
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
from app.engine.scheduling.shares import Shares
from app.engine.seq_cache import load_hit

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OwnSeq:
    """The request's session seq and the tokens it holds."""

    seq_id: int
    tokens: Sequence[int]
    session_id: str | None
    """None: a free seq left holding a finished request's tokens (``SeqPool.leave``)."""


class Reuser:
    def __init__(self, backend: Backend, shares: Shares) -> None:
        self._backend = backend
        self._shares = shares

    def start(self, req: Request, cache: CacheHooks, weights_epoch: int, own: OwnSeq | None = None) -> None:
        """Set up ``req``'s seq and prefill cursor from the best candidate. Without ``own``
        the seq is empty; with it, the seq holds ``own.tokens``.

        What a candidate can give depends on the model's memory (``MemoryCaps``): a state
        that cannot be cut gives only what it holds whole — the own seq when the prompt
        extends all of it, a live seq holding exactly a head of the prompt, a saved row
        (a checkpoint) that is a prefix of the prompt minus its last token.
        """
        prompt = req.prompt_tokens
        limit = len(prompt) - 1  # the last prompt token is always prefilled
        shared_own = common_prefix_len(own.tokens, prompt) if own else 0
        n_own = min(shared_own, limit)
        if own is not None and not self._backend.can_trim(own.seq_id, n_own):
            n_own = 0  # its tail cannot be dropped: only a checkpoint or a cold read is exact
        head = self._shares.best(req, weights_epoch, skip_seq=own.seq_id if own else None, limit=limit)
        n_live = head.n if head else 0
        live_ok = head is not None and self._shares.can_use(head, n_live)
        floor = max(n_own, n_live if live_ok else 0)
        found = _lookup(cache, req, floor, whole_only=self._backend.info.memory.needs_checkpoints)
        shared = max(
            shared_own,
            n_live,
            len(found.tokens) if isinstance(found, Hit) else (found.tokens_shared if found else 0),
        )
        if isinstance(found, Hit):
            if self._restore(cache, req, found, shared):
                return
            n_own = 0  # a restore that failed has emptied the seq
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
        _cold(cache, req, Reuse("none", 0, shared, self._miss_reason(found, shared), None),
              defer=self._backend.info.memory.cut_states)

    def _miss_reason(self, found: Hit | Miss | None, shared: int) -> MissReason:
        """Why nothing was reused, when ``shared`` prompt tokens were computed before."""
        reason: MissReason = found.reason if isinstance(found, Miss) else "nothing_shared"
        if shared >= MIN_RESTORE_TOKENS and reason in ("nothing_shared", "too_short"):
            # NOTE: a whole state shares a head with the prompt but ends past where it
            # diverges (an edited message, a regenerate with no save at the prompt's end).
            return "no_checkpoint" if self._backend.info.memory.needs_checkpoints else "too_short"
        if shared >= 1 and reason == "nothing_shared":
            return "too_short"
        return reason

    # ------------------------------------------------------------------ the candidates

    def _restore(self, cache: CacheHooks, req: Request, hit: Hit, shared: int) -> bool:
        """Load the hit into the seq; the cells past the prompt's last token are prefilled."""
        prompt = req.prompt_tokens
        n = len(hit.tokens)
        keep = min(n, len(prompt) - 1)
        t0 = time.perf_counter_ns()
        ok = load_hit(self._backend, req.seq_id, hit, keep)  # re-prefill from the last prompt token on
        cache.count_load(time.perf_counter_ns() - t0)
        if not ok:
            log.warning("cached KV for a %d-token prefix did not load; going on without it", n)
            return False
        req.context_tokens = list(prompt[:keep])
        req.prefill_cursor = list(prompt[keep:])
        req.cache.reused(hit.kind, n)
        req.cache.reuse = Reuse("cache", keep, shared, None, hit.origin_session)
        cache.count_hit(hit.source)  # only now: a row that did not load is no hit
        return True

    def _trim_own(self, cache: CacheHooks, req: Request, own: OwnSeq, n: int, shared: int) -> None:
        """Keep the session seq's first ``n`` cells; prefill the rest of the prompt."""
        self._backend.seq_rm(req.seq_id, n)
        req.context_tokens = list(req.prompt_tokens[:n])
        req.prefill_cursor = list(req.prompt_tokens[n:])
        if own.session_id is None:  # a free seq's leftover: another request's cells, kept
            req.cache.reused("partial", n)
            req.cache.reuse = Reuse("live", n, shared, None, None)
            cache.count_live()
            return
        req.cache.reused("sticky", n)
        req.cache.reuse = Reuse("session", n, shared, None, own.session_id)
        cache.count_sticky()


def _lookup(cache: CacheHooks, req: Request, floor: int, *, whole_only: bool = False) -> Hit | Miss | None:
    """The cache's best, when it can beat ``floor`` reused tokens (None: cache off). With
    ``whole_only`` (states that cannot be cut) the prompt minus its last token is looked up,
    so a hit is a row the prompt extends by at least that token (a checkpoint)."""
    if req.meta is None:
        return None
    need = max(MIN_RESTORE_TOKENS, floor + 1)
    key_tokens = req.prompt_tokens[:-1] if whole_only else req.prompt_tokens
    if need > len(req.prompt_tokens) - 1:
        # A seq already offers every token a restore could give (at most the prompt less its
        # last token is reused): a regenerate whose seq still holds its prompt reads nothing
        # (it read and unpacked the whole row to keep the same cells, in a profile of B8's turns).
        return None
    return cache.lookup(req.meta, key_tokens, req.options.parent_key, req.options.session_id, min_tokens=need)


def _cold(cache: CacheHooks, req: Request, reuse: Reuse, *, defer: bool = False) -> None:
    """A cold prefill. The policy's cold save of the prompt's head is made once the first
    reply token is out (``defer``, a state that can be cut: the whole prompt's cells cut to
    the head), so its pack is not in the time to first token and the prefill is not split
    at the head (B8's first turn); a state that cannot be cut stops there."""
    cache.count_miss()
    req.cache.reuse = reuse
    prompt = req.prompt_tokens
    split = cache.cold_split(len(prompt)) if req.mode is not Mode.PREFILL_ONLY else 0
    req.prefill_cursor = list(prompt)
    if split and defer:
        req.cache.cold_after_first = split
    elif split:
        req.stop_at(split, "cold")
