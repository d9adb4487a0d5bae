"""What a tick costs: its shape (ubatches, rows, cells attended) and the milliseconds that
shape takes on this machine, fitted online from the ticks the scheduler runs.

A tick's ``llama_decode`` runs as one or more ubatches. With a KV stream per sequence,
llama.cpp builds each ubatch from consecutive, increasing seq ids holding the SAME number of
tokens each (``llama_batch_allocr::split_equal``), so a sequence with more rows than the
others (a prefill slice, or a decode row followed by draft rows) spills into ubatches of its
own. Each ubatch is a whole graph computation: its fixed cost (graph build, a thread barrier
per node) is paid again. ``count_ubatches`` replays that split.

The model: ``ms ≈ per_ubatch · ubatches + per_row · rows + per_output · rows with logits +
per_kcell · (Σ cells each row attends to) / 1000`` (a decode or draft row has logits, so it
costs ``per_row + per_output``; a prefill row mostly not). ``TickCosts`` fits the three coefficients by recursive least squares
with forgetting (recent ticks weigh most, so a machine that gets busier or quieter is
followed), pulled towards measured priors so that a few noisy ticks cannot swing it.

NOTE: the priors are SmolLM2 Q4_1 on a quiet 2-core machine with 2 threads: B1 decoded
1 row in 10.2 ms and 8 rows in 39 ms (per_ubatch ≈ 6 ms, a row with logits ≈ 4.1 ms, of
which the output layer, 49,152 × 576 of the model's 135 M weights, is about a fifth), and a
token attending to 1,000 more cells cost 3.8 ms more with a q8_0 KV
(``batch.CELLS_PER_TOKEN_OF_WORK``).
With ONE thread the same machine decodes 1 row in ~7 ms and 9 rows of one seq in ~60 ms
(per_ubatch ≈ 1 ms, per_row ≈ 6.5 ms): the ratio that decides whether drafting pays moves
tenfold with the thread count, hence the online fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PRIOR_MS = (6.0, 3.3, 0.8, 3.8)
"""(per ubatch, per row, per row with logits, per 1,000 cells a row attends to), see the
module NOTE."""
PRIOR_WEIGHT = 2.0
"""How many ticks' worth of evidence the prior counts for."""
FORGET = 0.98
"""Each new tick multiplies the weight of the older ones by this (a window of ~50 ticks)."""
OUTLIER = 1.5
"""A tick that took more than this many times its prediction (or less than its inverse)
counts as this many times: one tick stalled by another process must not swing the fit (a
real slowdown still moves it, tick by tick). NOTE: at 3 (and from above only), a loaded
2-core machine's stalls taught the fit that a row costs a whole tick: per_ubatch went to its
floor and copies accepted at 95 % stopped drafting (B12, 2026-12-02 16:46 UTC)."""
KCELL_PRIOR_SPAN = 10.0
"""The cost of cells attended moves from its prior only with evidence from ticks spanning
this many thousand cells (several seqs deep in long contexts). NOTE: decode ticks of one
short chat attend a few hundred cells each, so their small differences, under a load that
changes the tick's time 30-fold, fitted 150-275 ms per 1,000 cells (3.8 quiet), and a draft
row looked as dear as a whole tick (B12, 2026-12-02)."""
FLOOR = 0.05
"""No fitted coefficient goes below this share of its prior (costs are never free)."""


@dataclass(frozen=True, slots=True)
class TickShape:
    """A tick's size in the model's terms."""

    num_ubatches: int
    num_rows: int
    num_outputs: int
    """Rows with logits."""
    kcells: float
    """Σ over rows of the cells each attends to, in thousands."""

    def features(self) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
        return np.array([self.num_ubatches, self.num_rows, self.num_outputs, self.kcells], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class SeqRows:
    """One sequence's rows in a tick, in batch order: ``num_rows`` tokens pushed from
    position ``pos``, ``num_outputs`` of them with logits (all of a decode row's, by default)."""

    seq_id: int
    num_rows: int
    pos: int
    num_outputs: int = -1

    @property
    def outputs(self) -> int:
        return self.num_rows if self.num_outputs < 0 else self.num_outputs


def shape_of(rows: Sequence[SeqRows], n_ubatch: int, one_stream: bool) -> TickShape:
    """The shape of a tick that pushes ``rows`` (``one_stream``: a unified KV or one seq)."""
    num_rows = num_outputs = 0
    cells: float = 0  # summed in row order from 0, as sum() did: the same float
    for r in rows:
        n = r.num_rows
        num_rows += n
        num_outputs += r.outputs
        # A row at position p attends to p + 1 cells; the seq's rows are p .. p + n - 1.
        cells += n * (r.pos + (n + 1) / 2)
    return TickShape(count_ubatches(rows, n_ubatch, one_stream), num_rows, num_outputs, cells / 1000)


def count_ubatches(rows: Sequence[SeqRows], n_ubatch: int, one_stream: bool = False) -> int:
    """How many ubatches llama.cpp splits a batch into (``split_simple`` for one stream,
    ``split_equal`` with sequential seq ids for a stream per seq); ``rows`` in batch order,
    each seq's tokens contiguous."""
    total = sum(r.num_rows for r in rows)
    if one_stream or total == 0:
        return -(-total // n_ubatch)
    if total == len(rows) and all(r.num_rows == 1 for r in rows):
        # One row per seq (a decode-only tick), seq ids increasing as the scheduler orders
        # them: each ubatch takes one run of consecutive ids (``split_equal``), so count runs.
        ids = [r.seq_id for r in rows]
        pairs = list(zip(ids, ids[1:], strict=False))
        if all(a < b for a, b in pairs):
            return 1 + sum(1 for a, b in pairs if b != a + 1)
    return split_equal_count(rows, n_ubatch)


def split_equal_count(rows: Sequence[SeqRows], n_ubatch: int) -> int:
    """``count_ubatches`` for a stream per seq, replaying ``split_equal`` step by step."""
    left = {r.seq_id: r.num_rows for r in rows if r.num_rows > 0}
    count = 0
    while left:
        live = list(left)
        chosen = [live[0]]
        for seq in live[1:]:
            if seq == chosen[-1] + 1:
                chosen.append(seq)
        take = min(min(left[s] for s in chosen), max(1, n_ubatch // len(chosen)))
        for seq in chosen:
            left[seq] -= take
            if not left[seq]:
                del left[seq]
        count += 1
    return count


class TickCosts:
    """The online fit of ``ms ≈ coefficients · shape`` (see the module doc). Scheduler thread only.

    NOTE: plain Python floats, not numpy: ``observe`` runs after every decode tick, where the
    numpy version (``np.outer``, a 4 × 4 ``np.linalg.solve`` and their set-up) took a median
    180 µs a tick against 40 µs for this (in the scheduler, right after a ``llama_decode`` has
    pushed their code and data out of the caches; the 2-core machine at load 3-5; 10 and 8 µs
    in a hot loop), i.e. ~1 % of a 2-row decode tick (B1, 2026-12-03). ``solve_small`` is Gaussian elimination with partial pivoting, as LAPACK's ``gesv``: the
    coefficients agree with numpy's to rounding (``tests/unit/engine/test_speculation.py``).
    """

    def __init__(self, prior: tuple[float, float, float, float] = PRIOR_MS, weight: float = PRIOR_WEIGHT) -> None:
        self._prior = tuple(float(p) for p in prior)
        # Prior precision (diagonal): ``weight`` ticks of a typical decode shape (1 ubatch,
        # 4 rows with logits), and for the cells attended as much as ticks attending
        # KCELL_PRIOR_SPAN thousand cells would give.
        self._prior_precision = tuple(weight * d for d in (1.0, 16.0, 16.0, KCELL_PRIOR_SPAN**2))
        self._prior_b = tuple(p * w for p, w in zip(self._prior_precision, self._prior, strict=True))
        self._floor = tuple(FLOOR * p for p in self._prior)
        self._xtx = [[0.0] * 4 for _ in range(4)]
        self._xty = [0.0] * 4
        self._coef: tuple[float, ...] = self._prior
        self.num_observed = 0

    @property
    def per_ubatch(self) -> float:
        return self._coef[0]

    @property
    def per_row(self) -> float:
        return self._coef[1]

    @property
    def per_output(self) -> float:
        return self._coef[2]

    @property
    def per_kcell(self) -> float:
        return self._coef[3]

    def predict(self, shape: TickShape) -> float:
        c = self._coef
        return c[0] * shape.num_ubatches + c[1] * shape.num_rows + c[2] * shape.num_outputs + c[3] * shape.kcells

    def row_ms(self, pos: int) -> float:
        """What one more row with logits at position ``pos`` of a seq costs (in an existing
        ubatch)."""
        return self.per_row + self.per_output + self.per_kcell * (pos + 1) / 1000

    def observe(self, shape: TickShape, ms: float) -> None:
        """A tick of ``shape`` took ``ms``."""
        if shape.num_rows <= 0 or not math.isfinite(ms) or ms <= 0:
            return
        x = (float(shape.num_ubatches), float(shape.num_rows), float(shape.num_outputs), float(shape.kcells))
        predicted = self.predict(shape)
        ms = min(max(ms, predicted / OUTLIER), OUTLIER * predicted)
        xtx, xty = self._xtx, self._xty
        for i in range(4):
            row, xi = xtx[i], x[i]
            for j in range(4):
                row[j] = FORGET * row[j] + xi * x[j]
            xty[i] = FORGET * xty[i] + xi * ms
        a = [list(r) for r in xtx]
        for i in range(4):
            a[i][i] += self._prior_precision[i]
        b = [xty[i] + self._prior_b[i] for i in range(4)]
        self._coef = tuple(max(c, f) for c, f in zip(solve_small(a, b), self._floor, strict=True))
        self.num_observed += 1


def solve_small(a: list[list[float]], b: list[float]) -> list[float]:
    """``a · x = b`` for a small non-singular ``a`` (overwritten, as ``b``): Gaussian
    elimination with partial pivoting, then back substitution."""
    n = len(b)
    for k in range(n):
        p, best = k, abs(a[k][k])
        for i in range(k + 1, n):  # the first largest, as max() picks
            if abs(a[i][k]) > best:
                p, best = i, abs(a[i][k])
        if p != k:
            a[k], a[p] = a[p], a[k]
            b[k], b[p] = b[p], b[k]
        pivot = a[k][k]
        for i in range(k + 1, n):
            f = a[i][k] / pivot
            if f:
                ai, ak = a[i], a[k]
                for j in range(k + 1, n):
                    ai[j] -= f * ak[j]
                b[i] -= f * b[k]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        s = b[i]
        ai = a[i]
        for j in range(i + 1, n):
            s -= ai[j] * x[j]
        x[i] = s / ai[i]
    return x
