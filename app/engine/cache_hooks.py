"""The scheduler's view of the KV cache: look up on admission, save at the five moments.

``NullCache`` always misses and never saves (cache off); ``QuietCache`` counts nothing
(type-ahead's background reads, ``app.engine.scheduling.read_ahead``). ``StoreCache`` adapts an
``app.cache.store.CacheStore`` for one model: it owns the hit counters and the policy
gates, while the scheduler owns the KV (it packs and unpacks, between ticks).

A lookup answers ``Hit`` or ``Miss``. A hit is the longest prefix the prompt shares with
anything the cache holds — a row the prompt extends, a longer row, a row that diverges
from it (regenerate, edit, branch), or a save still being written — with its payload
already cut to exactly those cells. The scheduler decides what to re-prefill (always at
least the last prompt token, for fresh logits). A miss says why nothing could be reused.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal, Protocol

from app import latency
from app.cache.blobs.state_buffers import StateMemory
from app.cache.contents.preview import Detokenizer, tail_preview
from app.cache.keys import KeyMeta
from app.cache.lookup import NotFound
from app.cache.policy import CachePolicy, cold_save_split, should_continued_save, should_finish_save
from app.engine.events import MissReason

if TYPE_CHECKING:
    from app.cache.store import CacheStore

log = logging.getLogger(__name__)

SaveReason = Literal["cold", "continued", "finish", "evict", "shutdown"]

# NOTE: a restore of n cells gives n - 1 reused tokens (the last prompt token is prefilled
# again for fresh logits), so fewer than 2 shared tokens reuse nothing.
MIN_RESTORE_TOKENS = 2


@dataclass(frozen=True, slots=True)
class Hit:
    """What to restore: ``payload`` is a one-stream per-seq state holding exactly the cells
    of ``tokens``, the prompt's first ``len(tokens)`` tokens."""

    kind: Literal["exact", "partial"]  # exact: the whole prompt; partial: a head of it
    source: Literal["exact", "resume", "longest_prefix"]
    tokens: tuple[int, ...]
    payload: bytes | memoryview
    row_tokens: int = 0  # length of the row it was cut from (longer when cut)
    origin_session: str | None = None  # the session whose save it was, when known
    release: Callable[[], None] = lambda: None
    """Call once ``payload`` is loaded (or given up): its memory serves the next restore, and
    ``payload`` must not be read after (``app.cache.blobs.state_buffers``)."""


@dataclass(frozen=True, slots=True)
class Miss:
    """Nothing to restore, and why: ``tokens_shared`` is the longest prefix the prompt shares
    with anything held or remembered (another identity's rows, evicted rows)."""

    reason: MissReason
    tokens_shared: int = 0


class CacheHooks(Protocol):
    policy: CachePolicy
    memory: StateMemory
    """What saves pack into (``StateMemory.lend``): the store's, which its restores read
    and assemble into too."""

    def lookup(
        self, meta: KeyMeta, prompt: Sequence[int], parent_key: bytes | None, session_id: str | None = None,
        *, min_tokens: int = MIN_RESTORE_TOKENS,
    ) -> Hit | Miss:
        """``min_tokens``: a hit shares at least this many tokens (admission passes what a
        live seq already offers, plus one, so the cache is read only when it does better).
        Nothing is counted: a hit counts once its row is in the seq (``count_hit``)."""
        ...

    def count_hit(self, source: str) -> None:
        """A request started from a cache row (``Hit.source``) that loaded."""
        ...

    def count_miss(self) -> None: ...

    def count_sticky(self) -> None: ...

    def count_live(self) -> None:
        """A request started from another live seq's cells (a hit, like the cache's)."""
        ...

    def count_prompt(self, num_prompt: int, num_reused: int) -> None:
        """A request that was counted as a hit or a miss ended: its prompt tokens, and how
        many of them were reused (the token-weighted hit rate)."""
        ...

    def count_load(self, ns: int) -> None: ...

    def save(
        self,
        meta: KeyMeta,
        tokens: Sequence[int],
        payload: bytes | memoryview,
        reason: SaveReason,
        pack_ns: int,
        session_id: str | None = None,
    ) -> bytes | None:
        """Queue a save; returns the key when queued or already present, None when dropped.
        It is found by lookups at once (read-your-writes)."""
        ...

    def cold_split(self, num_tokens: int) -> int: ...

    def wants_continued(self, live: int, last_saved: int) -> bool: ...

    def wants_finish(self, live: int) -> bool: ...

    def hold_writes(self, on: bool) -> None:
        """A request of this model waits for its first token (``on``), or none does: the
        cache writes queued saves once none does (``CacheStore.hold_writes``)."""
        ...

    def hold_writes_arriving(self, on: bool) -> None:
        """A request is on its way to this model (``on``, see ``Arrivals``), or none is:
        held like ``hold_writes``, by a holder of its own."""
        ...


class CountsNothing:
    """The request counters of ``CacheHooks``, counting nothing (``NullCache``, ``QuietCache``)."""

    def count_hit(self, source: str) -> None:
        pass

    def count_miss(self) -> None:
        pass

    def count_sticky(self) -> None:
        pass

    def count_live(self) -> None:
        pass

    def count_prompt(self, num_prompt: int, num_reused: int) -> None:
        pass


class NullCache(CountsNothing):
    """Cache off: every lookup misses, nothing is saved."""

    def __init__(self, policy: CachePolicy | None = None) -> None:
        self.policy = policy or CachePolicy()
        self.memory = StateMemory()

    def lookup(
        self, meta: KeyMeta, prompt: Sequence[int], parent_key: bytes | None, session_id: str | None = None,
        *, min_tokens: int = MIN_RESTORE_TOKENS,
    ) -> Hit | Miss:
        return Miss("nothing_shared", 0)

    def count_load(self, ns: int) -> None:
        pass

    def save(
        self,
        meta: KeyMeta,
        tokens: Sequence[int],
        payload: bytes | memoryview,
        reason: SaveReason,
        pack_ns: int,
        session_id: str | None = None,
    ) -> bytes | None:
        return None

    def cold_split(self, num_tokens: int) -> int:
        return 0

    def wants_continued(self, live: int, last_saved: int) -> bool:
        return False

    def wants_finish(self, live: int) -> bool:
        return False

    def hold_writes(self, on: bool) -> None:
        pass

    def hold_writes_arriving(self, on: bool) -> None:
        pass


class QuietCache(CountsNothing):
    """A request's view of the cache that counts nothing: a background read is no request
    (the real one that follows counts once). Lookups, loads and saves go through."""

    def __init__(self, inner: CacheHooks) -> None:
        self._inner = inner
        self.policy = inner.policy
        self.memory = inner.memory

    def lookup(
        self, meta: KeyMeta, prompt: Sequence[int], parent_key: bytes | None, session_id: str | None = None,
        *, min_tokens: int = MIN_RESTORE_TOKENS,
    ) -> Hit | Miss:
        return self._inner.lookup(meta, prompt, parent_key, session_id, min_tokens=min_tokens)

    def count_load(self, ns: int) -> None:
        self._inner.count_load(ns)

    def save(
        self, meta: KeyMeta, tokens: Sequence[int], payload: bytes | memoryview, reason: SaveReason, pack_ns: int,
        session_id: str | None = None,
    ) -> bytes | None:
        return self._inner.save(meta, tokens, payload, reason, pack_ns, session_id)

    def cold_split(self, num_tokens: int) -> int:
        return self._inner.cold_split(num_tokens)

    def wants_continued(self, live: int, last_saved: int) -> bool:
        return self._inner.wants_continued(live, last_saved)

    def wants_finish(self, live: int) -> bool:
        return self._inner.wants_finish(live)

    def hold_writes(self, on: bool) -> None:
        self._inner.hold_writes(on)

    def hold_writes_arriving(self, on: bool) -> None:
        self._inner.hold_writes_arriving(on)


class StoreCache:
    """One model's hooks into the shared CacheStore."""

    def __init__(
        self,
        store: CacheStore,
        *,
        model_id: str,
        policy: CachePolicy,
        tier: str,
        context_size: int,
        quant_bits: int,
        detokenize: Detokenizer | None = None,
        kv_streams: int = 1,
    ) -> None:
        """``detokenize``: the model's, for each row's preview text. NOTE: called on the
        scheduler thread at save time (~50 tokens), never later: the writer thread may
        outlive the model and its vocabulary. ``kv_streams``: the model context's KV streams
        (``BackendInfo.kv_streams``): hits are assembled in that layout."""
        self.store = store
        self.memory = store.memory
        self.kv_streams = kv_streams
        self._arrivals_holder = object()
        """The store's holder for this model's requests on their way (``Arrivals``)."""
        self._detokenize = detokenize
        self.model_id = model_id
        self.policy = policy
        self.tier = next((t for t in (tier, "ram_file", "ram") if store.writable(t)), "ram")
        if self.tier != tier:
            log.warning(
                "the KV cache cannot write to its %s tier (read-only or missing directory); "
                "model %s saves to %s for this session", tier, model_id, self.tier,
            )  # fmt: skip
        self.context_size = context_size
        self.quant_bits = quant_bits

    def lookup(
        self, meta: KeyMeta, prompt: Sequence[int], parent_key: bytes | None, session_id: str | None = None,
        *, min_tokens: int = MIN_RESTORE_TOKENS,
    ) -> Hit | Miss:
        """The longest prefix of ``prompt`` held anywhere (exact row, the ``parent_key`` row,
        or any row sharing a head with it), cut to the shared cells; else why not.

        ``session_id`` is the asking request's; it does not steer the choice (equal prefixes
        are equal KV, whichever row holds them); ``Hit.origin_session`` names the row's."""
        got = self.store.find(
            meta, prompt, parent_key=parent_key, min_tokens=max(min_tokens, MIN_RESTORE_TOKENS),
            n_stream=self.kv_streams,
        )
        if isinstance(got, NotFound):
            return Miss(got.reason, got.tokens_shared)
        kind: Literal["exact", "partial"] = "exact" if got.n == len(prompt) else "partial"
        return Hit(
            kind, got.source, tuple(prompt[: got.n]), got.payload, got.row.n_tokens,
            got.row.session_id or None, partial(got.release, got.payload),
        )  # fmt: skip

    def count_hit(self, source: str) -> None:
        self.store.count(f"hits_{source}")

    def count_miss(self) -> None:
        self.store.count("misses")

    def count_sticky(self) -> None:
        self.store.count("hits_sticky")

    def count_live(self) -> None:
        self.store.count("hits_live")

    def count_prompt(self, num_prompt: int, num_reused: int) -> None:
        self.store.count("prompt_tokens", num_prompt)
        self.store.count("prompt_tokens_reused", num_reused)

    def count_load(self, ns: int) -> None:
        self.store.count("load_total_ns", ns)

    def save(
        self,
        meta: KeyMeta,
        tokens: Sequence[int],
        payload: bytes | memoryview,
        reason: SaveReason,
        pack_ns: int,
        session_id: str | None = None,
    ) -> bytes | None:
        self.store.count("pack_total_ns", pack_ns)
        preview = ""
        if self._detokenize is not None:
            try:
                preview = tail_preview(self._detokenize, tokens)
            except Exception:  # a preview is never worth a lost save; but say so
                log.exception("could not detokenize a cache row's preview")
        return self.store.submit_save(
            prompt_text=preview,
            model_id=self.model_id,
            meta=meta,
            tokens=tokens,
            payload=payload,
            reason=reason,
            tier=self.tier,
            context_size=self.context_size,
            quant_bits=self.quant_bits,
            session_id=session_id,
        )

    def cold_split(self, num_tokens: int) -> int:
        return cold_save_split(num_tokens, self.policy)

    def wants_continued(self, live: int, last_saved: int) -> bool:
        return should_continued_save(live, last_saved, self.policy)

    def wants_finish(self, live: int) -> bool:
        return should_finish_save(live, self.policy)

    def hold_writes(self, on: bool) -> None:
        self.store.hold_writes(self, on)

    def hold_writes_arriving(self, on: bool) -> None:
        self.store.hold_writes(self._arrivals_holder, on)


class Arrival:
    """One request on its way (``Arrivals.arriving``); settled once the scheduler admitted it."""

    __slots__ = ("owner", "settled")

    def __init__(self, owner: Arrivals) -> None:
        self.owner = owner
        self.settled = False


_CURRENT: contextvars.ContextVar[Arrival | None] = contextvars.ContextVar("hearth_arrival", default=None)
"""The arrival the running code prepares (a server's route: ``asyncio.to_thread`` carries it
into ``Model.infer``'s thread, so the admission settles the same arrival)."""


class Arrivals:
    """Requests on their way to one model: being prepared by a server (its chat template
    rendered, its text tokenized) or waiting for the scheduler thread to admit them. While
    any is, the cache holds queued writes back (``CacheHooks.hold_writes_arriving``) as it
    does while an admitted request waits for its first token, so no write starts in between
    and takes a core from the prefill about to start; and a burst woken from idle waits for
    the ones not yet admitted (``num_unsettled``, ``app.engine.scheduling.loop``). Safe from any thread.

    NOTE: B9 (two agents, 2 cores), turn 7: the first client's first token released the
    writer; the other client's request, sent 1 ms later, was rendered and queued for
    admission behind a decode tick while two held saves were written (91 and 85 ms), and
    that tick took 215 ms (other decode ticks of that run: 20-100 ms; load average 4.5).
    """

    def __init__(self, cache: CacheHooks) -> None:
        self._cache = cache
        self._lock = threading.Lock()
        self._num = 0
        self._unsettled = 0

    @property
    def num(self) -> int:
        """Requests on their way, admitted or not, whose preparer has not finished."""
        return self._num

    @property
    def num_unsettled(self) -> int:
        """Requests on their way that the scheduler has not admitted yet."""
        return self._unsettled

    @contextlib.contextmanager
    def arriving(self) -> Iterator[Arrival]:
        """Hold the cache's writes while the block runs. Inside another ``arriving`` of the
        same model (a server route around ``infer``) it is that same arrival."""
        outer = _CURRENT.get()
        if outer is not None and outer.owner is self:
            yield outer
            return
        arrival = Arrival(self)
        token = _CURRENT.set(arrival)
        self._step(1, unsettled=1)
        try:
            yield arrival
        finally:
            _CURRENT.reset(token)
            with self._lock:
                unsettled = 0 if arrival.settled else -1
                arrival.settled = True
            self._step(-1, unsettled=unsettled)

    def settle(self, arrival: Arrival) -> None:
        """The scheduler admitted (or refused) the arrival's request: no burst waits for it."""
        with self._lock:
            if not arrival.settled:
                arrival.settled = True
                self._unsettled -= 1

    def _step(self, delta: int, *, unsettled: int) -> None:
        with self._lock:  # held while telling the cache, so on and off reach it in order
            self._num += delta
            self._unsettled += unsettled
            if self._num == (1 if delta > 0 else 0):
                try:
                    if not latency.off("arrival_hold"):
                        self._cache.hold_writes_arriving(delta > 0)
                except Exception:  # never worth a request
                    log.exception("telling the cache writer about an arriving request failed")
