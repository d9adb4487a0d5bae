"""The floor under a trace's TTFT: what no cache and no scheduler can take away.

For each turn of a trace, the time the llama.cpp backend alone (Hearth's default KV settings,
no scheduler, no other request, no cache bookkeeping) takes to prefill the part of the prompt
that nothing computed earlier could supply, on a sequence that already holds the rest, and
to produce the logits of the first reply token. Any server's time to first token for that
turn, on this machine and this llama.cpp, is at least this (a server whose kernels are
faster would show it on the other scenarios). B8 and B9 report it next to their TTFT goals:
when the floor alone is above the goal, the goal cannot be met by reusing more.

The held part is prefilled before the clock starts; a sequence per ``key`` (a chat or a
client) keeps what it held, so consecutive turns of one conversation prefill only their new
text, untimed, as a server's cache would.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from app.engine.backend import PrefillOp
from app.engine.llama_backend import LlamaBackend
from benchmarks.common import N_THREADS

CHUNK = 128
"""Prefill slices, as Hearth's ``ModelConfig.prefill_chunk_size`` default (n_batch 512 / 4)."""


def _prefill(backend: LlamaBackend, seq: int, tokens: Sequence[int], pos: int, logits: bool) -> None:
    for start in range(0, len(tokens), CHUNK):
        part = tuple(tokens[start : start + CHUNK])
        backend.step([PrefillOp(seq, part, pos + start, logits and start + CHUNK >= len(tokens))])


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Floor:
    """The backend alone, one turn at a time (``turn``), so a benchmark can time each of its
    turns' floor right after the turn itself, on the same minute's machine. A sequence per
    ``key`` (``keys`` all the keys the turns will use)."""

    def __init__(self, path: str, n_ctx: int, keys: Iterable[str], n_threads: int = N_THREADS) -> None:
        names = sorted(set(keys))
        self._seq_of = {key: i for i, key in enumerate(names)}
        self._held: dict[str, list[int]] = {key: [] for key in names}
        self._backend = LlamaBackend(path, n_ctx_per_seq=n_ctx, n_seq_max=len(names), n_batch=512, n_threads=n_threads)

    def tokenize(self, text: str) -> list[int]:
        return list(self._backend.tokenize(text))

    def turn(self, key: str, prompt: Sequence[int], reusable: int) -> float:
        """ms to prefill ``prompt[reusable:]`` (at least its last token) on the key's sequence
        holding ``prompt[:reusable]``, and read the first token."""
        backend, seq = self._backend, self._seq_of[key]
        kept = max(0, min(reusable, len(prompt) - 1))
        have = _lcp(self._held[key], prompt[:kept])
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


def unavoidable_prefill_ms(path: str, turns: Sequence[tuple[str, Sequence[int], int]], n_ctx: int) -> list[float]:
    """Per ``(key, prompt, reusable)``: ``Floor.turn``, the turns one after another."""
    with Floor(path, n_ctx, (key for key, _, _ in turns)) as floor:
        return [floor.turn(key, prompt, reusable) for key, prompt, reusable in turns]
