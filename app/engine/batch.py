"""Building one tick's op list under the batch budget (SPEC §2, the seed's ``step_tick``).

Decode rows are kept whole; prefill rows are sliced head-first, each capped by
``prefill_chunk_size``, until the total fits ``n_batch``. If the decode rows alone do not
fit, that is ``n_batch_too_small`` rather than a stall.

Beyond the seed, ``max_prefill_seqs`` limits how many prefilling requests get a slice in one
tick, the shortest remaining prefill first (see ``ModelConfig.prefill_seqs_per_tick``);
``None`` keeps the seed's rule: every prefilling request, in admission order; ``0`` makes a
decode-only tick.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.engine.backend import DecodeOp, Op, PrefillOp
from app.engine.errors import NBatchTooSmall
from app.engine.request import Mode, Request


def build_ops(
    requests: Iterable[Request], n_batch: int, chunk_size: int | None, max_prefill_seqs: int | None = None
) -> list[Op]:
    """One tick: a decode row per decoding request, then prefill slices."""
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
    prefilling = [r for r in reqs if r.prefill_cursor and not r.finishing]
    if max_prefill_seqs is not None:
        # Stable sort: equal remainders keep admission order.
        prefilling.sort(key=lambda r: len(r.prefill_cursor) + len(r.cold_save_remaining or ()))
        del prefilling[max_prefill_seqs:]
    for r in prefilling:
        if budget <= 0:
            break
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
