"""Building one tick's op list under the batch budget (SPEC §2, the seed's ``step_tick``).

Decode rows are kept whole; prefill rows are sliced head-first, each capped by
``prefill_chunk_size``, until the total fits ``n_batch``. If the decode rows alone do not
fit, that is ``n_batch_too_small`` rather than a stall.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.engine.backend import DecodeOp, Op, PrefillOp
from app.engine.errors import NBatchTooSmall
from app.engine.request import Mode, Request


def build_ops(requests: Iterable[Request], n_batch: int, chunk_size: int | None) -> list[Op]:
    """One tick: a decode row per decoding request, then prefill slices in admission order."""
    reqs = list(requests)
    decoders = [r for r in reqs if r.wants_decode]
    if len(decoders) > n_batch:
        raise NBatchTooSmall(
            f"{len(decoders)} decoding sequences do not fit in n_batch={n_batch}; "
            "raise n_batch or lower n_seq_max"
        )
    ops: list[Op] = [
        DecodeOp(r.seq_id, r.sampler, len(r.context_tokens), r.in_tool_syntax) for r in decoders
    ]
    budget = n_batch - len(decoders)
    for r in reqs:
        if budget <= 0:
            break
        if not r.prefill_cursor or r.finishing:
            continue
        cap = min(len(r.prefill_cursor), budget)
        if chunk_size is not None:
            cap = min(cap, chunk_size)
        slice_ = tuple(r.prefill_cursor[:cap])
        completes = cap == len(r.prefill_cursor)
        # Logits are needed only after the prompt's very last token, and only when a
        # decode row will sample from them.
        want_logits = completes and not r.cold_save_remaining and r.mode is not Mode.PREFILL_ONLY
        ops.append(PrefillOp(r.seq_id, slice_, len(r.context_tokens), want_logits))
        budget -= cap
    return ops
