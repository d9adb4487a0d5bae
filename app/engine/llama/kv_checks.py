"""Exactness checks of one set of llama.cpp context settings: what they must keep
bit-identical for Hearth's cache and scheduler to be exact. The KV calibration
(``app.engine.llama.kv_calibration``) runs them on each candidate cell-type pair before it may be
chosen, and ``hearth bench --only KV`` on every setting it times.

Each check runs on the backend alone (no scheduler, no cache) and compares logits (and,
where a save would store them, a sequence's KV bytes) with ``numpy.array_equal``:

* ``chunking``: a 300-token prompt prefilled in one batch, in chunks of 128, 64 and 7, and to
  260 then one token a tick (as decode rows are) — the same last logits and KV bytes;
* ``8 batched``: eight prompts prefilled in one tick and decoded together, each against the
  same prompt prefilled and decoded alone;
* ``resumed``: a sequence's state saved next to a neighbour, both freed, restored and continued
  — against the same turn computed cold;
* ``next to 2 / 4 / 7``: one sequence fed a token a tick alone and in one ubatch with 2, 4 or
  7 neighbours of other lengths (20-150 tokens);
* ``fingerprint``: a digest of the one-batch prompt's logits and KV bytes, for comparing
  settings with each other (equal digests: a cache filled under one setting serves the other).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.engine.backend import DecodeOp, PrefillOp
from app.engine.llama.llama_backend import LlamaBackend

Logits = np.ndarray[Any, np.dtype[np.float32]]

PROMPTS = [  # everyday chat openings; the checks tokenize them, alone and repeated
    "Tell me a short story about a lighthouse keeper.",
    "Explain how a bicycle stays upright.",
    "Write a haiku about autumn rain.",
    "What are the main causes of ocean tides?",
    "Describe the taste of a ripe mango.",
    "List three uses for a paperclip.",
    "Why is the sky blue during the day?",
    "Give advice to someone learning to cook.",
]


def _prefill(backend: LlamaBackend, seq: int, tokens: Sequence[int], chunk: int, pos: int = 0) -> None:
    for start in range(0, len(tokens), chunk):
        part = tuple(tokens[start : start + chunk])
        backend.step([PrefillOp(seq, part, pos + start, start + chunk >= len(tokens))])


def _greedy_logits(backend: LlamaBackend, positions: dict[int, int], n: int) -> dict[int, list[Logits]]:
    """``n`` greedy decode ticks of every seq together; the logits each sampled from."""
    out: dict[int, list[Logits]] = {seq: [] for seq in positions}
    for i in range(n):
        for seq in positions:
            out[seq].append(backend.seq_logits(seq).copy())
        backend.step([DecodeOp(seq, None, pos + i, greedy=True) for seq, pos in positions.items()])
    return out


def _same(a: Sequence[Logits], b: Sequence[Logits]) -> tuple[bool, float]:
    worst = max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))
    return worst == 0.0 and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), worst


def _clear(backend: LlamaBackend) -> None:
    for seq in range(backend.n_seq_max):
        backend.seq_rm(seq)


def check_chunking(backend: LlamaBackend, prompt: Sequence[int]) -> tuple[bool, float, str, list[str]]:
    """(all bit-identical, largest |Δlogit|, the one-batch fingerprint, the chunkings that differ)."""
    def run(chunk: int, one_by_one_from: int | None = None) -> tuple[Logits, bytes]:
        backend.seq_rm(0)
        head = prompt if one_by_one_from is None else prompt[:one_by_one_from]
        _prefill(backend, 0, head, chunk)
        for pos in range(len(head), len(prompt)):
            backend.step([PrefillOp(0, (prompt[pos],), pos, True)])
        return backend.seq_logits(0).copy(), bytes(backend.kv_pack(0))

    whole_logits, whole_kv = run(len(prompt))
    worst, differ = 0.0, []
    for label, chunk, from_ in (("128", 128, None), ("64", 64, None), ("7", 7, None),
                                ("1 a tick", 128, len(prompt) - 40)):
        logits, kv = run(chunk, from_)
        same, diff = _same([whole_logits], [logits])
        worst = max(worst, diff)
        if not same or kv != whole_kv:
            differ.append(label)
    digest = hashlib.sha256(whole_logits.tobytes() + whole_kv).hexdigest()[:16]
    return not differ, worst, digest, differ


def check_batched(backend: LlamaBackend, prompts: list[list[int]], steps: int = 8) -> tuple[bool, float]:
    alone: dict[int, list[Logits]] = {}
    for seq, p in enumerate(prompts):
        _clear(backend)
        backend.step([PrefillOp(seq, tuple(p), 0, True)])
        alone[seq] = _greedy_logits(backend, {seq: len(p)}, steps)[seq]
    _clear(backend)
    backend.step([PrefillOp(seq, tuple(p), 0, True) for seq, p in enumerate(prompts)])
    together = _greedy_logits(backend, {seq: len(p) for seq, p in enumerate(prompts)}, steps)
    results = [_same(alone[seq], together[seq]) for seq in alone]
    return all(ok for ok, _ in results), max(d for _, d in results)


def check_resumed(backend: LlamaBackend, prompt: Sequence[int], neighbour: Sequence[int], steps: int = 8
                  ) -> tuple[bool, float]:
    split = len(prompt) * 2 // 3
    _clear(backend)
    _prefill(backend, 1, neighbour, 512)
    _prefill(backend, 0, prompt[:split], 512)
    saved = bytes(backend.kv_pack(0))
    backend.seq_rm(1)
    backend.seq_rm(0)
    if not backend.kv_unpack(0, saved):
        return False, float("inf")
    _prefill(backend, 0, prompt[split:], 512, pos=split)
    resumed = _greedy_logits(backend, {0: len(prompt)}, steps)[0]
    _clear(backend)
    _prefill(backend, 0, prompt[:split], 512)
    _prefill(backend, 0, prompt[split:], 512, pos=split)
    cold = _greedy_logits(backend, {0: len(prompt)}, steps)[0]
    return _same(cold, resumed)


def check_neighbours(backend: LlamaBackend, neighbours: int, steps: int = 8) -> tuple[bool, float]:
    rng = np.random.default_rng(neighbours)
    top = min(40000, backend.vocab.n_vocab)  # any model's vocabulary (some have fewer than 40,000)
    head = [int(t) for t in rng.integers(100, top, 37)]
    fed = [int(t) for t in rng.integers(100, top, steps)]
    others = {s: [int(t) for t in rng.integers(100, top, int(rng.integers(20, 150)))]
              for s in range(1, neighbours + 1)}

    def run(with_others: dict[int, list[int]]) -> tuple[list[Logits], bytes]:
        _clear(backend)
        backend.step([PrefillOp(0, tuple(head), 0, True)])
        for seq, tokens in with_others.items():
            backend.step([PrefillOp(seq, tuple(tokens), 0, True)])
        out = []
        for i, token in enumerate(fed):
            ops = [PrefillOp(0, (token,), len(head) + i, True)]
            ops += [PrefillOp(seq, (token,), len(t) + i, True) for seq, t in with_others.items()]
            backend.step(ops)
            out.append(backend.seq_logits(0).copy())
        return out, bytes(backend.kv_pack(0))

    alone, alone_kv = run({})
    busy, busy_kv = run(others)
    same, worst = _same(alone, busy)
    return same and alone_kv == busy_kv, worst


CHECKS = ("chunking", "8 batched", "resumed", "next to 2", "next to 4", "next to 7")


def run_checks_on(backend: LlamaBackend, prompts: list[str]) -> dict[str, Any]:
    """Every check on ``backend`` (8 sequences of 1,024 cells or more); per check (passed,
    largest |Δlogit|), the chunkings that differ, and the fingerprint."""
    long = backend.tokenize(" ".join(prompts) * 12)
    prompt, neighbour = long[:300], long[300:450]
    out: dict[str, Any] = {}
    ok, worst, digest, differ = check_chunking(backend, prompt)
    out["chunking"] = (ok, worst)
    out["chunkings that differ"] = differ
    out["fingerprint"] = digest
    out["8 batched"] = check_batched(backend, [backend.tokenize(p) for p in prompts[:8]])
    out["resumed"] = check_resumed(backend, prompt, neighbour)
    for n in (2, 4, 7):
        out[f"next to {n}"] = check_neighbours(backend, n)
    return out


def run_checks(path: str, settings: dict[str, Any], prompts: list[str]) -> dict[str, Any]:
    """``run_checks_on`` a backend of ``path`` under ``settings`` (LlamaBackend keyword arguments)."""
    with LlamaBackend(path, n_ctx_per_seq=1024, n_seq_max=8, n_batch=512, **settings) as backend:
        return run_checks_on(backend, prompts)
