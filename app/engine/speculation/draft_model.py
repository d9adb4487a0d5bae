"""A draft model for speculative decoding (docs/design.md §9): a smaller model with the target's
vocabulary proposes the drafts, token by token, greedily; the target verifies them exactly
as it verifies prompt-lookup drafts (``app.engine.speculation``), so the reply is the same
with or without it — the draft model only changes how many tokens a tick gets.

Where it lives: a backend of its own (its own llama context: the draft model's weights, and
a KV stream per sequence, seq ids the same as the target's), owned by the TARGET's scheduler
thread like the target's backend. ``DraftModel`` remembers which tokens each of its seqs
holds; before proposing it drops what differs from the target's committed tokens (the
drafts the target rejected, or another conversation on the same seq), so a seq kept by a
sticky session keeps its draft cells too.

Per tick, between ``stream`` and ``decode`` (the target's new token is known, its decode
has not run), for every seq that drafts with the model::

    catch up   ONE decode of the draft: each seq's tokens its KV does not hold yet, the last
               with logits (usually the token just sampled and the accepted drafts the draft
               did not push itself; a whole prompt goes in slices of ``CATCH_UP_TOKENS`` a
               tick, and that seq drafts once it is in)
    draft      the argmax is draft 1; then k - 1 decodes of one row per seq (each pushes its
               last draft and gives the next), the seqs drafting sharing every pass

So k drafts cost k passes of the draft model; ``Speculator`` prices them (``token_ms``).

**Its KV is cached with its own key** (``DraftCache``, when the model's cache is on): the
draft backend's identity (its weights, KV types and context parameters) and the tokens its
seq holds, in the same store as the model's rows (as model ``<draft id>:draft``, counting no
hits or misses of the model's). A seq's cells are saved when another conversation is about
to replace at least ``SAVE_MIN_TOKENS`` of them (``evict``) and when the draft model is
detached or the model unloaded (``shutdown``); a seq that would catch up by more than one
tick's slice first looks the cache up and restores the longest prefix held. So a
conversation coming back after another one took its seq, or after a restart, drafts from its
first tick instead of reading its context again 128 tokens a tick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from app.cache.keys import KeyMeta
from app.cache.prefix import common_prefix_len
from app.engine.backend import Backend, Op, PrefillOp
from app.engine.cache_hooks import CacheHooks, Hit, SaveReason
from app.engine.config import MAX_DRAFT
from app.engine.errors import InvalidRequest
from app.engine.seq_cache import load_hit, save_seq

log = logging.getLogger(__name__)

CATCH_UP_TOKENS = 128
"""The most tokens one tick pushes into the draft's KV to catch up with its seqs (a prompt
the draft has not read goes in slices, so a tick stays short)."""
CALIBRATION_PASSES = 4
"""One-row passes timed when the draft model is attached (its first price, ``calibrate``)."""
PRIOR_ACCEPTANCE = 0.7
"""A draft model's acceptance before any evidence (prompt lookup's is 0.5): a model picked
to draft is expected to agree more often than not, and the evidence takes over within a few
verifies (``speculation.SeqSpec``)."""
EMA = 0.2
"""Weight of the newest measurement of a draft pass's cost."""
SAVE_MIN_TOKENS = CATCH_UP_TOKENS
"""A seq's cells are saved before being replaced only when they are at least this many
tokens: fewer are read again within one tick's catch-up."""


@dataclass(frozen=True, slots=True)
class DraftCache:
    """Where the draft model's KV is cached: hooks that count nothing of the model's, and the
    draft backend's identity."""

    hooks: CacheHooks
    meta: KeyMeta


def check_compatible(target: Backend, draft: Backend) -> None:
    """``InvalidRequest`` unless ``draft`` can draft for ``target``: the same vocabulary (the
    same piece for every token id) and memory that drops a rejected tail exactly."""
    if draft.info.n_vocab != target.info.n_vocab:
        raise InvalidRequest(
            f"the draft model has {draft.info.n_vocab} tokens, the model {target.info.n_vocab}: "
            "a draft model needs the same vocabulary"
        )
    n = target.info.n_vocab
    for token in range(0, n, max(1, n // 65536)):  # every token of a real vocabulary
        if draft.token_piece(token) != target.token_piece(token):
            raise InvalidRequest(f"token {token} differs between the draft model and the model: not the same vocabulary")
    memory = draft.info.memory
    if not (memory.trim_tail and memory.cut_states):
        raise InvalidRequest(f"a draft model with {memory.kind} memory cannot drop rejected drafts")


class DraftModel:
    """The draft model attached to one target model. Its scheduler thread only."""

    def __init__(self, model_id: str, backend: Backend, cache: DraftCache | None = None) -> None:
        self.model_id = model_id
        self.backend = backend
        self.cache = cache
        self.num_saved = 0
        self.num_restored = 0
        """Tokens saved to and restored from the cache (its seqs' cells)."""
        self._missed: dict[int, tuple[int, ...]] = {}
        """seq id → the head of the tokens it was catching up to when the cache had nothing
        better: no lookup while it catches up to the same tokens (each tick would miss again)."""
        self._held: dict[int, list[int]] = {}
        """seq id → the tokens the draft's KV holds for it, in position order."""
        self.token_ms = 0.0
        """Measured cost of one draft token (one pass; shared when several seqs draft)."""
        self.num_passes = 0

    def calibrate(self, seq_id: int = 0) -> None:
        """Time a few one-row passes on ``seq_id`` (left empty after), so the first drafts
        are priced by a measurement. Before the draft model is attached (its caller's thread)."""
        times = []
        for pos in range(CALIBRATION_PASSES):
            started = time.perf_counter()
            self._push([PrefillOp(seq_id, (pos + 1,), pos, True)])
            self.backend.greedy(seq_id)
            times.append((time.perf_counter() - started) * 1000)
        self.backend.seq_rm(seq_id, 0)
        self.token_ms = sorted(times)[len(times) // 2]

    def propose(self, wants: Sequence[tuple[int, Sequence[int], int]]) -> dict[int, tuple[int, ...]]:
        """Drafts for each ``(seq_id, the seq's committed tokens, at most k)``: the draft
        model's greedy continuation, up to k tokens or its end-of-generation token. A seq
        still catching up gets none. On a failure the draft's KV is dropped (it catches up
        again) and the exception propagates."""
        started = time.perf_counter()
        try:
            out = self._propose(wants)
        except BaseException:
            self.reset()
            raise
        passes = max(1, max((len(d) for d in out.values()), default=0))
        ms = (time.perf_counter() - started) * 1000
        self.token_ms = (1 - EMA) * self.token_ms + EMA * ms / passes
        self.num_passes += passes
        return out

    def _propose(self, wants: Sequence[tuple[int, Sequence[int], int]]) -> dict[int, tuple[int, ...]]:
        ops: list[Op] = []
        ready: dict[int, int] = {}
        """seq id → drafts wanted, for the seqs whose catch-up ends with logits this tick."""
        budget = CATCH_UP_TOKENS
        for seq_id, tokens, k in wants:
            if k <= 0 or not tokens:
                continue
            held = self._held.setdefault(seq_id, [])
            common = min(common_prefix_len(held, tokens), len(tokens) - 1)  # the last again: its logits
            if len(held) - common > MAX_DRAFT:  # more than rejected drafts: another conversation
                self._missed.pop(seq_id, None)
            if len(held) - common >= SAVE_MIN_TOKENS:
                self._save(seq_id, "evict")  # another conversation takes the seq
            if common < len(held):
                self.backend.seq_rm(seq_id, common)
                del held[common:]
            if len(tokens) - common > CATCH_UP_TOKENS:
                common = self._restore(seq_id, tokens, common)
            todo = tuple(tokens[common:])
            take = todo[:budget]
            if not take:
                continue
            budget -= len(take)
            complete = len(take) == len(todo)
            ops.append(PrefillOp(seq_id, take, common, complete))
            held.extend(take)
            if complete:
                ready[seq_id] = k
        if not ops:
            return {}
        self._push(ops)
        drafts: dict[int, list[int]] = {seq_id: [] for seq_id in ready}
        while ready:
            pushes: list[Op] = []
            for seq_id, k in list(ready.items()):
                token = self.backend.greedy(seq_id)
                drafts[seq_id].append(token)
                if len(drafts[seq_id]) >= k or self.backend.is_eog(token):
                    del ready[seq_id]
                else:
                    pushes.append(PrefillOp(seq_id, (token,), len(self._held[seq_id]), True))
                    self._held[seq_id].append(token)
            if pushes:
                self._push(pushes)
        return {seq_id: tuple(d) for seq_id, d in drafts.items()}

    def _save(self, seq_id: int, reason: SaveReason) -> None:
        """Cache the cells of ``seq_id`` (exactly its held tokens). Never fails the tick."""
        held = self._held.get(seq_id)
        if self.cache is None or not held:
            return
        try:
            key = save_seq(self.backend, self.cache.hooks, self.cache.meta, seq_id, tuple(held), reason)
        except Exception:
            log.exception("draft model %s: could not save seq %d", self.model_id, seq_id)
            return
        if key is not None:
            self.num_saved += len(held)

    def _restore(self, seq_id: int, tokens: Sequence[int], common: int) -> int:
        """Restore the longest head of ``tokens`` the cache holds for this draft when it
        saves at least a tick's catch-up over the ``common`` tokens held; returns the tokens
        the seq then holds that need no pass (at most all but the last: its logits)."""
        missed = self._missed.get(seq_id)
        if self.cache is None or (missed is not None and tuple(tokens[: len(missed)]) == missed):
            return common
        try:
            got = self.cache.hooks.lookup(self.cache.meta, tokens, None, min_tokens=common + CATCH_UP_TOKENS)
        except Exception:
            log.exception("draft model %s: cache lookup failed", self.model_id)
            return common
        if not isinstance(got, Hit):
            self._missed[seq_id] = tuple(tokens[: common + CATCH_UP_TOKENS + 1])
            return common
        held = self._held[seq_id]
        self.backend.seq_rm(seq_id, 0)
        held.clear()
        keep = min(len(got.tokens), len(tokens) - 1)
        try:
            restored = load_hit(self.backend, seq_id, got, keep)
        except Exception:
            log.exception("draft model %s: could not restore seq %d", self.model_id, seq_id)
            self.backend.seq_rm(seq_id, 0)
            restored = False
        if not restored:
            return 0
        held.extend(got.tokens[:keep])
        self.num_restored += len(got.tokens)
        return keep

    def _push(self, ops: Sequence[Op]) -> None:
        self.backend.decode(ops, self.backend.sample(ops))

    def reset(self) -> None:
        """Forget every seq (after a failure, its KV cannot be trusted)."""
        for seq_id in list(self._held):
            try:
                self.backend.seq_rm(seq_id, 0)
            except Exception:
                log.exception("draft model %s: could not clear seq %d", self.model_id, seq_id)
        self._held.clear()
        self._missed.clear()

    def close(self, save: bool = True) -> None:
        """Save every seq worth saving (``shutdown``, when ``save``), then free the backend."""
        for seq_id, held in list(self._held.items()):
            if save and len(held) >= SAVE_MIN_TOKENS:
                self._save(seq_id, "shutdown")
        self._held.clear()
        self._missed.clear()
        self.backend.close()

