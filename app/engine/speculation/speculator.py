"""``Speculator``: which sequences draft how many tokens in a tick, so that the draft rows pay
for themselves (the package doc says how), and what their verification gave."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.engine.backend import Backend, DecodeOp, PrefillOp, Sampled, StepResult
from app.engine.batch import TickPlan
from app.engine.config import ModelConfig
from app.engine.request import Mode, Request
from app.engine.speculation import draft_model
from app.engine.speculation.draft_model import DraftModel
from app.engine.speculation.lookup import (
    PRIOR_ACCEPTANCE,
    SeqSpec,
    can_drop_tail,
)
from app.engine.speculation.tick_costs import SeqRows, TickCosts, TickShape, shape_of

log = logging.getLogger(__name__)


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
