"""Admission and the tick, called directly on the stub backend: exact seq ids and orders.

No thread, no polling: each test admits, ticks and reads the request table, the pending
queue and the ops the backend saw (``[kind, seq_id, n_tokens]`` per op).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.engine.cache_hooks import NullCache
from app.engine.errors import ContextOverflow, NoSession, StickyBusy
from app.engine.events import Done, Error, PrefillProgress, TokenId
from app.engine.scheduling.admission import AdmissionPath
from app.engine.scheduling.shares import SHARE_MIN_TOKENS
from tests.helpers.stub_backend import FaultyBackend, StubBackend
from tests.unit.engine.harness import make, tok

HEAD = "You are a careful assistant. Answer briefly and kindly. "
assert len(HEAD) > SHARE_MIN_TOKENS


def test_admission_fills_seqs_in_order_then_queues():
    h = make(StubBackend(n_seq_max=2))
    refs = [h.admit(f"prompt {i}") for i in range(4)]
    assert h.running() == {0: refs[0], 1: refs[1]}
    assert h.pending() == refs[2:]
    assert h.events[refs[0]] == [PrefillProgress(0, len("prompt 0"))]
    assert h.events[refs[2]] == []  # nothing until it gets a seq


def test_a_burst_is_prefilled_in_one_tick_then_decodes_together():
    h = make(StubBackend(n_seq_max=3))
    h.admit("aaaa")
    h.admit("bb")
    h.admit("cccccc")
    assert h.tick() == [["prefill", 0, 4], ["prefill", 1, 2], ["prefill", 2, 6]]
    assert h.tick() == [["decode", 0, 1], ["decode", 1, 1], ["decode", 2, 1]]


def test_a_burst_of_follow_ups_deep_in_long_chats_goes_one_at_a_time_shortest_first():
    # Each turn fits one tick, but attending to 2,000 cells makes co-batching them cost more
    # than a chunk of a fresh prompt: the shorter turn is not held behind the longer one.
    h = make(StubBackend(n_seq_max=2), n_batch=512, n_ctx=4096)
    for name in "ab":
        h.admit(name * 2000, session_id=name, response_tokens=1)
    h.run()
    held = {name: h.sch.pool.sessions[name] for name in "ab"}
    longer = " a longer follow-up turn, with a pasted log line or two" * 2
    h.admit(held["a"].tokens + tok(longer), session_id="a")
    h.admit(held["b"].tokens + tok(" short"), session_id="b")
    assert h.tick() == [["prefill", held["b"].seq_id, len(" short")]]
    assert [op[0] for op in h.tick()] == ["decode"]  # b's first token, then a's turn
    assert ["prefill", held["a"].seq_id, len(longer)] in h.tick()


def test_pending_admissions_start_first_in_first_out():
    h = make(StubBackend(n_seq_max=1))
    refs = [h.admit(f"prompt {i}", response_tokens=2) for i in range(4)]
    assert h.pending() == refs[1:]
    h.run()
    assert h.ended == refs  # a LIFO dispatch ends them 1, 4, 3, 2
    assert all(isinstance(h.outcome(r), Done) for r in refs)


def test_a_request_finishes_and_the_next_starts_in_the_same_tick():
    h = make(StubBackend(n_seq_max=1))
    a = h.admit("ab", response_tokens=1)
    b = h.admit("cd", response_tokens=1)
    assert h.tick() == [["prefill", 0, 2]]
    assert h.tick() == [["decode", 0, 1]]  # a's one token: a ends, b gets seq 0
    assert h.ended == [a]
    assert h.running() == {0: b}
    assert h.tick() == [["prefill", 0, 2]]
    assert h.stub.kv[0] == tok("cd")  # seq 0 was cleared for b (nothing else ran)


def test_while_streaming_one_prefill_per_tick_shortest_first_with_a_decode_tick_between():
    h = make(StubBackend(n_seq_max=3), prefill_chunk_size=8)
    s = h.admit("x", response_tokens=100)
    assert h.tick() == [["prefill", 0, 1]]
    assert h.tick() == [["decode", 0, 1]]
    h.admit("a" * 20)  # seq 1: three chunks
    h.admit("hi?")  # seq 2: one slice, so it goes first
    ticks = [h.tick() for _ in range(8)]
    # A prompt that ends beside decode rows is read first, and its first decode row joins
    # theirs in the same tick (``Scheduler._read_first``).
    assert ticks == [
        [["decode", 0, 1], ["prefill", 2, 3], ["decode", 2, 1]],
        [["decode", 0, 1], ["decode", 2, 1]],  # a decode-only tick after a prefill tick
        [["decode", 0, 1], ["decode", 2, 1], ["prefill", 1, 8]],
        [["decode", 0, 1], ["decode", 2, 1]],
        [["decode", 0, 1], ["decode", 2, 1], ["prefill", 1, 8]],  # "hi?" has its 5 tokens and ends
        [["decode", 0, 1]],
        [["decode", 0, 1], ["prefill", 1, 4], ["decode", 1, 1]],
        [["decode", 0, 1], ["decode", 1, 1]],
    ]
    assert h.running()[0] == s


def test_the_seed_rule_prefills_everyone_every_tick():
    h = make(StubBackend(n_seq_max=3), prefill_chunk_size=4, prefill_seqs_per_tick=None)
    h.admit("x", response_tokens=100)
    h.tick()
    h.tick()
    h.admit("a" * 6)
    h.admit("b" * 6)
    assert h.tick() == [["decode", 0, 1], ["prefill", 1, 4], ["prefill", 2, 4]]


def test_cancel_ends_a_running_request_now_and_its_seq_goes_to_the_next():
    h = make(StubBackend(n_seq_max=1))
    a = h.admit("a", response_tokens=100)
    b = h.admit("b", response_tokens=1)
    h.tick()
    h.tick()
    h.sch.commands.cancel(a)
    assert h.ended == [a]
    done = h.outcome(a)
    assert isinstance(done, Done) and done.stats.cancelled and done.stats.completion_tokens == 1
    assert h.running() == {0: b}
    h.sch.commands.cancel(a)  # idempotent
    h.sch.commands.cancel(12345)  # unknown: ignored
    assert h.ended == [a]


def test_cancel_of_a_waiting_admission_ends_it_without_running():
    h = make(StubBackend(n_seq_max=1))
    a = h.admit("a", response_tokens=100)
    b = h.admit("b")
    h.sch.commands.cancel(b)
    assert h.pending() == [] and h.ended == [b]
    assert h.outcome(b).stats.cancelled
    assert h.running() == {0: a}


def test_sticky_turn_prefills_only_its_suffix_on_the_sessions_seq():
    h = make(StubBackend(n_seq_max=2, script={"U1>": "r1"}))
    h.admit("other", response_tokens=100)  # seq 0 stays busy
    h.admit("U1>", session_id="c", response_tokens=10)
    h.tick_while(lambda: h.sch.pool.session("c") is None)
    stored = h.sch.pool.sessions["c"].tokens
    assert (h.sch.pool.sessions["c"].seq_id, stored) == (1, tok("U1>r1") + [0])
    b = h.admit(stored + tok(" U2>"), session_id="c")
    assert h.running()[1] == b and "c" not in h.sch.pool.sessions
    assert h.sch.reqs[1].cache.hit_kind == "sticky"
    assert ["prefill", 1, len(" U2>")] in h.tick()


def test_a_session_admission_routes_by_what_its_seq_holds():
    h = make(StubBackend(n_seq_max=2, script={"U1>": "r1"}))
    h.admit("U1>", session_id="c", response_tokens=10)
    h.run()
    stored = h.sch.pool.sessions["c"].tokens
    _, route = h.sch.admission._route(h.admission(stored + [65], session_id="c"))
    assert route is not None and route.path is AdmissionPath.STICKY
    adm = replace(h.admission([], session_id="c"), continue_suffix=tuple(tok("!")))
    adm, route = h.sch.admission._route(adm)
    assert route is not None and (route.path, route.seq_id) == (AdmissionPath.CONTINUE, 0)
    assert adm.prompt == tuple(stored + tok("!"))


def test_a_diverging_prompt_frees_the_sessions_seq_and_starts_anew():
    h = make(StubBackend(n_seq_max=1, script={"U1>": "r1"}))
    h.admit("hello U1>", session_id="c", response_tokens=10)
    h.run()
    b = h.admit("something else", session_id="c")
    assert h.running() == {0: b} and h.sch.reqs[0].cache.hit_kind == "cold"
    assert h.tick() == [["prefill", 0, len("something else")]]


def test_session_errors():
    h = make(StubBackend(n_seq_max=2), n_ctx=16)
    h.admit("long", session_id="c", response_tokens=100)
    with pytest.raises(StickyBusy):
        h.admit("long more", session_id="c")
    adm = replace(h.admission([], session_id="nobody"), continue_suffix=tuple(tok("x")))
    with pytest.raises(NoSession):
        h.sch.commands.admit(adm)
    with pytest.raises(ContextOverflow):
        h.admit("x" * 16)
    assert h.running() == {0: 1} and h.pending() == []  # no seq taken by the refusals


def test_the_least_recently_used_idle_session_gives_its_seq_up():
    h = make(StubBackend(n_seq_max=2))
    h.admit("one", session_id="a", response_tokens=1)
    h.run()
    h.admit("two", session_id="b", response_tokens=1)
    h.run()
    assert {s: v.seq_id for s, v in h.sch.pool.sessions.items()} == {"a": 0, "b": 1}
    c = h.admit("three")
    assert h.running() == {0: c}
    assert list(h.sch.pool.sessions) == ["b"]


def test_a_waiting_request_takes_the_shared_head_once_the_donor_holds_it():
    h = make(StubBackend(n_seq_max=2), prefill_chunk_size=16)
    a = h.admit(HEAD + "A?")
    b = h.admit(HEAD + "B?")
    assert h.sch.reqs[1].share_from == (a, len(HEAD))
    rows = h.tick_while(lambda: h.sch.reqs[1].share_from is not None)
    # Only the donor prefills: its 58 tokens in chunks of 16, then b shares the head.
    assert rows == [[["prefill", 0, 16]]] * 3 + [[["prefill", 0, 10]]]
    assert h.stub.kv[1] == tok(HEAD)  # shared, not prefilled
    assert h.tick() == [["decode", 0, 1]]  # a streams now: a decode-only tick first
    assert h.tick() == [["decode", 0, 1], ["prefill", 1, 2], ["decode", 1, 1]]  # then b prefills "B?" only
    h.run()
    assert h.outcome(b).stats.cache_delta.read == len(HEAD)


def test_a_waiter_whose_donor_is_cancelled_prefills_its_whole_prompt():
    h = make(StubBackend(n_seq_max=2), prefill_chunk_size=16)
    a = h.admit(HEAD + "A?")
    b = h.admit(HEAD + "B?")
    h.tick()  # the donor holds 16 tokens, less than the head
    h.sch.commands.cancel(a)
    req = h.sch.reqs[1]
    assert req.share_from is None and req.cache.hit_kind == "cold"
    assert req.prefill_cursor == tok(HEAD + "B?")
    h.run()
    assert isinstance(h.outcome(b), Done)


def test_a_prompt_ending_beside_decode_rows_is_read_first_and_its_first_token_streams_before_their_decode():
    """``Scheduler._read_first``: the prompt's last slice goes in a decode of its own, its
    first token is sampled and streamed, then one decode pushes it with the running rows."""
    h = make(StubBackend(n_seq_max=2))
    a = h.admit("x", response_tokens=30)
    h.tick()
    h.tick()  # a streams
    b = h.admit("hello", response_tokens=3)
    seen: list[int] = []
    emit = h.sch.reqs[1].emit

    def spy(event: Any) -> None:
        if isinstance(event, TokenId):
            seen.append(h.stub.decoded_ticks)
        emit(event)

    h.sch.reqs[1].emit = spy
    before = h.stub.decoded_ticks
    assert h.tick() == [["decode", 0, 1], ["prefill", 1, 5], ["decode", 1, 1]]
    assert h.stub.decoded_ticks == before + 2
    assert seen == [before + 1]  # after its prompt's decode, before the running rows'
    assert h.stub.kv[1] == [*tok("hello"), *h.sch.reqs[1].generated]
    assert h.stub.kv[0] == h.sch.reqs[0].context_tokens
    assert h.tick() == [["decode", 0, 1], ["decode", 1, 1]]  # the next tick decodes both
    h.run()
    assert isinstance(h.outcome(a), Done) and isinstance(h.outcome(b), Done)
    assert len(h.sch.reqs) == 0


def test_without_read_first_a_tick_is_one_decode_as_the_seeds():
    h = make(StubBackend(n_seq_max=2), read_first=False)
    h.admit("x", response_tokens=30)
    h.tick()
    h.tick()
    h.admit("hello", response_tokens=3)
    before = h.stub.decoded_ticks
    assert h.tick() == [["decode", 0, 1], ["prefill", 1, 5]]
    assert h.stub.decoded_ticks == before + 1
    assert h.stub.kv[1] == tok("hello")
    h.run()


def test_a_failed_read_first_fails_only_its_request_and_the_stream_runs_on():
    h = make(FaultyBackend(n_seq_max=2))
    a = h.admit("x", response_tokens=8)
    h.tick()
    h.tick()
    b = h.admit("hello", response_tokens=3)
    h.stub.arm("decode", RuntimeError("llama_decode failed"), when=lambda ops: any(op.seq_id == 1 for op in ops))
    h.tick()
    assert isinstance(h.outcome(b), Error)
    h.run()
    assert isinstance(h.outcome(a), Done) and sum(isinstance(e, TokenId) for e in h.events[a]) == 8


def test_every_token_streams_before_the_decode_that_pushes_it():
    h = make(StubBackend(script={"Q:": "ok"}))
    seen = []
    ref = h.admit("Q:", response_tokens=10)
    emit = h.sch.reqs[0].emit

    def spy(event):
        if isinstance(event, TokenId):
            seen.append((event.id, h.stub.decoded_ticks, len(h.stub.steps)))
        emit(event)

    h.sch.reqs[0].emit = spy
    h.run()
    assert [s[0] for s in seen] == [ord("o"), ord("k"), 0]
    assert all(decoded == started - 1 for _, decoded, started in seen)
    assert isinstance(h.outcome(ref), Done)



def test_seqs_are_taken_lowest_first_and_decode_rows_are_in_seq_order():
    """With one KV stream per seq, llama.cpp puts only consecutive, increasing seq ids in one
    ubatch: after requests end in any order, the next ones still get seqs 0, 1, 2, … and a
    tick's decode rows are in seq order."""
    h = make(StubBackend(n_seq_max=3))
    h.admit("aa", response_tokens=3)
    h.admit("bb", response_tokens=1)
    h.admit("cc", response_tokens=2)
    h.run()  # they end on seq 1, then 2, then 0 (a FIFO pool hands them out in that order)
    later = [h.admit(p, response_tokens=6) for p in ("dd", "ee", "ff")]
    assert h.running() == {0: later[0], 1: later[1], 2: later[2]}
    h.tick()
    assert h.tick() == [["decode", 0, 1], ["decode", 1, 1], ["decode", 2, 1]]
    h.sch.commands.cancel(later[1])  # seq 1 frees while 0 and 2 run on
    again = h.admit("gg", response_tokens=6)
    assert h.running()[1] == again
    h.tick()  # its prefill
    rows = [row for row in h.tick() if row[0] == "decode"]
    assert [seq for _kind, seq, _n in rows] == [0, 1, 2]  # not in admission order (0, 2, 1)


class HoldRecorder(NullCache):
    """Records what the scheduler tells the cache writer (``hold_writes``)."""

    def __init__(self, policy: Any) -> None:
        super().__init__(policy)
        self.holds: list[bool] = []

    def hold_writes(self, on: bool) -> None:
        self.holds.append(on)


def test_the_writer_is_held_from_admission_to_the_first_token_only():
    """Queued saves wait while a request waits for its first token (issue 24: on two cores
    the writer took a core from the next turn's prefill); from its first token on, and for
    a second request that joins a running decode until its own first token, then not."""
    rec: HoldRecorder | None = None

    def cache(config: Any) -> HoldRecorder:
        nonlocal rec
        rec = HoldRecorder(config.cache_policy)
        return rec

    h = make(StubBackend(n_seq_max=2), cache=cache)
    assert rec is not None
    a = h.admit("a long enough prompt", response_tokens=6)
    h.tick()  # prefill
    assert rec.holds == [True]
    h.tick()  # samples a's first token, streams it, decodes it
    assert rec.holds == [True, False]
    b = h.admit("another prompt", response_tokens=3)
    h.tick()  # b's prompt ends beside a's decode row: read first, then b's first token
    assert rec.holds == [True, False, True, False]
    h.run()
    assert rec.holds == [True, False, True, False]
    assert [type(e) for e in h.events[a]][-1] is Done and [type(e) for e in h.events[b]][-1] is Done


class ArrivalRecorder(NullCache):
    """Records both holders the cache writer hears from, in order."""

    def __init__(self, policy: Any) -> None:
        super().__init__(policy)
        self.calls: list[tuple[str, bool]] = []

    def hold_writes(self, on: bool) -> None:
        self.calls.append(("waiting", on))

    def hold_writes_arriving(self, on: bool) -> None:
        self.calls.append(("arriving", on))


def test_the_writer_is_held_while_a_request_is_on_its_way_with_no_gap_before_its_admission_holds_it():
    """A server preparing a request (``Model.arriving``) and an ``infer`` waiting for its
    admission hold the cache's writes; the admitted request's own hold starts before the
    arrival's ends (issue 24, B9: a held save written in between took a core from the
    prefill about to start)."""
    rec: ArrivalRecorder | None = None

    def cache(config: Any) -> ArrivalRecorder:
        nonlocal rec
        rec = ArrivalRecorder(config.cache_policy)
        return rec

    h = make(StubBackend(n_seq_max=2), cache=cache)
    assert rec is not None
    arrivals = h.sch.arrivals
    with arrivals.arriving():  # the server renders the prompt
        assert rec.calls == [("arriving", True)]
        with arrivals.arriving():  # Model.infer posts its admission: nested, nothing new
            h.admit("a long enough prompt", response_tokens=3)
            assert rec.calls == [("arriving", True), ("waiting", True)]
        assert arrivals.num == 1
    assert rec.calls == [("arriving", True), ("waiting", True), ("arriving", False)]
    h.run()
    assert rec.calls[-1] == ("waiting", False)
