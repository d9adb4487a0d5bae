"""Speculative decoding without a draft model (docs/design.md §9): prompt lookup drafts, the acceptance
rule, per-sequence draft lengths, and when a tick's draft rows pay for themselves.

How a draft travels through the two-phase tick (``app.engine.backend``)::

    tick N    decode  the seq's new token t at p, then drafts d1..dk at p+1..p+k, every
                      row with logits (ordinary positions of the seq, in the same ubatch
                      pass as the other seqs' decode rows)
    tick N+1  sample  row i's logits give the token after d_i: d1..dj are accepted while
                      the sampled token equals the next draft (``verify``), and the token
                      sampled at the first mismatch (or after d_k) is the new one
              stream  d1..dj and the new token reach the request one by one, so a stop
                      string, end-of-generation or the length limit cuts there
              decode  the seq's cells after d_j are dropped (``seq_rm``), the new token is
                      pushed at p+1+j, then the next drafts

**Exact.** A verify row is an ordinary position of the sequence, and under Hearth's KV
settings a row's logits do not depend on the rows next to it (the exactness suite), so each
token is sampled from the logits it would have had without speculation. Acceptance samples
each row with the request's own sampler, in order, and keeps a draft only when the sample
equals it: for a deterministic draft d this IS the standard speculative sampling rule (accept
with probability min(1, p(d)/q(d)) = p(d); on a rejection the sample is distributed as the
residual, p without d, renormalised), and it draws exactly one sample per generated token, as
decoding without speculation does. So greedy replies are bit-identical on and off, and a
seeded sampled reply is too (same seed, same draws, same logits).

**Adaptive.** Each sequence keeps decayed evidence of how often its drafts are accepted, as
two per-token rates (``SeqSpec``): the first token of a fresh guess (``acceptance``), and a
token that follows an accepted one (``continuation``: a copy going on). A draft row costs what
``TickCosts`` says a row costs (plus any ubatch it adds), fitted from decode ticks only; the
i-th draft token is worth ``acceptance * continuation**(i - 1)`` tokens, each worth the
tick's time per decode row. ``Speculator.plan`` reserves the rows whose expected
gain is positive, for the sequences whose drafts pay most; a sequence whose drafts do not pay
stops drafting, and tries one draft again once its evidence has decayed.

**A draft model** (``app.engine.draft_model``), when one is attached and a request names it
(``draft_model=``), proposes that request's drafts instead of prompt lookup. Its proposals
are made for all its seqs at once after ``stream`` (``draft_with_model``) and ride in the
same decode as lookup drafts; a draft row then also costs the draft model's pass
(``DraftModel.token_ms``), which is kept out of the target's cost fit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.engine import draft_model
from app.engine.backend import Backend, BackendInfo, DecodeOp, PrefillOp, Sampled, StepResult
from app.engine.batch import TickPlan
from app.engine.config import ModelConfig
from app.engine.draft_model import DraftModel
from app.engine.request import Mode, Request
from app.engine.tick_costs import SeqRows, TickCosts, TickShape, shape_of

log = logging.getLogger(__name__)

NGRAM_MAX = 4
NGRAM_MIN = 2
"""Prompt lookup matches the context's last 4, else 3, else 2 tokens (one token matches
everywhere and predicts little)."""
LOOKUP_WINDOW = 8192
"""A new request's drafter indexes at most its context's last this many tokens."""
PRIOR_ACCEPTANCE = 0.5
PRIOR_TRIES = 2.0
"""A new sequence's acceptance before any evidence: as if 1 of 2 draft tokens was accepted."""
PRIOR_CONTINUE = 0.8
"""The same for a draft token that follows an accepted one (``SeqSpec``)."""
DECAY_VERIFY = 0.8
"""Each verify multiplies the older evidence by this (the last ~5 verifies count)."""
DECAY_IDLE = 0.97
"""Each tick a sequence does not draft multiplies its evidence by this, so it drifts back
to the prior and a sequence that stopped drafting tries again (~every 30-70 tokens)."""


def verify(drafted: Sequence[int], sample_row: Callable[[int], int]) -> tuple[tuple[int, ...], int]:
    """The acceptance rule: sample row 0, 1, ... (row i follows i drafts) while each sample
    equals the next draft. Returns (the drafts accepted, the token sampled after them)."""
    accepted: list[int] = []
    token = sample_row(0)
    for i, draft in enumerate(drafted):
        if token != draft:
            break
        accepted.append(draft)
        token = sample_row(i + 1)
    return tuple(accepted), token


def can_drop_tail(info: BackendInfo) -> bool:
    """Can rejected drafts be dropped so that the seq is exactly as if it never drafted? Only
    for attention memory (``MemoryCaps``: any tail dropped, any head cut). A recurrent or
    hybrid state has absorbed every token; a sliding-window cache may have let go of the
    cells the next token attends to while it held the drafts. Speculation is off for those."""
    return info.memory.trim_tail and info.memory.cut_states


def drop_drafts(backend: Backend, req: Request) -> None:
    """Between ticks: drop the request's pending drafts from its seq, so the seq holds exactly
    its committed tokens (before a save, or when the request ends)."""
    if req.drafted:
        backend.seq_rm(req.seq_id, len(req.context_tokens))
        req.drafted = ()


class NgramDrafter:
    """Prompt lookup over one sequence's tokens: the tokens that followed the latest earlier
    occurrence of its last ``NGRAM_MAX`` .. ``NGRAM_MIN`` tokens.

    Incremental: each appended token updates a map from every n-gram ending there to where it
    last ended, so a proposal costs a few dict lookups whatever the context length.
    NOTE: indexing takes ~2-6 µs a token (4,000 tokens: 8 ms quiet, 25 ms on a loaded
    2-core machine), once, at the request's first draft; so a long context is indexed from
    its last ``LOOKUP_WINDOW`` tokens only (what a reply repeats is nearly always recent).
    """

    def __init__(self) -> None:
        self._start = -1
        """Where in the sequence the indexed tokens start (-1: nothing indexed yet)."""
        self._tokens: list[int] = []
        self._last_end: dict[tuple[int, ...], int] = {}
        self._match_end: dict[int, int] = {}
        """n → where the previous occurrence of the current last n tokens ended."""

    def sync(self, tokens: Sequence[int]) -> None:
        """Catch up with the sequence's tokens (which only ever grow)."""
        if self._start < 0:
            self._start = max(0, len(tokens) - LOOKUP_WINDOW)
        for token in tokens[self._start + len(self._tokens) :]:
            self._push(token)

    def _push(self, token: int) -> None:
        tokens, last_end, match_end = self._tokens, self._last_end, self._match_end
        tokens.append(token)
        end = len(tokens)
        for n in range(NGRAM_MIN, min(NGRAM_MAX, end) + 1):
            key = tuple(tokens[end - n : end])
            previous = last_end.get(key)
            last_end[key] = end
            if previous is None:
                match_end.pop(n, None)
            else:
                match_end[n] = previous

    def propose(self, k: int) -> tuple[int, ...]:
        """Up to ``k`` tokens that followed the longest matched suffix; () when none matched."""
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            end = self._match_end.get(n)
            if end is not None:
                return tuple(self._tokens[end : end + k])
        return ()


@dataclass(slots=True)
class SeqSpec:
    """One request's speculation: its drafter and the evidence of how well it drafts.

    Two rates, because a draft token's fate depends on whether the one before it was
    accepted: the *first* token of a draft after a rejection (or after a tick without a
    draft) starts a guess, while a token that follows an accepted one — later tokens of the
    same draft, and the first of the next draft after one accepted whole — continues a copy
    the model is making. B12's rewrites: once a copy runs, ~9 in 10 continue; a fresh match
    ~1 in 2. One rate for both made a copy ramp its drafts up over ~6 verifies and cut them
    back after each miss."""

    drafter: NgramDrafter = field(default_factory=NgramDrafter)
    hits: float = 0.0
    tries: float = 0.0
    """Evidence for the first token of a draft that starts a guess."""
    run_hits: float = 0.0
    run_tries: float = 0.0
    """Evidence for a draft token that follows an accepted one."""
    prior: float = PRIOR_ACCEPTANCE
    """The acceptance before any evidence (a draft model's is higher than prompt lookup's)."""
    run_prior: float = PRIOR_CONTINUE
    in_run: bool = False
    """The last verify accepted its whole draft: the next draft continues a copy."""

    @property
    def acceptance(self) -> float:
        """Estimated probability that the next draft's first token is accepted (hits / tries,
        a try being a draft token the sampler reached)."""
        if self.in_run:
            return self.continuation
        return (self.hits + self.prior * PRIOR_TRIES) / (self.tries + PRIOR_TRIES)

    @property
    def continuation(self) -> float:
        """Estimated probability that a draft token is accepted given the one before it was."""
        return (self.run_hits + self.run_prior * PRIOR_TRIES) / (self.run_tries + PRIOR_TRIES)

    def record(self, num_drafted: int, num_accepted: int) -> None:
        """A verify of ``num_drafted`` tokens accepted the first ``num_accepted``."""
        reached = num_accepted + (num_accepted < num_drafted)  # tokens the sampler compared
        first = 0 if self.in_run else 1
        self.hits = DECAY_VERIFY * self.hits + (min(num_accepted, 1) if first else 0)
        self.tries = DECAY_VERIFY * self.tries + (min(reached, 1) if first else 0)
        self.run_hits = DECAY_VERIFY * self.run_hits + num_accepted - min(num_accepted, first)
        self.run_tries = DECAY_VERIFY * self.run_tries + reached - min(reached, first)
        self.in_run = num_drafted > 0 and num_accepted == num_drafted

    def pause(self) -> None:
        """A tick without a draft: the next draft starts a guess."""
        self.in_run = False

    def idle(self) -> None:
        self.hits *= DECAY_IDLE
        self.tries *= DECAY_IDLE
        self.run_hits *= DECAY_IDLE
        self.run_tries *= DECAY_IDLE


@dataclass(frozen=True, slots=True)
class _Choice:
    seq_id: int
    k: int
    gain_ms: float
    """Expected time saved (value of the expected accepted tokens) minus the rows' cost."""


class Speculator:
    """The scheduler's side of speculative decoding: plans draft rows, turns each verified row
    into what the decode pushes, and keeps the counters. Scheduler thread only."""

    def __init__(
        self,
        backend: Backend,
        config: ModelConfig,
        *,
        has_tool_markers: bool,
        save_due: Callable[[Request], bool],
    ) -> None:
        self._backend = backend
        self._config = config
        self.can_draft = can_drop_tail(backend.info)
        """False when the model's memory cannot drop a tail exactly: no request drafts then."""
        self._has_tool_markers = has_tool_markers
        self._save_due = save_due
        self._n_ubatch = min(config.n_batch, 512)
        self._one_stream = config.n_seq_max == 1
        self.costs = TickCosts()
        self.num_drafted = 0
        self.num_accepted = 0
        self.draft: DraftModel | None = None
        """The attached draft model, for the requests that name it (``draft_model=``)."""
        self._deferred: dict[int, tuple[Request, int]] = {}
        """seq id → (request, most drafts) waiting for the draft model this tick."""
        self._draft_ms = 0.0
        """This tick's time in the draft model (not the target's: kept out of ``costs``)."""

    def attach(self, draft: DraftModel | None) -> DraftModel | None:
        """Use ``draft`` for the requests that name it from the next tick on; returns the one
        it replaces (the caller closes it). A request running with the old one drafts by
        prompt lookup from then on."""
        old, self.draft = self.draft, draft
        return old

    def _with_model(self, req: Request) -> bool:
        """Does the request draft with the attached draft model?"""
        name = req.options.draft_model
        return name is not None and self.draft is not None and self.draft.model_id == name

    @property
    def enabled(self) -> bool:
        """Requests draft unless they say otherwise (the model's setting, and its memory)."""
        return self.can_draft and self._config.speculative

    # ------------------------------------------------------------------ before sample

    def plan(self, plan: TickPlan, reqs: Mapping[int, Request]) -> TickPlan:
        """Reserve draft rows (``DecodeOp.draft_max``) where their expected gain is positive."""
        decodes = [op for op in plan.ops if isinstance(op, DecodeOp)]
        specs = {op.seq_id: spec for op in decodes if (spec := self._spec(reqs[op.seq_id])) is not None}
        if not specs:
            return plan
        budget = self._config.n_batch - plan.num_prefill_tokens - len(decodes)
        choices = self._choose(plan, decodes, reqs, specs, budget)
        for seq_id, spec in specs.items():
            if seq_id not in choices:
                spec.idle()
        if not choices:
            return plan
        ops = tuple(
            replace(op, draft_max=choices[op.seq_id]) if isinstance(op, DecodeOp) and op.seq_id in choices else op
            for op in plan.ops
        )
        return replace(plan, ops=ops)

    def _spec(self, req: Request) -> SeqSpec | None:
        """The request's speculation state when it may draft (created at its first chance)."""
        if req.spec is None and self._may_draft(req):
            req.spec = SeqSpec(prior=draft_model.PRIOR_ACCEPTANCE if self._with_model(req) else PRIOR_ACCEPTANCE)
        return req.spec if isinstance(req.spec, SeqSpec) else None

    def _may_draft(self, req: Request) -> bool:
        if not self.can_draft or req.mode is Mode.PREFILL_ONLY or self._draft_max(req) <= 0:
            return False
        # Tool-call syntax is sampled greedily inside a span the text pipeline finds token by
        # token; a row verified ahead of that would be sampled with the request's chain. Only
        # a chain whose choice is the argmax anyway may draft on a model with tool markers.
        return not self._has_tool_markers or req.options.sampling.is_plain_greedy

    def _draft_max(self, req: Request) -> int:
        opts = req.options
        if opts.speculative is False or (opts.speculative is None and not self._config.speculative):
            return 0
        return self._config.draft_max if opts.draft_max is None else opts.draft_max

    def _choose(
        self, plan: TickPlan, decodes: Sequence[DecodeOp], reqs: Mapping[int, Request],
        specs: Mapping[int, SeqSpec], budget: int,
    ) -> dict[int, int]:  # fmt: skip
        """seq id → draft rows: each seq's best draft length, then the best set of seqs once
        the ubatches their rows add are counted."""
        rows = [self._rows(op) for op in plan.ops]
        base = self._shape(rows)
        base_ubatches = base.num_ubatches
        # A decode-only tick (the usual one) is its decode rows' shape already.
        decode_shape = base if len(decodes) == len(rows) else self._shape(
            [r for op, r in zip(plan.ops, rows, strict=True) if isinstance(op, DecodeOp)]
        )
        decode_ms = self.costs.predict(decode_shape)
        token_ms = decode_ms / len(decodes)  # what one decode row's token costs in this tick
        singles = []
        for op in decodes:
            spec = specs.get(op.seq_id)
            if spec is not None:
                req = reqs[op.seq_id]
                cap = min(self._draft_max(req), self._room(req, plan_time=True), budget)
                extra_ms = self.draft.token_ms if self.draft is not None and self._with_model(req) else 0.0
                choice = self._best_length(op, spec.acceptance, spec.continuation, cap, token_ms, extra_ms)
                if choice is not None:
                    singles.append(choice)
        singles.sort(key=lambda c: c.gain_ms, reverse=True)
        best: dict[int, int] = {}
        best_gain = 0.0
        for n in range(1, len(singles) + 1):
            chosen = {c.seq_id: c.k for c in singles[:n]}
            if sum(chosen.values()) > budget:
                break
            shape = self._shape([
                self._rows(op, chosen[op.seq_id]) if op.seq_id in chosen else r for op, r in zip(plan.ops, rows, strict=True)
            ])  # fmt: skip
            gain = sum(c.gain_ms for c in singles[:n]) - self.costs.per_ubatch * (shape.num_ubatches - base_ubatches)
            if gain > best_gain:
                best, best_gain = chosen, gain
        return best

    def _shape(self, rows: Sequence[SeqRows]) -> TickShape:
        return shape_of(rows, self._n_ubatch, self._one_stream)

    def _best_length(
        self, op: DecodeOp, acceptance: float, continuation: float, cap: int, token_ms: float, extra_ms: float = 0.0
    ) -> _Choice | None:
        """The longest draft whose last row still pays: row i is worth
        ``acceptance * continuation**(i - 1)`` tokens and costs one row at its position (and
        ``extra_ms``: proposing it)."""
        k, gain, worth = 0, 0.0, 1.0
        pos = op.pos + len(op.drafted)
        while k < cap:
            worth *= acceptance if k == 0 else continuation
            net = worth * token_ms - self.costs.row_ms(pos + k + 1) - extra_ms
            if net <= 0:
                break
            k += 1
            gain += net
        return _Choice(op.seq_id, k, gain) if k else None

    def _room(self, req: Request, *, plan_time: bool) -> int:
        """Drafts that can still be used: within the reply's length and the context. At plan
        time this tick's tokens are not known yet (at least one will come)."""
        generated = req.num_generated + (1 if plan_time else 0)
        committed = len(req.context_tokens) + (1 if plan_time else 0)
        return min(req.options.response_tokens - generated - 1, self._config.n_ctx_per_seq - committed - 1)

    @staticmethod
    def _rows(op: Any, k: int = 0) -> SeqRows:
        if isinstance(op, PrefillOp):
            return SeqRows(op.seq_id, len(op.tokens), op.pos, int(op.want_logits))
        return SeqRows(op.seq_id, 1 + k, op.pos + len(op.drafted))

    # ------------------------------------------------------------------ between stream and decode

    def commit(self, req: Request, op: DecodeOp, res: Sampled) -> Sampled:
        """What the decode pushes for ``op`` once the request has taken its tokens (the
        accepted drafts, then the sampled token, up to where it finished): the drafts kept,
        the token, and the next drafts."""
        spec = req.spec if isinstance(req.spec, SeqSpec) else None
        if spec is not None:
            if op.drafted:
                spec.record(len(op.drafted), len(res.accepted))
            else:
                spec.pause()
        req.drafted = ()
        tokens = (*res.accepted, res.token)
        taken = len(req.context_tokens) - op.pos
        num_accepted = max(0, min(taken, len(res.accepted)))
        req.num_accepted += num_accepted
        self.num_accepted += num_accepted
        if taken <= 0:  # failed before its first token: its seq is released, not reused
            return res
        if taken < len(tokens):  # stopped on a draft token: push that one again, drop the rest
            last = tokens[taken - 1]
            return Sampled(last, self._backend.is_eog(last), tokens[: taken - 1])
        drafts = self._drafts(req, op, spec)
        if not drafts:
            return res
        req.drafted = drafts
        req.num_drafted += len(drafts)
        self.num_drafted += len(drafts)
        return replace(res, drafts=drafts)

    def _drafts(self, req: Request, op: DecodeOp, spec: SeqSpec | None) -> tuple[int, ...]:
        if spec is None or op.draft_max <= 0 or req.finishing or self._save_due(req):
            return ()  # a continued save after this decode packs exactly the committed tokens
        k = min(op.draft_max, self._room(req, plan_time=False))
        if k <= 0:
            return ()
        if self._with_model(req):
            self._deferred[req.seq_id] = (req, k)  # proposed with the others' (draft_with_model)
            return ()
        spec.drafter.sync(req.context_tokens)
        return spec.drafter.propose(k)

    def draft_with_model(self, plan: TickPlan, pushed: list[StepResult]) -> None:
        """After every request has taken its tokens: the draft model proposes for the seqs
        ``commit`` deferred, in passes shared by them all; their records in ``pushed`` get
        the drafts. A failure of the draft model costs this tick's drafts only."""
        deferred, self._deferred = self._deferred, {}
        self._draft_ms = 0.0
        if not deferred or self.draft is None:
            return
        started = time.perf_counter()
        try:
            proposals = self.draft.propose([(seq, req.context_tokens, k) for seq, (req, k) in deferred.items()])
        except Exception:
            log.exception("draft model %s failed; this tick drafts nothing", self.draft.model_id)
            proposals = {}
        self._draft_ms = (time.perf_counter() - started) * 1000
        for i, op in enumerate(plan.ops):
            drafts = proposals.get(op.seq_id) if isinstance(op, DecodeOp) else None
            res = pushed[i]
            req = deferred[op.seq_id][0] if drafts else None
            if drafts and req is not None and not req.finishing and isinstance(res, Sampled):
                req.drafted = drafts
                req.num_drafted += len(drafts)
                self.num_drafted += len(drafts)
                pushed[i] = replace(res, drafts=drafts)

    # ------------------------------------------------------------------ after decode

    def observe(self, plan: TickPlan, pushed: Sequence[StepResult], ms: float) -> int:
        """A tick ran in ``ms``: feed the cost model. Returns the tick's draft rows.

        Only ticks of decode (and draft) rows are fitted: those are the rows the cost model
        prices. NOTE: a prefill slice is hundreds of rows without logits whose cost per row
        and per cell attended is not a decode row's (batched matrix products, quadratic
        attention); fitted together, a loaded 2-core machine gave per_kcell 275 ms and a
        per-ubatch cost at its floor, so a draft row cost as much as a whole tick and a
        copy accepted at 94 % stopped drafting (B12, 2026-12-02 16:34 UTC)."""
        rows = []
        num_drafts = 0
        prefill = False
        for op, res in zip(plan.ops, pushed, strict=True):
            if isinstance(op, PrefillOp):
                prefill = True
            elif isinstance(res, Sampled):
                rows.append(SeqRows(op.seq_id, 1 + len(res.drafts), op.pos + len(res.accepted)))
                num_drafts += len(res.drafts)
        if not prefill:
            self.costs.observe(self._shape(rows), ms - self._draft_ms)
        self._draft_ms = 0.0
        return num_drafts
