"""A real llama.cpp backend that remembers the logits behind every sampled token.

``RecordingBackend`` is ``LlamaBackend`` plus a log: before each decode row is sampled it
copies that row's logits (and those of the draft rows after it, each with its own context),
together with the tokens the sequence holds at that moment, as far as the backend can know them (cells loaded from a saved state are ``None``: their tokens
are not in the payload). ``logits_for(prompt, generated)`` then finds the logits of each
step of a request by its context, whichever seq it ran on and however its KV got there, so a
test can assert that two ways of running one request give bit-identical logits.

Install it with ``monkeypatch.setattr(llama_backend, "LlamaBackend", RecordingBackend)``: the
engine's backend factory looks the class up at load time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from app.cache.blobs import seqstate
from app.engine.backend import DecodeOp, Op, PrefillOp, Sampled, StepResult
from app.engine.llama.llama_backend import LlamaBackend

Context = tuple[int | None, ...]


class RecordingBackend(LlamaBackend):
    records: list[tuple[Context, np.ndarray[Any, Any]]] = []
    _lock = threading.Lock()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: dict[int, list[int | None]] = {}

    @classmethod
    def reset(cls) -> None:
        with cls._lock:
            cls.records = []

    # -- what each seq holds
    def seq_rm(self, seq_id: int, start: int = 0) -> None:
        super().seq_rm(seq_id, start)
        self._held[seq_id] = self._held.get(seq_id, [])[: max(start, 0)]

    def kv_unpack(self, seq_id: int, payload: bytes | memoryview) -> bool:
        ok = super().kv_unpack(seq_id, payload)
        n = seqstate.parse(payload).n_cells if ok else 0
        self._held[seq_id] = [None] * n
        return ok

    def seq_cp(self, src: int, dst: int, n_tokens: int) -> None:
        super().seq_cp(src, dst, n_tokens)
        self._held[dst] = list(self._held.get(src, [])[:n_tokens])

    # -- the tick
    def sample(self, ops: Sequence[Op]) -> list[StepResult]:
        for op in ops:
            if isinstance(op, DecodeOp) and op.seq_id in self._rows:
                held = self._held.get(op.seq_id, [])
                first = self._rows[op.seq_id]
                for i in range(len(op.drafted) + 1):  # row i follows i drafts
                    logits = self._logits_view(first + i).copy()
                    with self._lock:
                        self.records.append((tuple(held[: op.pos + i]), logits))
        return super().sample(ops)

    def decode(
        self, ops: Sequence[Op], sampled: Sequence[StepResult], *, background: bool = False,
        before: Callable[[], None] | None = None,
    ) -> None:
        super().decode(ops, sampled, background=background, before=before)
        for op, res in zip(ops, sampled, strict=True):
            held = self._held.setdefault(op.seq_id, [])
            if isinstance(op, PrefillOp):
                del held[op.pos :]
                held.extend(op.tokens)
            elif isinstance(res, Sampled):
                del held[op.pos + len(res.accepted) :]
                held.append(res.token)
                held.extend(res.drafts)


def logits_for(prompt: Sequence[int], generated: Sequence[int]) -> list[np.ndarray[Any, Any]]:
    """The recorded logits of each step of a request, in order (the step before token i).

    A record matches step i when its context has the length of ``prompt + generated[:i]`` and
    every token it knows equals that context's. Several matches (the same request run twice
    in one log) must agree bit for bit, or this raises.
    """
    full = [*prompt, *generated]
    out: list[np.ndarray[Any, Any]] = []
    with RecordingBackend._lock:
        records = list(RecordingBackend.records)
    for i in range(len(generated)):
        want = full[: len(prompt) + i]
        found = [lg for ctx, lg in records if len(ctx) == len(want)
                 and all(t is None or t == w for t, w in zip(ctx, want, strict=True))]
        if not found:
            raise AssertionError(f"no recorded logits for step {i} of a {len(prompt)}-token prompt")
        for other in found[1:]:
            if not np.array_equal(other, found[0]):
                raise AssertionError(f"two runs of step {i} recorded different logits")
        out.append(found[0])
    return out
