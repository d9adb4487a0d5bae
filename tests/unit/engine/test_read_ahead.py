"""Type-ahead's background prefill on the stub backend: the lowest priority, how it makes way,
what it leaves in the session (issue 25). Numbers (replies identical on and off) are the
integration tests' (tests/integration/engine/test_read_ahead.py)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from app.engine.backend import MemoryCaps
from app.engine.cache_hooks import NullCache
from app.engine.errors import InvalidRequest, StickyBusy
from app.engine.events import Done, PrefillProgress
from app.engine.request import Mode
from app.engine.scheduling import read_ahead
from app.engine.validation import check_priority, parse_options
from tests.helpers.stub_backend import StubBackend
from tests.unit.engine.harness import Harness, make, tok

DRAFT = "Tell me everything about the bridges of Lyon, the old ones and the new ones too"


def background(h: Harness, text: str | list[int], sid: str = "c") -> int:
    """Admit a background ``prefill_only`` on session ``sid`` (what ``Model.read_ahead`` posts)."""
    adm = h.admission(text, mode=Mode.PREFILL_ONLY, session_id=sid)
    adm = replace(adm, options=replace(adm.options, priority="background"))
    h.sch.commands.admit(adm)
    return adm.ref


def read_rows(rows: list[list[Any]], seq: int) -> list[int]:
    return [n for kind, s, n in rows if kind == "prefill" and s == seq]


class Counting(NullCache):
    """Records every count the scheduler makes."""

    def __init__(self, policy: Any) -> None:
        super().__init__(policy)
        self.counts: list[str] = []

    def count_miss(self) -> None:
        self.counts.append("miss")

    def count_sticky(self) -> None:
        self.counts.append("sticky")

    def count_live(self) -> None:
        self.counts.append("live")

    def count_prompt(self, num_prompt: int, num_reused: int) -> None:
        self.counts.append(f"prompt {num_prompt} {num_reused}")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """read_ahead's clock, moved by hand."""
    now = SimpleNamespace(t=1000.0)
    monkeypatch.setattr(read_ahead, "time", SimpleNamespace(perf_counter=lambda: now.t))
    return now


def test_a_background_read_fills_the_sessions_seq_and_counts_as_no_request():
    counting: list[Counting] = []

    def cache(config: Any) -> Counting:
        counting.append(Counting(config.cache_policy))
        return counting[0]

    h = make(StubBackend(n_seq_max=2), cache=cache, n_batch=512)
    ref = background(h, "x" * 150)
    rows = h.tick_while(h.sch.is_busy)
    assert read_rows([r for tick in rows for r in tick], 0) == [64, 64, 22]  # CHUNK slices
    done = h.outcome(ref)
    assert isinstance(done, Done) and not done.stats.cancelled
    session = h.sch.pool.sessions["c"]
    assert session.tokens == tok("x" * 150) and session.read_ahead_from == 0
    assert h.stub.kv[0] == tok("x" * 150)
    assert counting[0].counts == []  # no miss, no prompt tokens
    assert not h.sch.finisher.recent_reuse  # no reuse record either
    assert isinstance(h.events[ref][-2], PrefillProgress)


def test_the_real_request_reuses_what_was_read_ahead_and_says_so():
    h = make(StubBackend(n_seq_max=2, script={"?>": "ok"}), n_batch=512)
    h.admit("hello?>", session_id="c", response_tokens=10)
    h.run()
    held = h.sch.pool.sessions["c"].tokens
    background(h, held + tok(DRAFT[:40]))
    h.run()
    assert h.sch.pool.sessions["c"].read_ahead_from == len(held)
    real = h.admit(held + tok(DRAFT + "?>"), session_id="c", response_tokens=10)
    req = h.sch.reqs[0]
    assert req.ref == real and req.cache.hit_kind == "sticky"
    assert req.cache.reuse.tokens_reused == len(held) + 40
    assert req.cache.reuse.tokens_read_ahead == 40
    assert h.tick()[0] == ["prefill", 0, len(DRAFT) - 40 + 2]
    h.run()
    assert "c" in h.sch.pool.sessions and h.sch.pool.sessions["c"].read_ahead_from is None


def test_enter_while_the_draft_is_being_read_ends_the_read_and_keeps_it():
    h = make(StubBackend(n_seq_max=2), n_batch=512)
    ref = background(h, "y" * 200)
    h.tick()  # one 64-token slice read
    real = h.admit("y" * 200 + "?", session_id="c", response_tokens=3)
    done = h.outcome(ref)
    assert isinstance(done, Done) and done.stats.cancelled
    req = h.sch.reqs[0]
    assert req.ref == real and req.cache.reuse.tokens_reused == 64 and req.cache.reuse.tokens_read_ahead == 64
    assert h.tick() == [["prefill", 0, 128]]  # the rest of the prompt, in full chunks
    h.run()
    h.sch.pool.check(h.sch.reqs)


def test_a_newer_draft_replaces_the_older_read_and_an_edit_drops_the_tail():
    h = make(StubBackend(n_seq_max=1), n_batch=512)
    first = background(h, tok(DRAFT))
    h.tick()
    second = background(h, tok(DRAFT[:30] + " and the Saône"))
    assert isinstance(h.outcome(first), Done) and h.outcome(first).stats.cancelled
    req = h.sch.reqs[0]
    assert req.ref == second and len(req.context_tokens) == 30  # the edited tail is dropped
    h.run()
    assert h.stub.kv[0] == tok(DRAFT[:30] + " and the Saône")
    assert h.sch.pool.sessions["c"].read_ahead_from == 0


def test_a_real_prompt_waiting_to_be_read_always_goes_first():
    h = make(StubBackend(n_seq_max=2), n_batch=512)
    ahead = background(h, "z" * 300, sid="typing")
    h.tick()
    other = h.admit("q" * 100, session_id="other", response_tokens=2)
    rows = h.tick_while(lambda: h.sch.reqs.get(1) is not None and h.sch.reqs[1].is_prefilling)
    assert all(read_rows(tick, 0) == [] for tick in rows)  # nothing read ahead meanwhile
    h.run()
    assert isinstance(h.outcome(other), Done) and isinstance(h.outcome(ahead), Done)
    assert h.sch.pool.sessions["typing"].tokens == tok("z" * 300)


def test_next_to_a_streaming_reply_one_small_slice_and_then_its_share_of_time(clock: SimpleNamespace):
    h = make(StubBackend(n_seq_max=2), n_batch=512)
    h.admit("s", response_tokens=200)
    h.tick()  # the reply streams from now on
    background(h, "w" * 100, sid="typing")
    first = h.tick()
    assert read_rows(first, 1) == [read_ahead.SLICE_WHILE_DECODING] and ["decode", 0, 1] in first
    for _ in range(5):  # the clock has not moved: the reply has had no time of its own yet
        assert read_rows(h.tick(), 1) == []
    clock.t += 10.0
    assert read_rows(h.tick(), 1) == [read_ahead.SLICE_WHILE_DECODING]


def test_only_a_tick_of_background_slices_alone_is_a_background_decode(clock: SimpleNamespace):
    """Such a tick runs on the idle cores (``ModelConfig.n_threads_background``); a slice
    next to a streaming reply's decode row runs on the requests' threads."""
    h = make(StubBackend(n_seq_max=2), n_batch=512)
    background(h, "w" * 300, sid="typing")
    h.tick()
    h.admit("s", response_tokens=200)
    for _ in range(3):
        h.tick()
    clock.t += 10.0
    h.run()
    alone = [ops for ops in h.stub.steps if {op.seq_id for op in ops} == {0}]
    beside = [ops for ops in h.stub.steps if {op.seq_id for op in ops} == {0, 1}]
    assert len(alone) >= 2 and beside  # read alone, then next to the reply
    assert h.stub.background_steps == alone


def test_a_real_admission_waiting_for_a_seq_takes_a_background_reads_seq():
    h = make(StubBackend(n_seq_max=1), n_batch=512)
    ahead = background(h, "v" * 300, sid="typing")
    h.tick()
    real = h.admit("another chat", session_id="other", response_tokens=2)
    assert h.outcome(ahead).stats.cancelled  # type: ignore[union-attr]
    assert h.running() == {0: real} and h.pending() == []
    assert "typing" not in h.sch.pool.sessions  # released (an evict save keeps it when the cache is on)
    h.run()
    h.sch.pool.check(h.sch.reqs)


def test_waiting_background_reads_start_after_every_real_admission():
    h = make(StubBackend(n_seq_max=1), n_batch=512)
    busy = h.admit("busy", response_tokens=3)
    ahead = background(h, "typing", sid="t")
    real = h.admit("real")
    assert h.pending() == [ahead, real]
    h.run()
    order = [r for r in h.ended if r in (busy, ahead, real)]
    assert order == [busy, real, ahead]


def test_no_background_read_while_the_session_streams_its_reply():
    h = make(StubBackend(n_seq_max=2), n_batch=512)
    h.admit("hi", session_id="c", response_tokens=50)
    with pytest.raises(StickyBusy):
        background(h, "hi and more", sid="c")
    assert h.pending() == []


def test_a_request_never_waits_for_a_background_donor_of_its_head():
    h = make(StubBackend(n_seq_max=2), n_batch=512)
    head = "h" * 200
    background(h, head + " draft", sid="typing")
    h.tick()  # 64 tokens of the shared head are read
    h.admit(head + " real?", session_id="other", response_tokens=2)
    req = h.sch.reqs[1]
    assert req.share_from is None and len(req.context_tokens) == 64  # copied what is held, now
    h.run()
    h.sch.pool.check(h.sch.reqs)


def test_a_recurrent_models_edited_draft_reads_again_instead_of_cutting():
    stub = StubBackend(n_seq_max=1, memory=MemoryCaps("recurrent", cut_states=False, trim_tail=False))
    h = make(stub, n_batch=512)
    background(h, tok(DRAFT))
    h.run()
    background(h, tok(DRAFT[:20] + " Rhône"))  # the stub fails on a partial seq_rm
    h.run()
    assert h.stub.kv[0] == tok(DRAFT[:20] + " Rhône")
    real = h.admit(tok(DRAFT[:20] + " Rhône?"), session_id="c", response_tokens=2)
    h.run()
    assert isinstance(h.outcome(real), Done)


def test_priority_is_checked():
    options = parse_options({"session_id": "c"}, 0)
    with pytest.raises(InvalidRequest, match="priority"):
        check_priority("urgent", options)
    with pytest.raises(InvalidRequest, match="session_id"):
        check_priority("background", parse_options({}, 0))
    assert check_priority("background", options) == "background"
    assert check_priority("normal", options) == "normal"
