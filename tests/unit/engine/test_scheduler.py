"""The seed's behaviours, one test each, on the deterministic stub backend."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

from app.engine import Engine, ModelConfig
from app.engine.backend import DecodeOp, PrefillOp
from app.engine.errors import (
    Busy,
    ContextOverflow,
    EngineError,
    InvalidGrammar,
    InvalidRequest,
    NBatchTooSmall,
    NoSession,
    StickyBusy,
)
from app.engine.events import (
    Done,
    Error,
    ThinkingDelta,
    ThinkingEnd,
    Token,
    TokenId,
    ToolCallDelta,
    ToolCallEnd,
)
from tests.helpers.stub_backend import StubBackend
from tests.helpers.waiting import wait_until


@pytest.fixture
def make_model(tmp_path):
    engines: list[Engine] = []

    def make(stub: StubBackend | None = None, **cfg: Any):
        stub = stub or StubBackend()
        cfg.setdefault("cache_enabled", False)
        cfg.setdefault("n_seq_max", stub.n_seq_max)
        engine = Engine(tmp_path / f"e{len(engines)}", backend_factory=lambda c: stub)
        engines.append(engine)
        model = engine.load_model("stub", ModelConfig(path="stub", **cfg))
        return model, stub

    yield make
    for e in engines:
        e.close()


def tok(text: str) -> list[int]:
    return [ord(c) for c in text]


def collect(stream) -> list:
    return list(stream)


def test_fifo_done_order_with_one_seq(make_model):
    model, stub = make_model(StubBackend(n_seq_max=1, step_delay=0.001))
    order: list[int] = []
    lock = threading.Lock()

    def on(ref):
        def cb(ev):
            if isinstance(ev, Done):
                with lock:
                    order.append(ref)

        return cb

    # The first request runs until cancelled, so the other three are sure to queue behind it.
    streams = [model.infer(tok("prompt 0"), response_tokens=10_000, on_event=on(0))]
    for i in range(1, 4):
        s = model.infer(tok(f"prompt {i}"), response_tokens=5, on_event=on(i))
        streams.append(s)
    wait_until(lambda: model.snapshot().pending_len == 3, what="three requests queued")
    streams[0].cancel()
    # One seq: each request must wait for the previous one; done order == submit order.
    done_at = []
    for s in streams:
        s.result(timeout=10)
        done_at.append(time.perf_counter())
    refs = [s.ref for s in streams]
    assert refs == sorted(refs)
    # The stub ran them one after another: no step ever mixed two seqs... there is one seq.
    assert all(len(step) == 1 for step in stub.steps)
    assert done_at == sorted(done_at)
    assert order == [0, 1, 2, 3]  # a LIFO dispatch of the waiting three gives [0, 3, 2, 1]


def test_queued_admits_dispatch_when_a_seq_frees(make_model):
    model, stub = make_model(StubBackend(n_seq_max=1, step_delay=0.01))
    first = model.infer(tok("first"), response_tokens=20)
    second = model.infer(tok("second"), response_tokens=3)
    wait_until(lambda: model.snapshot().pending_len == 1, what="the second request queued")
    assert first.result(timeout=10).completion_tokens == 20
    stats = second.result(timeout=10)
    assert stats.completion_tokens == 3
    assert model.snapshot().pending_len == 0


def test_batches_decode_rows_whole_and_slices_prefill(make_model):
    model, stub = make_model(StubBackend(n_seq_max=2, step_delay=0.002), n_batch=8, prefill_chunk_size=4)
    a = model.infer(tok("x"), response_tokens=30)
    wait_until(lambda: model.snapshot().num_tokens_generated, what="a first token")
    b = model.infer(tok("a longer prompt here"), response_tokens=2)
    a.result(timeout=10)
    b.result(timeout=10)
    mixed = [s for s in stub.steps if any(isinstance(o, DecodeOp) for o in s) and any(isinstance(o, PrefillOp) for o in s)]
    assert mixed, "a prefill should have shared ticks with a decoder"
    for step in stub.steps:
        total = sum(len(o.tokens) if isinstance(o, PrefillOp) else 1 for o in step)
        assert total <= 8
        assert all(len(o.tokens) <= 4 for o in step if isinstance(o, PrefillOp))


def test_stop_sequence_across_token_boundaries(make_model):
    stub = StubBackend(script={"Q:": "Hello world. END more text"})
    model, _ = make_model(stub)
    res = model.complete("Q:", response_tokens=50, stop_sequences=["nope", "d. E"])
    assert res.reply == "Hello worl"
    assert res.stop_sequence == "d. E"
    assert res.finish_reason == "stop"
    assert res.stats.stop_sequence == "d. E"
    # The streamed text never shows the held-back part of the match.
    events = collect(model.infer(tok("Q:"), response_tokens=50, stop_sequences=["d. E"]))
    text = "".join(e.text for e in events if isinstance(e, Token))
    assert text == "Hello worl"
    assert isinstance(events[-1], Done) and events[-1].stats.finish_reason == "stop"


def test_first_stop_by_list_order_wins(make_model):
    stub = StubBackend(script={"Q:": "abcdef"})
    model, _ = make_model(stub)
    res = model.complete("Q:", response_tokens=50, stop_sequences=["cdef", "bc"])
    assert res.stop_sequence == "bc"
    assert res.reply == "a"


def test_eog_and_length_finish_reasons(make_model):
    stub = StubBackend(script={"Q:": "hi"})
    model, _ = make_model(stub)
    res = model.complete("Q:", response_tokens=50)
    assert (res.reply, res.finish_reason) == ("hi", "stop")
    res = model.complete("Q:", response_tokens=1)
    assert (res.reply, res.finish_reason) == ("h", "length")
    # context_tokens holds everything in the KV: prompt ++ generated (eog included).
    assert list(res.context_tokens) == tok("Q:") + list(res.generated)


def test_every_token_gets_a_token_id_event(make_model):
    model, _ = make_model(StubBackend(script={"Q:": "ok"}))
    events = collect(model.infer(tok("Q:"), response_tokens=10))
    ids = [e.id for e in events if isinstance(e, TokenId)]
    assert ids == [ord("o"), ord("k"), 0]  # the end-of-generation token too, whose text is empty


def test_cancel(make_model):
    model, stub = make_model(StubBackend(n_seq_max=1, step_delay=0.005))
    s = model.infer(tok("go"), response_tokens=10_000)
    wait_until(lambda: model.snapshot().num_tokens_generated >= 3, what="three tokens")
    s.cancel()
    stats = s.result(timeout=10)
    assert stats.cancelled and stats.finish_reason == "cancelled"
    assert stats.completion_tokens < 10_000
    s.cancel()  # idempotent
    model.cancel(987654)  # unknown ref: ignored
    nxt = model.complete("next", response_tokens=3)
    assert nxt.finish_reason == "length" and len(nxt.generated) == 3


def test_cancel_while_pending(make_model):
    model, _ = make_model(StubBackend(n_seq_max=1, step_delay=0.005))
    busy = model.infer(tok("busy"), response_tokens=200)
    waiting = model.infer(tok("waiting"), response_tokens=5)
    waiting.cancel()
    assert waiting.result(timeout=10).cancelled
    busy.cancel()
    busy.result(timeout=10)


def test_sticky_second_turn_prefills_only_the_suffix(make_model):
    stub = StubBackend(script={"U1>": "r1", "U2>": "r2"})
    model, _ = make_model(stub)
    first = model.complete("sys U1>", response_tokens=10, session_id="c1")
    assert first.cache_hit_kind == "cold"
    stored = list(first.context_tokens)
    before = dict(stub.prefilled)
    suffix = tok(" U2>")
    res = model.infer(stored + suffix, response_tokens=10, session_id="c1")
    stats = res.result(timeout=10)
    assert stats.cache_hit_kind == "sticky"
    assert stats.cache_delta.read == len(stored)
    seq = next(iter(s for s in stub.prefilled if stub.prefilled[s] != before.get(s, 0)))
    assert stub.prefilled[seq] - before.get(seq, 0) == len(suffix)


def test_sticky_equal_prompt_reprefills_last_token(make_model):
    stub = StubBackend(script={"U1>": "r1"})
    model, _ = make_model(stub)
    first = model.complete("U1>", response_tokens=1, session_id="s")
    again = model.infer(list(first.context_tokens), response_tokens=1, session_id="s").result(timeout=10)
    assert again.cache_hit_kind == "sticky"
    assert again.prompt_tokens == len(first.context_tokens)


def test_diverging_prompt_frees_the_seq(make_model):
    stub = StubBackend(n_seq_max=1, script={"U1>": "r1"})
    model, _ = make_model(stub)
    model.complete("hello U1>", response_tokens=10, session_id="c1")
    assert model.snapshot().slots[0].state == "pinned"
    res = model.infer(tok("something else entirely"), response_tokens=2, session_id="c1").result(timeout=10)
    assert res.cache_hit_kind == "cold"
    assert stub.prefilled[0] >= len("hello U1>") + len("something else entirely")


def test_sticky_busy(make_model):
    model, _ = make_model(StubBackend(step_delay=0.005))
    s = model.infer(tok("long"), response_tokens=500, session_id="c1")
    with pytest.raises(StickyBusy) as err:
        model.infer(tok("long more"), response_tokens=5, session_id="c1")
    assert err.value.code == "sticky_busy"
    with pytest.raises(StickyBusy):
        model.continue_session(tok(" more"), session_id="c1")
    s.cancel()
    s.result(timeout=10)


def test_continue_session(make_model):
    stub = StubBackend(script={"U1>": "r1", "U2>": "r2"})
    model, _ = make_model(stub)
    with pytest.raises(NoSession) as err:
        model.continue_session(tok("x"), session_id="nobody")
    assert err.value.code == "no_session"
    first = model.complete("U1>", response_tokens=10, session_id="c")
    stream = model.continue_session(tok(" U2>"), session_id="c", response_tokens=10)
    events = collect(stream)
    done = events[-1]
    assert isinstance(done, Done)
    assert done.stats.cache_hit_kind == "continuation"
    assert done.stats.cache_delta.read == len(first.context_tokens)
    assert "".join(e.text for e in events if isinstance(e, Token)) == "r2"


def test_end_session_is_idempotent_and_frees_the_seq(make_model):
    model, _ = make_model(StubBackend(n_seq_max=1))
    model.complete("hi", response_tokens=2, session_id="c")
    assert model.snapshot().slots[0].state == "pinned"
    model.end_session("c")
    model.end_session("c")
    model.end_session("never-existed")
    assert model.snapshot().slots[0].state == "free"
    with pytest.raises(NoSession):
        model.continue_session(tok("x"), session_id="c")


def test_lru_idle_session_released_when_all_seqs_pinned(make_model):
    model, _ = make_model(StubBackend(n_seq_max=2))
    model.complete("one", response_tokens=2, session_id="a")
    model.complete("two", response_tokens=2, session_id="b")
    assert {s.state for s in model.snapshot().slots} == {"pinned"}
    res = model.complete("three", response_tokens=2)  # would starve without the release
    assert res.finish_reason == "length"
    owners = {s.session_id for s in model.snapshot().slots if s.state == "pinned"}
    assert owners == {"b"}  # "a" was the least recently used


THINK_TEMPLATE = "{% if thinking %}<think>{% endif %}"


def test_thinking_with_opt_in(make_model):
    stub = StubBackend(script={"Q:": "<think>abc</think>Answer"}, chat_template=THINK_TEMPLATE)
    model, _ = make_model(stub)
    events = collect(model.infer(tok("Q:"), response_tokens=100, thinking="enabled"))
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    ends = [e for e in events if isinstance(e, ThinkingEnd)]
    text = "".join(e.text for e in events if isinstance(e, Token))
    assert thinking == "abc"
    assert len(ends) == 1 and ends[0].signature == b""
    assert text == "Answer"
    # ThinkingEnd comes before any visible text.
    assert events.index(ends[0]) < next(i for i, e in enumerate(events) if isinstance(e, Token))


def test_thinking_signature_with_key(make_model):
    import hashlib
    import hmac

    stub = StubBackend(script={"Q:": "<think>abc</think>A"}, chat_template=THINK_TEMPLATE)
    model, _ = make_model(stub, thinking_signing_key=b"k")
    events = collect(model.infer(tok("Q:"), response_tokens=100, thinking="enabled"))
    end = next(e for e in events if isinstance(e, ThinkingEnd))
    assert end.signature == hmac.new(b"k", b"abc", hashlib.sha256).digest()


def test_thinking_without_opt_in_is_an_error(make_model):
    stub = StubBackend(script={"Q:": "<think>abc</think>Answer"}, chat_template=THINK_TEMPLATE)
    model, _ = make_model(stub)
    events = collect(model.infer(tok("Q:"), response_tokens=100))
    assert isinstance(events[-1], Error) and events[-1].code == "invalid_request"
    assert not any(isinstance(e, ThinkingDelta) for e in events)
    assert model.complete("hello", response_tokens=2).finish_reason == "length"  # still serving


def test_thinking_budget_closes_the_span_early(make_model):
    stub = StubBackend(script={"Q:": "<think>abcdef</think>X"}, chat_template=THINK_TEMPLATE)
    model, _ = make_model(stub)
    events = collect(model.infer(tok("Q:"), response_tokens=100, thinking="enabled", thinking_budget_tokens=2))
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    assert thinking == "ab"
    assert sum(isinstance(e, ThinkingEnd) for e in events) == 1
    text = "".join(e.text for e in events if isinstance(e, Token))
    assert text.startswith("cdef")  # the rest is routed to the normal pipeline


def test_tool_call_span(make_model):
    payload = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    stub = StubBackend(
        script={"Q:": f"Sure.<tool_call>{payload}</tool_call>"},
        chat_template="{{ '<tool_call>' }}",
    )
    model, _ = make_model(stub)
    events = collect(model.infer(tok("Q:"), response_tokens=200))
    deltas = "".join(e.text for e in events if isinstance(e, ToolCallDelta))
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert len(ends) == 1 and ends[0].full == deltas == payload
    assert "".join(e.text for e in events if isinstance(e, Token)) == "Sure."
    # Syntax tokens were sampled greedily, payload strings with the request's sampler.
    greedy_flags = [o.greedy for s in stub.steps for o in s if isinstance(o, DecodeOp)]
    assert any(greedy_flags) and not all(greedy_flags)
    # Tokens chosen greedily were still fed to the request's own chain (penalty history).
    assert len(stub.samplers[-1].accepted) == sum(greedy_flags)


def test_verify_refused_while_busy(make_model):
    model, stub = make_model(StubBackend(step_delay=0.005))
    accepted, nxt = model.verify(tok("ab"), [stub.next_token(tok("ab"))], 1)
    assert accepted == 1
    s = model.infer(tok("busy"), response_tokens=500)
    with pytest.raises(Busy) as err:
        model.verify(tok("ab"), [1, 2], 2)
    assert err.value.code == "busy"
    s.cancel()
    s.result(timeout=10)


def test_n_batch_too_small(make_model, tmp_path):
    stub = StubBackend(n_seq_max=4)
    engine = Engine(tmp_path / "nb", backend_factory=lambda c: stub)
    with pytest.raises(NBatchTooSmall) as err:
        engine.load_model("m", ModelConfig(path="stub", n_seq_max=4, n_batch=2, cache_enabled=False))
    assert err.value.code == "n_batch_too_small"
    engine.close()


def test_n_batch_too_small_at_tick_fails_instead_of_stalling(make_model):
    model, stub = make_model(StubBackend(n_seq_max=3, step_delay=0.002), n_batch=3)
    streams = [model.infer(tok(f"p{i}"), response_tokens=300) for i in range(3)]
    wait_until(lambda: sum(s.state == "generating" for s in model.snapshot().slots) == 3, what="three decoders")
    # three decoders now outnumber the budget (the config is frozen: the scheduler gets a new one)
    model.scheduler.config = dataclasses.replace(model.scheduler.config, n_batch=2)
    results = []
    for s in streams:
        try:
            s.result(timeout=10)
            results.append("ok")
        except EngineError as exc:
            results.append(exc.code)
    assert "n_batch_too_small" in results


def test_context_overflow_and_engine_keeps_serving(make_model):
    model, _ = make_model(n_ctx=32)
    with pytest.raises(ContextOverflow) as err:
        model.infer(tok("x" * 40))
    assert err.value.code == "context_overflow"
    res = model.complete("short", response_tokens=100)
    assert res.finish_reason == "length" and len(res.context_tokens) == 32


def test_bad_grammar_and_bad_options(make_model):
    model, stub = make_model()
    with pytest.raises(InvalidGrammar, match="does not parse") as err:
        model.infer(tok("x"), grammar="not a grammar")
    assert err.value.code == "invalid_request"
    with pytest.raises(InvalidRequest):
        model.infer(tok("x"), temperature=-1)
    with pytest.raises(InvalidRequest):
        model.infer(tok("x"), no_such_option=1)
    with pytest.raises(InvalidRequest):
        model.infer([])
    assert model.complete("ok", response_tokens=2).finish_reason == "length"
    assert stub.samplers_alive == 0  # every sampler freed


def test_status_and_model_info(make_model):
    model, _ = make_model(StubBackend(n_seq_max=2, step_delay=0.005))
    assert model.status() == "idle"
    s = model.infer(tok("go"), response_tokens=500)
    wait_until(lambda: model.status() == "generating", what="status generating")
    info = model.model_info()
    assert info.n_seq_max == 2 and info.available_seqs == 1 and info.backend == "stub"
    s.cancel()
    s.result(timeout=10)
    wait_until(lambda: model.status() == "idle", what="status idle after the cancel")
    assert model.model_info().last_cache_hit.kind == "cold"


def test_eight_concurrent_streams_match_solo_runs(make_model):
    model, _ = make_model(StubBackend(n_seq_max=8), n_batch=64)
    prompts = [tok(f"prompt number {i}") for i in range(8)]
    solo = [list(model.complete(model.detokenize(p), response_tokens=12).generated) for p in prompts]
    streams = [model.infer(p, response_tokens=12) for p in prompts]
    together = [[e.id for e in s if isinstance(e, TokenId)] for s in streams]
    assert together == solo


def test_unloaded_model_refuses_instead_of_crashing(tmp_path):
    from app.engine.errors import NotFound

    engine = Engine(tmp_path / "u", backend_factory=lambda c: StubBackend())
    model = engine.load_model("m", ModelConfig(path="stub", cache_enabled=False))
    engine.close()
    for call in (lambda: model.tokenize("x"), lambda: model.detokenize([65]),
                 lambda: model.apply_chat_template({"messages": []})):
        with pytest.raises(NotFound):
            call()
    with pytest.raises(EngineError):
        model.infer(tok("x"))


def test_ignore_eos_keeps_generating(make_model):
    model, _ = make_model(StubBackend(script={"Q:": "hi"}))
    assert len(model.complete("Q:", response_tokens=10).generated) == 3  # "h", "i", end
    res = model.complete("Q:", response_tokens=10, ignore_eos=True)
    assert len(res.generated) == 10 and res.finish_reason == "length"


HEAD = "You are a careful assistant. Answer briefly and kindly. "  # > SHARE_MIN_TOKENS chars


def test_requests_starting_together_share_the_prompt_head(make_model):
    model, stub = make_model(StubBackend(n_seq_max=3, step_delay=0.002), n_batch=64, prefill_chunk_size=16)
    prompts = [tok(HEAD + q) for q in ("Q1?", "Question two?", "3?")]
    solo = [list(model.complete(model.detokenize(p), response_tokens=6).generated) for p in prompts]
    stub.prefilled.clear()
    streams = [model.infer(p, response_tokens=6) for p in prompts]
    events = [list(s) for s in streams]
    stats = [ev[-1].stats for ev in events]
    assert stats[0].cache_hit_kind == "cold"
    assert [s.cache_hit_kind for s in stats[1:]] == ["partial", "partial"]
    assert [s.cache_delta.read for s in stats[1:]] == [len(HEAD) + 1, len(HEAD)]  # "Q" is shared too
    # Only the first seq prefilled the head; the others prefilled what follows it.
    assert sum(stub.prefilled.values()) == len(prompts[0]) + sum(
        len(p) - s.cache_delta.read for p, s in zip(prompts[1:], stats[1:], strict=True)
    )
    assert [[e.id for e in ev if isinstance(e, TokenId)] for ev in events] == solo


def test_an_idle_session_shares_its_head_with_a_new_conversation(make_model):
    model, stub = make_model(StubBackend(n_seq_max=2))
    model.complete(HEAD + "first chat", response_tokens=3, session_id="a")
    stub.prefilled.clear()
    res = model.complete(HEAD + "second chat", response_tokens=3)
    assert (res.cache_hit_kind, res.cache_delta.read) == ("partial", len(HEAD))
    assert sum(stub.prefilled.values()) == len("second chat")
    assert model.snapshot().slots[0].state == "pinned"  # the donor session keeps its KV


def test_share_falls_back_to_a_full_prefill_when_the_donor_goes_away(make_model):
    model, stub = make_model(StubBackend(n_seq_max=2, step_delay=0.005), n_batch=8, prefill_chunk_size=4)
    donor = model.infer(tok(HEAD + "donor"), response_tokens=50)
    waiter = model.infer(tok(HEAD + "waiter"), response_tokens=3)
    donor.cancel()
    assert donor.result(timeout=10).cancelled
    stats = waiter.result(timeout=10)
    assert stats.completion_tokens == 3
    assert stats.cache_hit_kind in ("partial", "cold")  # shared if the donor got far enough


def test_no_head_sharing_across_an_adapter_change(make_model, tmp_path):
    model, _ = make_model(StubBackend(n_seq_max=3, step_delay=0.003), n_batch=64)
    lora = tmp_path / "adapter.gguf"
    lora.write_bytes(b"GGUF stub adapter")
    donor = model.infer(tok(HEAD + "donor"), response_tokens=300)
    assert model.infer(tok(HEAD + "same weights"), response_tokens=2).result(timeout=10).cache_hit_kind == "partial"
    model.load_adapter(str(lora))  # the donor's KV was computed with the old weights
    after = model.infer(tok(HEAD + "new weights"), response_tokens=2).result(timeout=10)
    assert (after.cache_hit_kind, after.cache_delta.read) == ("cold", 0)
    donor.cancel()
    donor.result(timeout=10)


def test_a_token_streams_before_the_decode_that_pushes_it(make_model):
    model, stub = make_model(StubBackend(step_delay=0.002))
    seen: list[tuple[int, int]] = []  # (ticks decoded when the token arrived, ticks started)

    def on(ev):
        if isinstance(ev, TokenId):
            seen.append((stub.decoded_ticks, len(stub.steps)))

    model.infer(tok("Q:"), response_tokens=5, on_event=on).result(timeout=10)
    assert len(seen) == 5
    # Each token arrives while the tick that sampled it is still decoding.
    assert all(decoded == started - 1 for decoded, started in seen)


def test_one_prefill_per_tick_shortest_first(make_model):
    model, stub = make_model(StubBackend(n_seq_max=3, step_delay=0.002), n_batch=64, prefill_chunk_size=8)
    streaming = model.infer(tok("x"), response_tokens=60)
    wait_until(lambda: model.snapshot().num_tokens_generated, what="a first token")
    first_tick = len(stub.steps)
    long_ = model.infer(tok("a long prompt that takes several chunks to prefill"), response_tokens=2)
    wait_until(lambda: any(isinstance(o, PrefillOp) for s in stub.steps[first_tick:] for o in s),
               what="the long prompt's first chunk")  # fmt: skip
    short = model.infer(tok("hi?"), response_tokens=2)
    long_.result(timeout=10)
    short.result(timeout=10)
    streaming.cancel()
    streaming.result(timeout=10)
    prefills = [[o for o in step if isinstance(o, PrefillOp)] for step in stub.steps[first_tick:]]
    assert all(len(p) <= 1 for p in prefills), "one prefilling request per tick while replies stream"
    long_seq = next(p for p in prefills if p)[0].seq_id
    short_ticks = [i for i, p in enumerate(prefills) if p and p[0].seq_id != long_seq]
    long_ticks = [i for i, p in enumerate(prefills) if p and p[0].seq_id == long_seq]
    # The short prompt went in one tick, ahead of the long prompt's remaining chunks.
    assert len(short_ticks) == 1 and short_ticks[0] < long_ticks[-1]


def test_every_prefill_in_every_tick_like_the_seed(make_model):
    model, stub = make_model(
        StubBackend(n_seq_max=3, step_delay=0.002), n_batch=64, prefill_chunk_size=4, prefill_seqs_per_tick=None
    )
    first = model.infer(tok("a first prompt of several chunks"), response_tokens=2)
    second = model.infer(tok("second prompt"), response_tokens=2)
    first.result(timeout=10)
    second.result(timeout=10)
    assert max(sum(isinstance(o, PrefillOp) for o in step) for step in stub.steps) == 2


def test_prefill_seqs_per_tick_must_be_positive():
    with pytest.raises(ValueError, match="prefill_seqs_per_tick"):
        ModelConfig(path="m.gguf", prefill_seqs_per_tick=0)


def _back_to_back_prefills_while_decoding(steps) -> int:
    has_prefill = [any(isinstance(o, PrefillOp) for o in s) for s in steps]
    has_decode = [any(isinstance(o, DecodeOp) for o in s) for s in steps]
    return sum(1 for i in range(1, len(steps)) if has_prefill[i - 1] and has_prefill[i] and has_decode[i])


@pytest.mark.parametrize("gap", [1, 0])
def test_a_decode_tick_between_prefill_ticks_while_streaming(make_model, gap):
    model, stub = make_model(
        StubBackend(n_seq_max=4, step_delay=0.002), n_batch=64, prefill_chunk_size=4, decode_ticks_between_prefills=gap
    )
    streaming = model.infer(tok("x"), response_tokens=40)
    wait_until(lambda: model.snapshot().num_tokens_generated, what="a first token")
    prompts = [model.infer(tok(f"prompt number {i}"), response_tokens=2) for i in range(2)]
    for s in [streaming, *prompts]:
        s.result(timeout=10)
    if gap:
        assert _back_to_back_prefills_while_decoding(stub.steps) == 0
    else:
        assert _back_to_back_prefills_while_decoding(stub.steps) > 0


def test_prefills_run_back_to_back_when_nothing_streams(make_model):
    model, stub = make_model(StubBackend(step_delay=0.002), n_batch=64, prefill_chunk_size=4)
    model.complete("a prompt of several chunks", response_tokens=1)
    prefill_ticks = [i for i, s in enumerate(stub.steps) if any(isinstance(o, PrefillOp) for o in s)]
    assert prefill_ticks == list(range(len(prefill_ticks)))  # no decode-only ticks between chunks


def test_decode_ticks_between_prefills_must_not_be_negative():
    with pytest.raises(ValueError, match="decode_ticks_between_prefills"):
        ModelConfig(path="m.gguf", decode_ticks_between_prefills=-1)


def test_a_request_can_share_the_head_of_one_that_is_itself_waiting_to_share(make_model):
    model, stub = make_model(StubBackend(n_seq_max=3, step_delay=0.002), n_batch=64, prefill_chunk_size=16)
    prompts = [tok(HEAD + q) for q in ("Why?", "How do I bake bread?", "How do I sort a list?")]
    streams = [model.infer(p, response_tokens=3) for p in prompts]
    stats = [s.result(timeout=10) for s in streams]
    assert [s.cache_hit_kind for s in stats] == ["cold", "partial", "partial"]
    # The third shares the second's longer head ("...How do I "), not just the first's.
    assert stats[2].cache_delta.read == len(HEAD + "How do I ")


def test_a_seq_released_while_others_run_keeps_its_cells_for_the_next_request(make_model):
    """A session-less request leaves its cells in its free seq (``SeqPool.leave``); the next
    request on that seq whose prompt extends them prefills only its new tokens, with the cache
    on (one KV stream per seq: the cells left behind never reorder another seq's). A prompt
    that shares less than a conversation's worth (``SHARE_MIN_TOKENS``) starts cold."""
    model, stub = make_model(StubBackend(n_seq_max=2, step_delay=0.002), cache_enabled=True)
    long_ = model.infer(tok("long"), response_tokens=40)
    short = model.complete(HEAD + "short", response_tokens=2)
    assert not long_.done and len(short.generated) == 2
    held = tok(HEAD + "short") + list(short.generated)
    assert stub.kv[1] == held
    stub.prefilled.clear()
    follow = model.complete(model.detokenize([*held, *tok(" more")]), response_tokens=2)
    assert (follow.cache_hit_kind, follow.cache_delta.read) == ("partial", len(held))
    assert follow.stats.reuse.source == "live" and follow.stats.reuse.origin_session is None
    assert stub.prefilled[1] == len(" more")
    other = model.complete("unrelated", response_tokens=2)  # shares nothing: the cells are cleared first
    assert other.cache_hit_kind == "cold" and len(other.generated) == 2
    long_.cancel()
    long_.result(timeout=10)


def test_a_stale_seq_is_cleared_before_it_is_reused(make_model):
    model, stub = make_model(StubBackend(n_seq_max=2, step_delay=0.002))
    long_ = model.infer(tok("long"), response_tokens=60)
    model.complete("first", response_tokens=2)
    # The stub asserts every op's position against what the seq holds: a reused seq that
    # still held "first..." would fail here.
    again = model.complete("second", response_tokens=2)
    assert len(again.generated) == 2 and again.finish_reason == "length"
    long_.cancel()
    long_.result(timeout=10)


def test_a_burst_at_an_idle_engine_is_prefilled_in_one_tick(make_model):
    model, stub = make_model(StubBackend(n_seq_max=4, step_delay=0.002), n_batch=64)
    gate = threading.Event()
    model.scheduler.loop.post(gate.wait)  # hold the scheduler while the four calls queue up
    streams: list = [None] * 4

    def send(i: int) -> None:
        streams[i] = model.infer(tok(f"prompt {i}"), response_tokens=3)

    senders = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    for t in senders:
        t.start()
    wait_until(lambda: model.scheduler.loop.inbox.qsize() == 4, what="four calls queued")
    gate.set()
    for t in senders:
        t.join(timeout=10)
    for s in streams:
        s.result(timeout=10)
    first = stub.steps[0]
    assert sorted(o.seq_id for o in first if isinstance(o, PrefillOp)) == [0, 1, 2, 3]
    # ...so the four replies decode in the same ticks
    assert max(sum(isinstance(o, DecodeOp) for o in step) for step in stub.steps) == 4


def test_a_short_prompt_is_not_held_behind_a_long_one_when_nothing_streams(make_model):
    model, stub = make_model(StubBackend(n_seq_max=2, step_delay=0.002), n_batch=64, prefill_chunk_size=8)
    long_ = model.infer(tok("a long prompt that takes several chunks to prefill"), response_tokens=1)
    wait_until(lambda: stub.steps, what="the long prompt's first tick")
    short = model.complete("hi?", response_tokens=1)
    long_.result(timeout=10)
    prefills = [[o for o in step if isinstance(o, PrefillOp)] for step in stub.steps]
    short_tick = next(i for i, p in enumerate(prefills) if any(o.tokens == tuple(tok("hi?")) for o in p))
    assert len(prefills[short_tick]) == 1  # alone, not next to the long prompt's chunk
    assert len(short.generated) == 1
