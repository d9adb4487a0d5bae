"""The seq pool of one context: free seqs, and the seqs idle sessions pin.

Every seq id ``0 .. n_seq_max-1`` is at any time in exactly one place: running a request
(the scheduler's request table), pinned by an idle sticky session (``sessions``, least
recently used first), or ``free`` (see ``take`` for which a request gets). A finished request's seq
is cleared as it is given back: each seq has a KV stream of its own (``kv_unified = false``),
so freeing its cells can never reorder another seq's cells. ``clear_for_use`` empties a seq before a new request fills it.

Beyond the seed: a request without a session leaves its cells in its free seq
(``leave``, ``leftovers``), the way llama-server's slots keep their last prompt. The next
request whose prompt's head they share takes that seq (``take``) and starts from them (a
follow-up of a client that re-sends the whole conversation and no session id), instead of
restoring the same tokens from the cache; a request that takes a seq whose cells it does not
share clears them, as any free seq is.

A native call that fails while a seq is given back leaves the seq's cells unknown; the seq
is then kept as ``stale`` (``quarantine``), so its next user — or the idle loop — clears it
first. No path loses a seq.
"""

from __future__ import annotations

import bisect
import logging
from collections import OrderedDict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from app.cache.prefix import common_prefix_len
from app.engine.backend import Backend

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Session:
    """A sticky session's pinned seq and the tokens its KV cells hold."""

    seq_id: int
    tokens: list[int]
    read_ahead_from: int | None = None
    """Tokens from this index on were read ahead (type-ahead); None: none were."""


class SeqPool:
    """Free / pinned seqs of one context (the running ones are the scheduler's)."""

    def __init__(self, backend: Backend, n_seq_max: int) -> None:
        self._backend = backend
        self.n_seq_max = n_seq_max
        self.free: list[int] = list(range(n_seq_max))  # kept sorted
        self.stale: set[int] = set()
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.leftovers: dict[int, tuple[tuple[int, ...], int]] = {}
        """Free seq → the tokens its cells still hold and the weights epoch they were computed under."""

    # ------------------------------------------------------------------ free seqs

    def take(self, prompt: Sequence[int] = (), weights_epoch: int | None = None, min_share: int = 1) -> int | None:
        """A free seq for a new request, or None. Clear it with ``clear_for_use``.

        Of the free seqs that keep the running seqs' ids consecutive, the one whose leftover
        cells (``leave``, computed under ``weights_epoch``) share the longest head with
        ``prompt``, at least ``min_share`` tokens — a client that re-sends its conversation
        without a session id finds its own last turn, as llama-server picks a slot by prompt
        similarity; else the lowest of them holding no leftover, or the one whose leftover is
        the oldest (another client's follow-up may still come for the others); the same
        among all free seqs when none keeps the running ids consecutive. Without
        ``weights_epoch`` (leftovers unused: the cache is off), the lowest of them.

        NOTE: with one KV stream per seq, llama.cpp puts only consecutive, increasing seq ids
        into one ubatch (``llama_batch_allocr::split_equal``, sequential: each next id is the
        last + 1); running seqs with consecutive ids (and rows in seq order,
        ``batch.build_ops``) keep a decode tick to one ubatch. Taking the seq that waited
        longest instead scrambled the ids after the first round of requests and split an
        8-stream decode into several ubatches: B1 at N = 8 fell to 0.79 × the raw loop.
        Taking always the lowest free seq, a sequential client's every request took seq 0,
        and B8's chat switches restored from the cache the turns other free seqs still held.
        """
        if not self.free:
            return None
        pinned = {session.seq_id for session in self.sessions.values()}
        running = set(range(self.n_seq_max)).difference(self.free, pinned)
        fits = [seq for seq in self.free if _consecutive(running, seq)] or self.free
        if weights_epoch is None:  # leftovers unused (the cache is off): the lowest
            self.free.remove(fits[0])
            return fits[0]
        empty = [seq for seq in fits if seq not in self.leftovers]
        oldest = next((seq for seq in self.leftovers if seq in fits), fits[0])
        best, best_n = (empty[0] if empty else oldest), max(0, min_share - 1)
        if prompt:
            for seq in fits:
                left = self.leftovers.get(seq)
                if left is None or left[1] != weights_epoch or seq in self.stale:
                    continue
                n = common_prefix_len(left[0], prompt)
                if n > best_n:
                    best, best_n = seq, n
        self.free.remove(best)
        return best

    def peek(self) -> int | None:
        return self.free[0] if self.free else None

    def clear_for_use(self, seq_id: int) -> None:
        """Empty a seq before a new request fills it (it may be stale)."""
        self.leftovers.pop(seq_id, None)
        self._backend.seq_rm(seq_id, 0)
        self.stale.discard(seq_id)

    def leave(self, seq_id: int, tokens: list[int], weights_epoch: int) -> None:
        """A finished request without a session: its seq goes free holding ``tokens``
        (``leftovers`` keeps them oldest first)."""
        self.leftovers.pop(seq_id, None)
        self.leftovers[seq_id] = (tuple(tokens), weights_epoch)
        self.put_free(seq_id)

    def take_leftover(self, seq_id: int, weights_epoch: int) -> tuple[int, ...] | None:
        """The tokens a just-taken seq still holds, when computed under ``weights_epoch``
        (the record is consumed; the caller starts from the cells or clears them)."""
        left = self.leftovers.pop(seq_id, None)
        if left is None or left[1] != weights_epoch or seq_id in self.stale or not left[0]:
            return None
        return left[0]

    def give_back(self, seq_id: int) -> None:
        """A finished request's seq returns to the free list, cleared. If clearing it raises,
        the seq is quarantined and the error raised."""
        try:
            self._backend.seq_rm(seq_id, 0)
        except BaseException:
            self.quarantine(seq_id)
            raise
        self.put_free(seq_id)

    def put_free(self, seq_id: int) -> None:
        """A seq back on the free list, which stays sorted (``take`` hands out the lowest)."""
        bisect.insort(self.free, seq_id)

    def quarantine(self, seq_id: int) -> None:
        """Return a seq whose cells are unknown (a native call failed): cleared before reuse."""
        self.leftovers.pop(seq_id, None)
        self.stale.add(seq_id)
        self.put_free(seq_id)

    def clear_stale(self) -> None:
        """Idle: clear the seqs whose cells are unknown (a native call failed on them).

        A seq that cannot be cleared now stays free: ``clear_for_use`` clears it before its
        next request, and that request fails if it cannot.
        """
        stale, self.stale = self.stale, set()
        for seq_id in sorted(stale):
            self.leftovers.pop(seq_id, None)
            try:
                self._backend.seq_rm(seq_id, 0)
            except Exception:
                log.exception("clearing stale seq %d failed", seq_id)

    # ------------------------------------------------------------------ sessions

    def pin(self, sid: str, seq_id: int, tokens: list[int], read_ahead_from: int | None = None) -> None:
        """An idle session keeps its seq (most recently used last)."""
        self.sessions[sid] = Session(seq_id, list(tokens), read_ahead_from)
        self.sessions.move_to_end(sid)

    def session(self, sid: str | None) -> Session | None:
        return None if sid is None else self.sessions.get(sid)

    def unpin(self, sid: str) -> Session | None:
        """A new request of the session takes its seq over (or nobody had it)."""
        return self.sessions.pop(sid, None)

    def drop(self, sid: str) -> None:
        """Free a session's seq and its cells."""
        session = self.sessions.pop(sid)
        try:
            self._backend.seq_rm(session.seq_id, 0)
        except Exception:
            log.exception("clearing session %r's seq %d failed", sid, session.seq_id)
            self.quarantine(session.seq_id)
            return
        self.put_free(session.seq_id)

    def lru_idle(self, busy: Collection[int]) -> str | None:
        """The least recently used session whose seq is not running a request."""
        return next((sid for sid, s in self.sessions.items() if s.seq_id not in busy), None)

    def idle_sessions(self, busy: Collection[int]) -> list[str]:
        return [sid for sid, s in self.sessions.items() if s.seq_id not in busy]

    # ------------------------------------------------------------------ invariant

    def check(self, running: Iterable[int]) -> None:
        """Every seq id is exactly once running, pinned or free (tests; a leak breaks it)."""
        pinned = [s.seq_id for s in self.sessions.values()]
        seen = sorted([*running, *pinned, *self.free])
        assert seen == list(range(self.n_seq_max)), f"seq pool out of step: {seen}"
        assert self.stale <= set(self.free), f"stale seqs {self.stale} not free"
        assert set(self.leftovers) <= set(self.free), f"leftover seqs {set(self.leftovers)} not free"


def _consecutive(running: set[int], seq: int) -> bool:
    """``running`` and ``seq`` together are consecutive ids."""
    ids = running | {seq}
    return max(ids) - min(ids) + 1 == len(ids)
