"""Fault injection (issue 15): a backend that raises in each scheduler phase.

In every phase: each affected request ends with exactly one ``Error``, the others finish
with ``Done``, no seq is lost (``SeqPool.check`` runs after every tick), and the scheduler
keeps serving. Driven directly, without the scheduler thread (``harness``); the thread's own
failures are in ``test_loop.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from app.cache.keys import KeyMeta
from app.cache.store import CacheStore
from app.engine.backend import DecodeOp
from app.engine.cache_hooks import Hit, Miss, NullCache, StoreCache
from app.engine.config import ModelConfig
from app.engine.errors import DecodeFailed, EngineError, GrammarFailed, InvalidRequest
from app.engine.events import Done, Error
from tests.helpers.stub_backend import FaultyBackend
from tests.unit.engine.harness import Harness, make, tok


def assert_serving(h: Harness) -> None:
    """A fresh request runs to Done on whatever seq it gets, and nothing leaked."""
    ref = h.admit("still serving?", response_tokens=3)
    h.run()
    done = h.outcome(ref)
    assert isinstance(done, Done) and done.stats.completion_tokens == 3
    h.sch.pool.check(h.sch.reqs)
    assert h.stub.samplers_alive == 0


def errors(h: Harness, *refs: int) -> list[str]:
    out = []
    for ref in refs:
        end = h.outcome(ref)
        out.append(end.code if isinstance(end, Error) else "done")
    return out


# ---------------------------------------------------------------- admission


def test_a_sampler_that_cannot_be_built_takes_no_seq():
    h = make(FaultyBackend(n_seq_max=2))
    running = h.admit("running", response_tokens=4)
    h.stub.arm("new_sampler", RuntimeError("native allocation failed"))
    with pytest.raises(EngineError) as err:
        h.admit("refused")
    assert err.value.code == "engine_error" and "native allocation failed" in str(err.value)
    assert h.running() == {0: running} and list(h.sch.pool.free) == [1]
    h.stub.arm("new_sampler", GrammarFailed("bad grammar"))  # typed errors stay typed
    with pytest.raises(GrammarFailed):
        h.admit("refused too")
    h.run()
    assert errors(h, running) == ["done"]
    assert_serving(h)


def test_a_seq_that_cannot_be_cleared_at_admission_is_not_lost():
    h = make(FaultyBackend(n_seq_max=2))
    long_ = h.admit("long", response_tokens=8)
    short = h.admit("short", response_tokens=1)
    h.tick()
    h.tick()  # short ends while long runs: seq 1 is cleared and free again
    h.stub.arm("seq_rm", RuntimeError("seq_rm failed"), when=lambda seq, start: seq == 1)
    with pytest.raises(EngineError):
        h.admit("refused")
    assert h.sch.pool.stale == {1} and list(h.sch.pool.free) == [1]
    again = h.admit("again")  # seq 1 again: cleared first (the stub asserts positions)
    assert h.running() == {0: long_, 1: again}
    h.tick()  # its prompt ends beside long's decode row: read first, its first token pushed after
    assert h.stub.kv[1] == [*tok("again"), *h.sch.reqs[1].generated]
    h.run()
    assert errors(h, long_, short, again) == ["done", "done", "done"]
    assert_serving(h)


class RaisingLookup(NullCache):
    """A cache whose lookup raises the raw error a malformed prompt used to raise (#15 item 1)."""

    def lookup(
        self, meta: KeyMeta, prompt: Sequence[int], parent_key: bytes | None, session_id: str | None = None,
        *, min_tokens: int = 2,
    ) -> Hit | Miss:
        raise ValueError("'I' format requires 0 <= number <= 4294967295")


def test_a_raw_error_during_admission_never_leaks_a_seq():
    h = make(FaultyBackend(n_seq_max=2), cache=lambda c: RaisingLookup(c.cache_policy))
    for _ in range(5):  # more than n_seq_max: a leak would leave nothing for the next
        with pytest.raises(EngineError):
            h.admit("bad")
    h.sch.pool.check(h.sch.reqs)
    h.sch.admission._cache = NullCache(ModelConfig(path="stub").cache_policy)
    assert_serving(h)


def test_a_row_that_does_not_load_counts_as_a_miss_not_a_hit(tmp_path, caplog):
    """A real store holds a row for the prompt's head whose bytes the backend cannot load (a
    damaged state): the request goes on cold with the cold reply, and the counters say one
    miss and no hit — the row was found, but nothing of it was used."""
    prompt = "a prompt long enough to be looked up in the cache"
    with CacheStore(tmp_path / "data", ram_file_dir=tmp_path / "shm") as store:

        def hooks(config: ModelConfig) -> StoreCache:
            return StoreCache(store, model_id="m", policy=config.cache_policy, tier="ram", context_size=4096, quant_bits=16)

        h = make(FaultyBackend(n_seq_max=1), cache=hooks, cache_enabled=True)
        meta = h.sch.admission.meta
        assert h.sch.admission._cache.save(meta, tok(prompt)[:-4], b"not,a,state", "cold", 0)
        assert h.sch.admission._cache.store.flush()
        ref, done = h.run_to_done(prompt, response_tokens=3)
        assert "did not load" in caplog.text  # found, tried, failed
        assert done.stats.cache_hit_kind == "cold" and done.stats.reuse.source == "none"
        counters = store.counters()
        assert [counters[k] for k in ("hits_exact", "hits_resume", "hits_longest_prefix", "misses")] == [0, 0, 0, 1]
    cold = make(FaultyBackend(n_seq_max=1))
    cold_ref, _ = cold.run_to_done(prompt, response_tokens=3)
    assert h.token_ids(ref) == cold.token_ids(cold_ref)


def test_a_waiting_admission_that_cannot_start_gets_one_error():
    h = make(FaultyBackend(n_seq_max=1))
    a = h.admit("a", response_tokens=2)
    b = h.admit("b", response_tokens=2)
    c = h.admit("c", response_tokens=2)
    h.stub.arm("new_sampler", RuntimeError("no memory"))  # b's, when it is dispatched
    h.run()
    assert errors(h, a, b, c) == ["done", "engine_error", "done"]
    assert h.ended == [a, b, c]


# ---------------------------------------------------------------- step


def test_an_op_the_backend_refuses_fails_only_its_request():
    h = make(FaultyBackend(n_seq_max=3))
    refs = [h.admit(f"prompt {i}", response_tokens=4) for i in range(3)]
    h.tick()
    bad = InvalidRequest("token id 1000000000 is outside the vocabulary")
    bad.seq_id = 1
    h.stub.arm("sample", bad)
    assert h.tick() == []  # refused before any sampler or KV changed
    assert h.ended == [refs[1]]
    h.run()
    assert errors(h, *refs) == ["done", "invalid_request", "done"]
    assert [h.outcome(r).stats.completion_tokens for r in (refs[0], refs[2])] == [4, 4]
    assert_serving(h)


def test_a_refusal_naming_no_op_fails_the_plan_but_not_who_was_left_out():
    h = make(FaultyBackend(n_seq_max=3), prefill_chunk_size=4)
    streaming = h.admit("x", response_tokens=50)
    h.tick()
    waiting = h.admit("a prompt of several chunks")  # held out of the decode-only tick
    h.stub.arm("sample", RuntimeError("backend bug"))
    h.tick()
    assert errors(h, streaming) == ["engine_error"]
    h.run()
    assert errors(h, waiting) == ["done"]
    assert_serving(h)


def test_a_failed_decode_fails_the_requests_of_its_tick_and_the_engine_goes_on():
    h = make(FaultyBackend(n_seq_max=3), prefill_chunk_size=4)
    a = h.admit("aa", response_tokens=20)
    b = h.admit("bb", response_tokens=20)
    h.tick()
    c = h.admit("a prompt of several chunks")  # not in the next (decode-only) tick
    h.stub.arm("decode", DecodeFailed(1))
    h.tick()
    assert sorted(h.ended) == [a, b]
    h.run()
    assert errors(h, a, b, c) == ["decode_failed", "decode_failed", "done"]
    assert_serving(h)


def test_a_failure_while_a_token_streams_fails_only_that_request():
    h = make(FaultyBackend(n_seq_max=2))
    a = h.admit("a", response_tokens=3)
    b = h.admit("b", response_tokens=3)
    h.tick()

    def broken(token: int) -> None:
        raise RuntimeError("text pipeline bug")

    h.sch.reqs[1].text.push = broken  # type: ignore[method-assign]
    h.run()
    assert errors(h, a, b) == ["done", "engine_error"]
    assert h.ended == [b, a]  # b failed on its first token; the decode still ran for both
    assert_serving(h)


def test_a_raising_event_callback_fails_nothing():
    h = make(FaultyBackend(n_seq_max=1))
    adm = h.admission("a", response_tokens=3)
    calls = []

    def emit(event: object) -> None:
        calls.append(event)
        raise RuntimeError("callback bug")

    h.sch.commands.admit(replace(adm, emit=emit))
    h.run()
    assert isinstance(calls[-1], Done) and calls[-1].stats.completion_tokens == 3
    assert_serving(h)


# ---------------------------------------------------------------- release


def test_a_sampler_that_cannot_be_freed_gives_its_request_one_error():
    h = make(FaultyBackend(n_seq_max=2))
    a = h.admit("a", response_tokens=2)
    b = h.admit("b", response_tokens=5, session_id="s")
    sampler_b = h.sch.reqs[1].sampler
    h.stub.arm("free_sampler", RuntimeError("free failed"), when=lambda s: s is sampler_b)
    h.run()
    assert errors(h, a, b) == ["done", "engine_error"]
    assert "s" not in h.sch.pool.sessions  # an uncertain seq is not pinned to the session
    h.stub.samplers_alive -= 1  # the stub never freed the one that "failed"
    assert_serving(h)


def test_a_seq_that_cannot_be_cleared_at_release_is_quarantined():
    """A failed request's seq is cleared as it is given back (a finished one without a session
    leaves its cells for the next taker, ``SeqPool.leave``); when clearing fails too, the seq
    is quarantined."""
    h = make(FaultyBackend(n_seq_max=1))
    a = h.admit("a", response_tokens=2)
    h.stub.arm("decode", RuntimeError("decode failed"), when=lambda ops: any(isinstance(op, DecodeOp) for op in ops))
    h.stub.arm("seq_rm", RuntimeError("seq_rm failed"))
    h.tick_while(h.sch.is_busy)  # run, but leave the idle clean-up to the test
    assert errors(h, a) == ["engine_error"]
    assert h.sch.pool.stale == {0} and h.stub.kv[0] != []
    h.sch.on_idle()
    assert h.sch.pool.stale == set() and h.stub.kv[0] == []
    assert_serving(h)


class SavingCache(NullCache):
    """A cache that wants a finish save of every request (and keeps nothing)."""

    def wants_finish(self, live: int) -> bool:
        return True

    def save(
        self, meta: KeyMeta, tokens: Sequence[int], payload: bytes | memoryview, reason: str, pack_ns: int,
        session_id: str | None = None,
    ) -> bytes | None:
        return b"k" * 32


def test_a_save_that_fails_is_logged_and_the_request_still_ends_done():
    h = make(FaultyBackend(n_seq_max=1), cache=lambda c: SavingCache(c.cache_policy))
    a = h.admit("a", response_tokens=2)
    h.stub.arm("kv_pack", RuntimeError("pack failed"))
    h.run()
    assert errors(h, a) == ["done"]
    assert h.outcome(a).stats.finish_key is None  # the save was lost, the reply was not
    assert h.stub.raised == ["kv_pack"]
    assert_serving(h)


# ---------------------------------------------------------------- idle clean-up


def test_a_stale_seq_that_cannot_be_cleared_when_idle_is_cleared_before_reuse():
    h = make(FaultyBackend(n_seq_max=2))
    long_ = h.admit("long", response_tokens=6)
    short = h.admit("short", response_tokens=1)
    h.tick()
    sampler_short = h.sch.reqs[1].sampler  # a failed request's seq is cleared as it is given back
    h.stub.arm("free_sampler", RuntimeError("free failed"), when=lambda s: s is sampler_short)
    for _ in range(2):  # at the release, then at the idle clean-up
        h.stub.arm("seq_rm", RuntimeError("seq_rm failed"), when=lambda seq, start: seq == 1)
    h.tick()  # short ends while long runs; clearing its seq fails: quarantined
    assert h.sch.pool.stale == {1}
    h.run()  # ends with the idle clean-up, which fails for seq 1 too
    assert errors(h, long_, short) == ["done", "engine_error"]
    assert h.stub.raised == ["free_sampler", "seq_rm", "seq_rm"] and h.stub.kv[1] != []
    h.sch.pool.check(h.sch.reqs)
    ref = h.admit("again", response_tokens=2)  # the lowest free seq first: 0, then 1
    ref2 = h.admit("again 2", response_tokens=2)
    assert h.running() == {0: ref, 1: ref2}
    h.tick()
    assert h.stub.kv[1] == tok("again 2")  # the stale seq is cleared before its prefill
    h.run()
    assert errors(h, ref, ref2) == ["done", "done"]
