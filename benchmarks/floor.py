"""The floor under a trace's TTFT: what no cache and no scheduler can take away.

For each turn of a trace, the time the llama.cpp backend alone (with the KV cell types Hearth
uses for this model here, ``hearth_cells``; no scheduler, no other request, no cache
bookkeeping) takes to prefill the part of the prompt that nothing computed earlier could
supply, on a sequence that already holds the rest, and to produce the logits of the first
reply token. Any server's time to first token for that
turn, on this machine and this llama.cpp, is at least this (a server whose kernels are
faster would show it on the other scenarios). B8 and B9 report it next to their TTFT goals:
when the floor alone is above the goal, the goal cannot be met by reusing more.

The held part is prefilled before the clock starts; a sequence per ``key`` (a chat or a
client) keeps what it held, so consecutive turns of one conversation prefill only their new
text, untimed, as a server's cache would.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.cache.prefix import common_prefix_len
from app.engine.backend import PrefillOp
from app.engine.llama.llama_backend import LlamaBackend
from benchmarks.common import N_THREADS, hearth_cells

CHUNK = 128
"""Prefill slices, as Hearth's ``ModelConfig.prefill_chunk_size`` default (n_batch 512 / 4)."""


def _prefill(backend: LlamaBackend, seq: int, tokens: Sequence[int], pos: int, logits: bool) -> None:
    for start in range(0, len(tokens), CHUNK):
        part = tuple(tokens[start : start + CHUNK])
        backend.step([PrefillOp(seq, part, pos + start, logits and start + CHUNK >= len(tokens))])


def reusable_prefix(prompt: Sequence[int], computed: Sequence[Sequence[int]]) -> tuple[int, int | None]:
    """``prompt``'s longest prefix shared with one of ``computed`` (what earlier turns
    computed), less its last token, which is always prefilled; and the index of that one in
    ``computed`` (None when none shares a token)."""
    best, source = 0, None
    for i, c in enumerate(computed):
        n = common_prefix_len(prompt, c)
        if n > best:
            best, source = n, i
    return min(best, len(prompt) - 1), source


@dataclass(frozen=True, slots=True)
class Queued:
    """A turn for ``served_one_at_a_time``."""

    arrived_ms: float
    prefill_ms: float
    """The turn's floor (``Floor.turn``)."""
    after: int | None = None
    """The turn whose computed tokens this one's reusable prefix comes from: it cannot start
    before that one has been served."""


def served_one_at_a_time(turns: Sequence[Queued]) -> list[float]:
    """Per turn, its time to first token had one server with the backend alone prefilled the
    turns one at a time, the shortest first among those that have arrived (and whose
    ``after`` has been served), doing nothing else: no decode, no overhead. The burst floor
    of B9 generalised to turns that arrive at any time (B2's clients, each sending its next
    turn when its reply ends): a turn's floor is its own prefill plus the prefills served
    while it waited."""
    done: dict[int, float] = {}
    clock = 0.0
    while len(done) < len(turns):
        free = [i for i, t in enumerate(turns) if i not in done and (t.after is None or t.after in done)]
        ready = [i for i in free if turns[i].arrived_ms <= clock]
        if not ready:
            clock = min(turns[i].arrived_ms for i in free)
            continue
        i = min(ready, key=lambda i: (turns[i].prefill_ms, turns[i].arrived_ms, i))
        clock += turns[i].prefill_ms
        done[i] = clock
    return [done[i] - t.arrived_ms for i, t in enumerate(turns)]


class Floor:
    """The backend alone, one turn at a time (``turn``), so a benchmark can time each of its
    turns' floor right after the turn itself, on the same minute's machine. A sequence per
    ``key`` (``keys`` all the keys the turns will use)."""

    def __init__(self, path: str, n_ctx: int, keys: Iterable[str], n_threads: int = N_THREADS) -> None:
        names = sorted(set(keys))
        self._seq_of = {key: i for i, key in enumerate(names)}
        self._held: dict[str, list[int]] = {key: [] for key in names}
        type_k, type_v = hearth_cells(path)
        self._backend = LlamaBackend(path, n_ctx_per_seq=n_ctx, n_seq_max=len(names), n_batch=512, n_threads=n_threads,
                                     type_k=type_k, type_v=type_v)  # fmt: skip

    def tokenize(self, text: str) -> list[int]:
        return list(self._backend.tokenize(text))

    def turn(self, key: str, prompt: Sequence[int], reusable: int) -> float:
        """ms to prefill ``prompt[reusable:]`` (at least its last token) on the key's sequence
        holding ``prompt[:reusable]``, and read the first token."""
        backend, seq = self._backend, self._seq_of[key]
        kept = max(0, min(reusable, len(prompt) - 1))
        have = common_prefix_len(self._held[key], prompt[:kept])
        backend.seq_rm(seq, have)
        _prefill(backend, seq, prompt[have:kept], have, False)
        t0 = time.perf_counter()
        _prefill(backend, seq, prompt[kept:], kept, True)
        int(backend.seq_logits(seq).argmax())
        ms = (time.perf_counter() - t0) * 1000
        self._held[key] = list(prompt)
        return ms

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> Floor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FloorProcess:
    """``Floor`` in a process of its own, for timing a benchmark's turns' floors between its
    turns. NOTE: a bare llama.cpp context timed in the same process as Hearth's engine
    (idle, its saves written) prefilled 7-28 % slower than alone (B8's trace, per-turn
    floors against the same floors timed after the engine closed, 2026-12-03; an engine idle
    in another process left it unchanged), which flattered Hearth."""

    def __init__(self, path: str, n_ctx: int, keys: Iterable[str], n_threads: int = N_THREADS) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve_floor, args=(child, path, n_ctx, list(keys), n_threads), daemon=True)
        self._proc.start()
        child.close()
        if self._conn.recv() != "ready":
            raise RuntimeError("the floor's process did not start")

    def turn(self, key: str, prompt: Sequence[int], reusable: int) -> float:
        """``Floor.turn`` in the floor's process."""
        self._conn.send(("turn", (key, list(prompt), reusable)))
        ms: float = self._conn.recv()
        return ms

    def tokenize(self, text: str) -> list[int]:
        self._conn.send(("tokenize", (text,)))
        ids: list[int] = self._conn.recv()
        return ids

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(None)
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()
        self._conn.close()

    def __enter__(self) -> FloorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve_floor(conn: Any, path: str, n_ctx: int, keys: list[str], n_threads: int) -> None:
    with Floor(path, n_ctx, keys, n_threads=n_threads) as floor:
        conn.send("ready")
        while (msg := conn.recv()) is not None:
            what, args = msg
            conn.send(floor.turn(*args) if what == "turn" else floor.tokenize(*args))


def unavoidable_prefill_ms(path: str, turns: Sequence[tuple[str, Sequence[int], int]], n_ctx: int) -> list[float]:
    """Per ``(key, prompt, reusable)``: ``Floor.turn``, the turns one after another."""
    with Floor(path, n_ctx, (key for key, _, _ in turns)) as floor:
        return [floor.turn(key, prompt, reusable) for key, prompt, reusable in turns]
