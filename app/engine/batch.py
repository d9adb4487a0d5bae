"""One tick's plan: its op list under the batch budget (docs/design.md §2, the seed's ``step_tick``).

Decode rows are kept whole; prefill rows are sliced head-first, each capped by
``prefill_chunk_size``, until the total fits ``n_batch``. If the decode rows alone do not
fit, that is ``n_batch_too_small`` rather than a stall.

Beyond the seed, ``PrefillBudget`` decides how many prefilling requests get a slice in a
tick (the rules and their measurements are ``ModelConfig``'s NOTEs on
``prefill_seqs_per_tick`` and ``decode_ticks_between_prefills``):

* a burst whose prompts all end in this tick, while nothing streams, and whose tick costs
  no more than one prefill chunk of a fresh prompt (``_burst_fits_one_tick``): every one of
  them, so their replies start together and decode in full batches;
* while replies stream: a decode-only tick after each prefill tick
  (``decode_ticks_between_prefills``), then ``prefill_seqs_per_tick``, shortest remaining
  prefill first (``None``: every prefilling request in admission order, the seed's rule).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from app.engine.backend import DecodeOp, Op, PrefillOp, StepResult
from app.engine.config import ModelConfig
from app.engine.errors import NBatchTooSmall
from app.engine.request import Mode, Request


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What one tick does: the ops of its single ``llama_decode``, in batch order."""

    ops: tuple[Op, ...] = ()
    background: bool = False
    """Every op reads ahead (type-ahead): no request waits for this tick (``read_ahead``)."""

    @property
    def seq_ids(self) -> tuple[int, ...]:
        return tuple(op.seq_id for op in self.ops)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(len(op.tokens) for op in self.ops if isinstance(op, PrefillOp))

    @property
    def num_decode_rows(self) -> int:
        return sum(1 for op in self.ops if isinstance(op, DecodeOp))


class PrefillBudget:
    """How many prefilling requests get a slice this tick (see the module doc)."""

    def __init__(self, decode_ticks_between_prefills: int) -> None:
        self.decode_ticks_since_prefill = decode_ticks_between_prefills

    def max_prefill_seqs(self, reqs: Collection[Request], config: ModelConfig) -> int | None:
        streaming = any(r.wants_decode for r in reqs)
        if not streaming and _burst_fits_one_tick(reqs, config):
            return None
        if streaming and self.decode_ticks_since_prefill < config.decode_ticks_between_prefills:
            return 0  # streaming replies get a decode-only tick first
        return config.prefill_seqs_per_tick

    def record(self, plan: TickPlan) -> None:
        """A tick ran ``plan``."""
        self.decode_ticks_since_prefill = 0 if plan.num_prefill_tokens else self.decode_ticks_since_prefill + 1


def plan_tick(reqs: Collection[Request], config: ModelConfig, budget: PrefillBudget) -> TickPlan:
    """The tick's plan under the batch budget and the prefill budget."""
    ops = build_ops(reqs, config.n_batch, config.chunk_size, budget.max_prefill_seqs(reqs, config))
    return TickPlan(tuple(ops))


def build_ops(
    requests: Iterable[Request], n_batch: int, chunk_size: int | None, max_prefill_seqs: int | None = None
) -> list[Op]:
    """One tick: a decode row per decoding request, then prefill slices."""
    reqs = list(requests)
    # Rows in seq-id order: llama.cpp puts only consecutive, increasing seq ids in one ubatch
    # (one KV stream per seq), see SeqPool.take.
    decoders = sorted((r for r in reqs if r.wants_decode), key=lambda r: r.seq_id)
    if len(decoders) > n_batch:
        raise NBatchTooSmall(
            f"{len(decoders)} decoding sequences do not fit in n_batch={n_batch}; "
            "raise n_batch or lower n_seq_max"
        )
    ops: list[Op] = [decode_op(r) for r in decoders]
    budget = n_batch - len(decoders)
    prefilling = [r for r in reqs if r.prefill_cursor and not r.finishing]
    if max_prefill_seqs is not None:
        # Stable sort: equal remainders keep admission order.
        prefilling.sort(key=lambda r: r.num_to_prefill)
        del prefilling[max_prefill_seqs:]
    for r in prefilling:
        if budget <= 0:
            break
        cap = r.next_slice_len(budget if chunk_size is None else min(budget, chunk_size))
        slice_ = tuple(r.prefill_cursor[:cap])
        completes = cap == len(r.prefill_cursor)
        # Logits are needed only after the prompt's very last token, and only when a
        # decode row will sample from them.
        want_logits = completes and r.mode is not Mode.PREFILL_ONLY
        ops.append(PrefillOp(r.seq_id, slice_, len(r.context_tokens), want_logits))
        budget -= cap
    return ops


def decode_op(r: Request) -> DecodeOp:
    """The request's decode row: its next token sampled, pushed at its committed length."""
    return DecodeOp(r.seq_id, r.sampler, len(r.context_tokens), r.text.in_tool_syntax, r.drafted)


CELLS_PER_TOKEN_OF_WORK = 1000
"""A prompt token attending to this many cells costs about as much again as the token itself.
NOTE: measured on the bare backend (SmolLM2, 2 threads, default q8_0 K+V, docs/history/
"KV"): prefill of 512 tokens 2.1 s, of 2,000 tokens 13.8 s, 20 tokens after 2,000 0.23 s,
i.e. about 3.1 ms a token plus 3.8 ms per 1,000 cells it attends to (f16 K+V: 0.9 ms)."""


def _burst_fits_one_tick(reqs: Iterable[Request], config: ModelConfig) -> bool:
    """Would every prefilling request finish its prompt in one tick (chunk cap, n_batch), and
    would that tick cost no more than one prefill chunk of a fresh prompt?

    Co-batched prompts all wait for the whole tick, and on a CPU a tick's time is the sum of
    its tokens' work, so co-batching saves only the per-tick overhead (~5 ms) while each first
    token waits for the others' prompts. That is worth it for a burst of short fresh prompts
    (replies that start together decode in full batches), not for follow-ups deep in long
    conversations: two agents' 23- and 47-token turns after 2,200 tokens took 1.02 s together
    where the shorter alone takes 0.28 s (B9). Those go one at a time, shortest first.
    """
    chunk = config.chunk_size
    budget = _work(chunk if chunk is not None else config.n_batch, 0)
    total = 0
    work = 0.0
    for r in reqs:
        if r.prefill_cursor and not r.finishing:
            n = len(r.prefill_cursor)
            if chunk is not None and n > chunk:
                return False
            total += n
            work += _work(n, r.num_computed_tokens)
    return total <= config.n_batch and work <= budget


def _work(n: int, n_past: int) -> float:
    """What prefilling ``n`` tokens after ``n_past`` costs, in tokens of a fresh prompt."""
    return n * (1 + (n_past + n / 2) / CELLS_PER_TOKEN_OF_WORK)


Part = tuple[TickPlan, list[StepResult]]
"""Part of a tick's plan, with the results its rows were pushed."""


def first_reads(plan: TickPlan, pushed: list[StepResult]) -> tuple[Part, Part] | None:
    """``plan`` split for ``Scheduler._read_first``: the prefill slices that end a prompt whose
    reply starts now, and the rest (decode rows, other slices), each with its pushes; None
    when the plan has no such slice or no decode row."""
    first = [i for i, op in enumerate(plan.ops) if isinstance(op, PrefillOp) and op.want_logits]
    if not first or not any(isinstance(op, DecodeOp) for op in plan.ops):
        return None
    rest = [i for i in range(len(plan.ops)) if i not in first]
    return (
        (TickPlan(tuple(plan.ops[i] for i in first)), [pushed[i] for i in first]),
        (TickPlan(tuple(plan.ops[i] for i in rest)), [pushed[i] for i in rest]),
    )
