"""Small drivers over a ``Backend`` for integration tests: prefill, greedy decode, batching."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.engine.backend import DecodeOp, PrefillOp, Sampled

PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, in a land far away,",
    "def fibonacci(n):\n    return",
    "The capital of France is",
    "1, 2, 3, 4, 5,",
    "Hearth keeps the KV cache warm so that",
    "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "Llamas are domesticated South American camelids.",
]


def prefill(backend: Any, seq_id: int, tokens: Sequence[int], *, chunk: int | None = None,
            pos: int = 0) -> None:
    """Push ``tokens`` at ``pos`` in slices of ``chunk``; logits kept for the last one."""
    size = chunk or len(tokens)
    for start in range(0, len(tokens), size):
        part = tuple(tokens[start : start + size])
        last = start + size >= len(tokens)
        backend.step([PrefillOp(seq_id, part, pos + start, last)])


def decode(backend: Any, positions: dict[int, int], n_tokens: int,
           samplers: dict[int, Any] | None = None) -> dict[int, list[int]]:
    """Decode ``n_tokens`` for every seq together, one decode row each per tick."""
    out: dict[int, list[int]] = {seq: [] for seq in positions}
    samplers = samplers or {}
    for i in range(n_tokens):
        ops = [DecodeOp(seq, samplers.get(seq), pos + i, greedy=seq not in samplers)
               for seq, pos in positions.items()]
        for op, result in zip(ops, backend.step(ops), strict=True):
            assert isinstance(result, Sampled)
            out[op.seq_id].append(result.token)
    return out


def greedy(backend: Any, seq_id: int, prompt: Sequence[int], n_tokens: int, *,
           chunk: int | None = None) -> list[int]:
    """Cold greedy continuation of ``prompt`` alone in ``seq_id``; the seq is left holding it."""
    backend.seq_rm(seq_id)
    prefill(backend, seq_id, prompt, chunk=chunk)
    return decode(backend, {seq_id: len(prompt)}, n_tokens)[seq_id]


def greedy_together(backend: Any, prompts: dict[int, Sequence[int]], n_tokens: int) -> dict[int, list[int]]:
    """All prompts prefilled in ONE tick, then decoded together."""
    for seq in prompts:
        backend.seq_rm(seq)
    backend.step([PrefillOp(seq, tuple(p), 0, True) for seq, p in prompts.items()])
    return decode(backend, {seq: len(p) for seq, p in prompts.items()}, n_tokens)
