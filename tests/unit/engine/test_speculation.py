"""Speculative decoding on the stub backend: the drafter, the acceptance rule, the cost model's
arithmetic, and the scheduler's state machine around drafts (nothing numeric: the stub's
"model" is a script, and exactness on real logits is tests/integration/engine)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from app.engine.backend import MemoryCaps
from app.engine.cache_hooks import NullCache
from app.engine.events import Done
from app.engine.speculation import lookup
from app.engine.speculation.lookup import (
    DECAY_IDLE,
    NgramDrafter,
    SeqSpec,
    verify,
)
from app.engine.speculation.tick_costs import (
    SeqRows,
    TickCosts,
    TickShape,
    count_ubatches,
    shape_of,
    split_equal_count,
)
from tests.helpers.stub_backend import StubBackend
from tests.unit.engine.harness import Harness, make, tok

TEXT = "the quick brown fox jumps over the lazy dog, then naps in the warm sun all afternoon"
PROMPT = f"Text: {TEXT}. Repeat: "


def copier(**kw: Any) -> StubBackend:
    """A "model" that repeats ``TEXT`` after "Repeat: " (its prompt holds the text too)."""
    return StubBackend(script={"Repeat: ": TEXT}, **kw)


def harness(stub: StubBackend, **cfg: Any) -> Harness:
    """A scheduler on the stub whose cost model keeps its priors: the stub's ticks take no
    time worth fitting, and what gets drafted must not depend on this machine's load."""
    h = make(stub, **cfg)
    h.sch.speculator.costs.observe = lambda shape, ms: None  # type: ignore[method-assign]
    return h


def run(h: Harness, prompt: str = PROMPT, **opts: Any) -> tuple[int, Done]:
    return h.run_to_done(prompt, **opts)


def ids(h: Harness, ref: int) -> list[int]:
    return h.token_ids(ref)


# ------------------------------------------------------------------ the drafter


def test_the_drafter_proposes_what_followed_the_latest_earlier_occurrence():
    d = NgramDrafter()
    d.sync([1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 1, 2, 3])
    assert d.propose(3) == (5, 6, 7)  # the latest earlier [1, 2, 3] is followed by 5 6 7
    d.sync([1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 1, 2, 3, 5])
    assert d.propose(10) == (6, 7, 1, 2, 3, 5)  # runs up to the end of the context


def test_the_drafter_prefers_the_longest_matched_suffix():
    d = NgramDrafter()
    d.sync([7, 2, 3, 8, 1, 2, 3, 9, 1, 2, 3])
    assert d.propose(1) == (9,)  # [1, 2, 3] matched, not the later-ending [2, 3] -> 9 only by luck
    d = NgramDrafter()
    d.sync([1, 2, 3, 4, 0, 2, 3, 5, 1, 2, 3])
    assert d.propose(1) == (4,)  # [1, 2, 3] -> 4 wins over [2, 3] -> 5, the more recent one


def test_the_drafter_proposes_nothing_without_a_match():
    d = NgramDrafter()
    d.sync([1, 2, 3, 4, 5])
    assert d.propose(4) == ()
    d.sync([1, 2, 3, 4, 5, 1])
    assert d.propose(4) == ()  # one token is no match


def test_a_long_context_is_looked_up_in_its_last_window_only(monkeypatch):
    monkeypatch.setattr(lookup, "LOOKUP_WINDOW", 10)
    d = NgramDrafter()
    d.sync([1, 2, 3, 4, *range(100, 120), 1, 2, 3])
    assert d.propose(2) == ()  # [1, 2, 3] -> 4 is 20 tokens back
    d = NgramDrafter()
    d.sync([*range(100, 120), 1, 2, 3, 4, 5, 1, 2, 3])
    assert d.propose(2) == (4, 5)
    d.sync([*range(100, 120), 1, 2, 3, 4, 5, 1, 2, 3, 4, 9, 9])
    assert d.propose(2) == ()  # [4, 9, 9]: new; the window only grows from here


# ------------------------------------------------------------------ the acceptance rule


def test_verify_accepts_the_longest_agreeing_prefix_and_samples_after_it():
    model = [5, 6, 9, 1]  # what each row samples
    assert verify((5, 6, 7), lambda i: model[i]) == ((5, 6), 9)
    assert verify((4,), lambda i: model[i]) == ((), 5)
    assert verify((), lambda i: model[i]) == ((), 5)
    assert verify((5, 6, 9), lambda i: model[i]) == ((5, 6, 9), 1)


def test_verify_samples_each_row_once_in_order():
    seen: list[int] = []

    def sample(i: int) -> int:
        seen.append(i)
        return [3, 4, 0][i]

    verify((3, 4, 5, 6), sample)
    assert seen == [0, 1, 2]  # one draw per generated token: none after the rejection


# ------------------------------------------------------------------ the cost model


def test_ubatches_follow_llama_cpps_equal_split():
    rows = [SeqRows(0, 1, 10), SeqRows(1, 1, 10), SeqRows(2, 1, 10)]
    assert count_ubatches(rows, 512) == 1
    assert count_ubatches([SeqRows(0, 5, 10), *rows[1:]], 512) == 2  # seq 0's drafts go alone
    assert count_ubatches([SeqRows(0, 4, 10), SeqRows(1, 4, 10), rows[2]], 512) == 2  # shared
    assert count_ubatches([SeqRows(0, 3, 0), rows[1], SeqRows(3, 3, 0)], 512) == 3  # 1 then 3 not consecutive
    assert count_ubatches([SeqRows(0, 1, 0), SeqRows(2, 1, 0)], 512) == 2  # a gap in the seq ids
    assert count_ubatches([SeqRows(0, 9, 0)], 4) == 3
    assert count_ubatches([SeqRows(0, 9, 0), SeqRows(1, 3, 0)], 4, one_stream=True) == 3


def test_a_decode_only_tick_counts_the_ubatches_split_equal_makes():
    # One row per seq in increasing seq ids (the scheduler's decode-only tick) is counted
    # without replaying the split; the count is the replay's, gaps and all.
    rng = np.random.default_rng(5)
    for _ in range(500):
        ids = sorted(rng.choice(16, size=int(rng.integers(1, 9)), replace=False).tolist())
        rows = [SeqRows(s, 1, int(rng.integers(0, 900))) for s in ids]
        assert count_ubatches(rows, int(rng.choice([1, 2, 512]))) == split_equal_count(rows, 512), ids
    assert count_ubatches([SeqRows(0, 1, 0), SeqRows(1, 1, 0), SeqRows(3, 1, 0), SeqRows(4, 1, 0)], 512) == 2
    assert count_ubatches([SeqRows(2, 1, 0), SeqRows(0, 1, 0), SeqRows(1, 1, 0)], 512) == 2  # not increasing: replayed


def test_the_cost_fit_recovers_a_machines_coefficients():
    costs = TickCosts()
    rng = np.random.default_rng(0)
    truth = np.array([1.0, 5.0, 1.5, 2.0])  # one thread: a cheap ubatch, an expensive row
    for i in range(300):
        prefill = [SeqRows(9, int(rng.integers(20, 128)), int(rng.integers(0, 500)), 1)] if i % 5 == 0 else []
        rows = [SeqRows(s, int(rng.integers(1, 9)), int(rng.integers(0, 1500))) for s in range(int(rng.integers(1, 4)))]
        shape = shape_of(rows + prefill, 512, False)
        costs.observe(shape, float(truth @ shape.features()) * rng.uniform(0.95, 1.05))
    assert costs.per_ubatch < 2.5  # far below the 2-thread prior of 6 ms
    assert costs.per_row + costs.per_output == pytest.approx(6.5, rel=0.1)
    assert costs.per_kcell == pytest.approx(2.0, rel=0.15)


def test_stalled_ticks_do_not_make_a_draft_row_cost_a_whole_tick():
    # A loaded 2-core machine: the quiet shape (6 ms a ubatch, 4.1 ms a row with logits: a
    # row at position 300 costs 0.47 of a one-row tick), every tick slowed 1-3x by other
    # processes and stalled 5-20x with a chance that grows with its length (3 % per 10 ms);
    # one seq's decode ticks of 1-17 rows at positions 150-400. With stalls counted at up to
    # 3x their prediction, from above only, the fitted ratio reached 0.84 and 0.99 in these
    # runs (a draft row as dear as a tick: copies stopped drafting).
    truth = np.array([6.0, 3.3, 0.8, 3.8])
    for seed in range(4):
        costs = TickCosts()
        rng = np.random.default_rng(seed)
        for i in range(400):
            rows = int(rng.integers(1, 18)) if i % 3 == 0 else 1
            shape = shape_of([SeqRows(0, rows, int(rng.integers(150, 400)))], 512, False)
            ms = float(truth @ shape.features())
            load = rng.uniform(1, 3) * (rng.uniform(5, 20) if rng.random() < 0.03 * ms / 10 else 1)
            costs.observe(shape, ms * load)
        one_row = costs.predict(shape_of([SeqRows(0, 1, 300)], 512, False))
        assert costs.row_ms(301) < 0.7 * one_row, seed


def test_the_cost_fit_is_the_least_squares_numpy_solves():
    # The fit runs in plain floats (per tick, numpy's set-up cost more than the arithmetic);
    # the same recursive least squares written with numpy, side by side over noisy ticks
    # (clamped outliers included), gives the same coefficients to rounding.
    from app.engine.speculation import tick_costs as tc

    costs = TickCosts()
    rng = np.random.default_rng(3)
    prior = np.array(tc.PRIOR_MS)
    precision = tc.PRIOR_WEIGHT * np.diag([1.0, 16.0, 16.0, tc.KCELL_PRIOR_SPAN**2])
    xtx, xty, coef = np.zeros((4, 4)), np.zeros(4), prior.copy()
    for _ in range(400):
        rows = [SeqRows(s, int(rng.integers(1, 9)), int(rng.integers(0, 3000))) for s in range(int(rng.integers(1, 5)))]
        shape = shape_of(rows, 512, False)
        ms = float(rng.uniform(3, 90))
        x = shape.features()
        predicted = float(coef @ x)
        clamped = min(max(ms, predicted / tc.OUTLIER), tc.OUTLIER * predicted)
        xtx = tc.FORGET * xtx + np.outer(x, x)
        xty = tc.FORGET * xty + x * clamped
        coef = np.maximum(np.linalg.solve(xtx + precision, xty + precision @ prior), tc.FLOOR * prior)
        costs.observe(shape, ms)
        fitted = [costs.per_ubatch, costs.per_row, costs.per_output, costs.per_kcell]
        assert fitted == pytest.approx(list(coef), rel=1e-9)
        assert costs.predict(shape) == pytest.approx(float(coef @ x), rel=1e-9)


def test_the_cost_fit_ignores_empty_and_broken_ticks():
    costs = TickCosts()
    before = (costs.per_ubatch, costs.per_row, costs.per_kcell)
    costs.observe(TickShape(0, 0, 0, 0.0), 5.0)
    costs.observe(TickShape(1, 1, 1, 0.1), float("nan"))
    assert (costs.per_ubatch, costs.per_row, costs.per_kcell) == before


# ------------------------------------------------------------------ acceptance evidence


def test_a_sequence_whose_drafts_fail_stops_drafting_and_tries_again_later():
    spec = SeqSpec()
    for _ in range(5):
        spec.record(1, 0)
    low = spec.acceptance
    assert low < 0.2
    for _ in range(40):
        spec.idle()
    assert low < spec.acceptance < 0.5  # back towards the prior, not past it
    assert DECAY_IDLE < 1


def test_a_copy_in_progress_is_expected_to_go_on_and_a_fresh_guess_is_not():
    spec = SeqSpec()
    for _ in range(4):  # three guesses that fail, then a copy that runs 8 tokens and misses
        for _ in range(3):
            spec.record(2, 0)
        for _ in range(2):
            spec.record(4, 4)
        assert spec.in_run and spec.continuation > 0.8
        spec.record(4, 0)
        assert not spec.in_run
    assert spec.acceptance < 0.5 < 0.8 < spec.continuation  # 1 guess in 4 and 7 in 8 (decayed, and the priors)
    spec.record(1, 1)
    assert spec.acceptance == spec.continuation  # an accepted draft: the next one continues it
    spec.pause()  # a tick without a draft: the next one is a fresh guess again
    assert spec.acceptance < 0.6 < spec.continuation


def test_prefill_ticks_are_not_fitted_as_draft_rows():
    h = harness(StubBackend())
    fitted: list[TickShape] = []
    h.sch.speculator.costs.observe = lambda shape, ms: fitted.append(shape)  # type: ignore[method-assign]
    h.run_to_done("a prompt long enough to prefill in a tick of its own", response_tokens=4)
    assert fitted and all(shape.num_rows == shape.num_outputs for shape in fitted)  # decode rows only


# ------------------------------------------------------------------ the scheduler with drafts


def test_a_reply_that_repeats_its_prompt_takes_fewer_ticks_and_the_same_tokens():
    on, off = harness(copier()), harness(copier(), speculative=False)
    ref_on, done_on = run(on, response_tokens=200)
    ref_off, done_off = run(off, response_tokens=200)
    assert on.text(ref_on) == off.text(ref_off) == TEXT
    assert ids(on, ref_on) == ids(off, ref_off)
    assert done_on.stats.completion_tokens == done_off.stats.completion_tokens == len(TEXT) + 1
    assert done_on.stats.accepted_tokens > len(TEXT) // 2
    assert done_on.stats.drafted_tokens >= done_on.stats.accepted_tokens
    assert done_off.stats.drafted_tokens == done_off.stats.accepted_tokens == 0
    assert len(on.sampled) < len(off.sampled) // 2
    drafted_ops = [op for ops in on.sampled for op in ops if getattr(op, "drafted", ())]
    assert drafted_ops  # the verify rows really ran


def test_a_request_can_turn_speculation_off_and_set_its_draft_length():
    h = harness(copier())
    _, done = run(h, response_tokens=200, speculative=False)
    assert done.stats.drafted_tokens == 0
    _, done = run(h, response_tokens=200, draft_max=2)
    assert done.stats.drafted_tokens > 0
    assert max(op.draft_max for ops in h.sampled for op in ops if hasattr(op, "draft_max")) <= 2


@pytest.mark.parametrize("stop", ["lazy", "y dog", "e"])
def test_a_stop_string_inside_an_accepted_draft_cuts_there(stop):
    on, off = harness(copier()), harness(copier(), speculative=False)
    ref_on, done_on = run(on, response_tokens=200, stop_sequences=[stop], session_id="s")
    ref_off, done_off = run(off, response_tokens=200, stop_sequences=[stop], session_id="s")
    assert on.text(ref_on) == off.text(ref_off) == TEXT[: TEXT.index(stop)]
    assert ids(on, ref_on) == ids(off, ref_off)
    assert done_on.stats.committed_tokens == done_off.stats.committed_tokens
    # The pinned session's seq holds exactly its tokens: no draft cell is left behind.
    session = on.sch.pool.sessions["s"]
    assert on.stub.kv[session.seq_id] == session.tokens


@pytest.mark.parametrize("limit", [1, 7, 30])
def test_the_length_limit_inside_an_accepted_draft_cuts_there(limit):
    on, off = harness(copier()), harness(copier(), speculative=False)
    ref_on, done_on = run(on, response_tokens=limit, session_id="s")
    ref_off, _ = run(off, response_tokens=limit, session_id="s")
    assert ids(on, ref_on) == ids(off, ref_off)
    assert len(ids(on, ref_on)) == limit and done_on.stats.finish_reason == "length"
    session = on.sch.pool.sessions["s"]
    assert on.stub.kv[session.seq_id] == session.tokens


def test_the_context_limit_inside_an_accepted_draft_cuts_there():
    n_ctx = len(PROMPT) + 12
    on, off = harness(copier(), n_ctx=n_ctx), harness(copier(), n_ctx=n_ctx, speculative=False)
    ref_on, done_on = run(on, response_tokens=200)
    ref_off, done_off = run(off, response_tokens=200)
    assert ids(on, ref_on) == ids(off, ref_off)
    assert done_on.stats.context_full and done_off.stats.context_full


def test_a_cancel_with_drafts_pending_leaves_the_seq_holding_only_its_tokens():
    h = harness(copier())
    ref = h.admit(PROMPT, response_tokens=200, session_id="s")
    while not h.sch.reqs[0].drafted:
        h.tick()
    h.sch.commands.cancel(ref)
    done = h.outcome(ref)
    assert isinstance(done, Done) and done.stats.cancelled
    session = h.sch.pool.sessions["s"]
    assert h.stub.kv[session.seq_id] == session.tokens == tok(PROMPT) + ids(h, ref)
    # The next turn continues the session from exactly there.
    follow = session.tokens + tok(" Again: ")
    run(h, follow, response_tokens=3, session_id="s")


class Saves(NullCache):
    """Records every save's tokens and the stub's packed payload (the tokens it held)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.saved: list[tuple[str, list[int], list[int]]] = []

    def save(self, meta: Any, tokens: Any, payload: Any, reason: Any, pack_ns: int, session_id: Any = None) -> bytes:
        held = [int(t) for t in bytes(payload).decode().split(",") if t]
        self.saved.append((reason, list(tokens), held))
        return bytes(32)

    def wants_continued(self, live: int, last_saved: int) -> bool:
        return live - last_saved >= 8

    def wants_finish(self, live: int) -> bool:
        return True


def test_every_save_holds_only_accepted_tokens():
    hooks: list[Saves] = []

    def cache(config: Any) -> Saves:
        hooks.append(Saves(config.cache_policy))
        return hooks[-1]

    h = harness(copier(), cache=cache)
    ref = h.admit(PROMPT, response_tokens=200, session_id="s")
    for _ in range(6):
        h.tick()
    h.sch.commands.save_in_flight("evict")  # between ticks, drafts pending
    h.run()
    saves = hooks[0].saved
    assert {r for r, _, _ in saves} >= {"continued", "evict", "finish"}
    for reason, tokens, held in saves:
        assert held == tokens, f"a {reason} save holds other cells than its key's tokens"
    assert h.text(ref) == TEXT
    assert isinstance(h.outcome(ref), Done) and h.outcome(ref).stats.accepted_tokens > 0


def test_drafts_that_never_pay_stop_being_drafted():
    # The stub's free text (no script) repeats little, so lookups rarely match and mostly fail.
    h = harness(StubBackend())
    _, done = run(h, "abcabcabc", response_tokens=400, ignore_eos=True)
    assert done.stats.drafted_tokens < 400 // 5
    assert done.stats.accepted_tokens <= done.stats.drafted_tokens


def test_a_model_with_speculation_off_drafts_only_for_requests_that_ask():
    h = harness(copier(), speculative=False)
    _, done = run(h, response_tokens=50)
    assert done.stats.drafted_tokens == 0
    assert all(not getattr(op, "draft_max", 0) for ops in h.sampled for op in ops)
    assert not h.sch.speculator.enabled
    _, done = run(h, response_tokens=200, speculative=True)
    assert done.stats.drafted_tokens > 0


@pytest.mark.parametrize("memory", [
    MemoryCaps("recurrent", cut_states=False, trim_tail=False),
    MemoryCaps("hybrid", cut_states=False, trim_tail=False),
    MemoryCaps("sliding_window", cut_states=False, trim_tail=True, n_swa=16),
], ids=lambda m: m.kind)  # fmt: skip
def test_memory_that_cannot_drop_a_tail_exactly_never_drafts(memory):
    h = harness(copier(memory=memory))
    assert not h.sch.speculator.enabled and not h.sch.snapshot.speculative
    _, done = run(h, response_tokens=200, speculative=True)
    assert done.stats.drafted_tokens == 0
    assert h.text(h.ended[-1]) == TEXT


def test_several_sequences_draft_only_where_it_pays_and_all_match_solo_runs():
    solo = []
    for i in range(3):
        h = harness(copier(), speculative=False)
        ref, _ = run(h, PROMPT if i != 1 else "x" * 20, response_tokens=60, ignore_eos=True)
        solo.append(ids(h, ref))
    h = harness(copier())
    refs = [h.admit(PROMPT if i != 1 else "x" * 20, response_tokens=60, ignore_eos=True) for i in range(3)]
    h.run()
    assert [ids(h, r) for r in refs] == solo
    snap_counts = h.sch.speculator.num_drafted, h.sch.speculator.num_accepted
    assert snap_counts[1] <= snap_counts[0]
