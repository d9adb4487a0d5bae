"""The bridge worker's session bookkeeping, on the fake engine (byte-level tokens)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.conversation.window import Turn
from app.engine.chat import continuation_suffix
from app.engine.errors import EngineError
from app.ui.bridge_records import GenerationRequest, ReadAheadRequest, SessionState, StreamUpdate
from app.ui.engine_bridge import EngineBridge, _BridgeWorker
from tests.helpers.fake_engine import FakeEngine

CONFIG = SimpleNamespace(path="/x/fake.gguf", n_ctx=4096, n_seq_max=4)


@pytest.fixture
def fake(tmp_path):
    engine = FakeEngine(tmp_path)
    model = engine.load_model("fake", CONFIG)
    yield engine, model
    engine.close()


def _tokens(text: str) -> list[int]:
    return list(text.encode())


def _suffix(worker, full, held):
    """What the bridge sends on a held session (app.engine.chat with the bridge's pieces)."""
    return continuation_suffix(full, held.tokens, worker._piece, ended_with_eog=held.ended_with_eog)


def test_suffix_when_the_new_prompt_extends_what_the_session_holds(qapp, fake):
    engine, model = fake
    worker = _BridgeWorker(model, "fake")
    held = SessionState("fake", tuple(_tokens("<u>hi<a>")), tuple(_tokens("hello")), False)
    assert _suffix(worker, _tokens("<u>hi<a>hello<e><u>more<a>"), held) == _tokens(
        "<e><u>more<a>"
    )


def test_suffix_aligned_by_text_when_tokens_differ(qapp, fake):
    engine, model = fake
    worker = _BridgeWorker(model, "fake")
    # The reply "hi" was sampled as one token (0x6869) but re-renders as two bytes; the
    # last sampled token (EOG, 0) closes the turn and appears in the new prompt too.
    held = SessionState("fake", tuple(_tokens("<a>")), (0x6869, 0), True)
    model.detokenize = lambda ids: "".join(
        "hi" if t == 0x6869 else "" if t == 0 else chr(t) for t in ids
    )
    full = _tokens("<a>hi") + [0] + _tokens("<u>next")
    assert _suffix(worker, full, held) == _tokens("<u>next")
    # A different reply text in the history: no safe suffix, the full prompt is sent.
    assert _suffix(worker, _tokens("<a>ho") + [0], held) is None


def test_turns_continue_the_session_and_resume_after_restart(qtbot, fake, tmp_path):
    engine, model = fake
    bridge = EngineBridge(model, "fake")
    updates: list[StreamUpdate] = []
    bridge.update_received.connect(updates.append)

    def turn(rid: str, texts: list[str], session: SessionState | None = None) -> StreamUpdate:
        messages = tuple(
            Turn(f"m{i}", "user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)
        )
        bridge.submit(GenerationRequest(rid, "chat", messages, "sys", (), session))
        qtbot.waitUntil(
            lambda: any(u.request_id == rid and u.done for u in updates), timeout=10_000
        )
        return next(u for u in updates if u.request_id == rid and u.done)

    first = turn("r1", ["hello"])
    reply = "".join(u.text for u in updates if u.request_id == "r1")
    assert first.done.cache_hit_kind == "cold" and first.session is not None
    second = turn("r2", ["hello", reply, "again"])
    assert second.path == "continue_session"
    assert second.done.cache_hit_kind == "continuation"
    bridge.shutdown()
    engine.close()

    # "Restart": a new engine and bridge; the stored session state makes the first turn an
    # exact-prefix restore from the (fake) on-disk cache.
    engine2 = FakeEngine(tmp_path)
    model2 = engine2.load_model("fake", CONFIG)
    bridge2 = EngineBridge(model2, "fake")
    bridge2.update_received.connect(updates.append)
    bridge = bridge2
    reply2 = "".join(u.text for u in updates if u.request_id == "r2")
    third = turn("r3", ["hello", reply, "again", reply2, "third"], second.session)
    assert third.path == "infer"
    assert third.done.cache_hit_kind == "partial"
    assert third.done.cache_read == len(second.session.tokens)
    bridge2.shutdown()
    engine2.close()


def test_an_engine_error_becomes_an_update(qtbot, fake):
    engine, model = fake
    model.fail_next = "decode failed"
    bridge = EngineBridge(model, "fake")
    with qtbot.waitSignal(bridge.update_received, timeout=10_000) as blocker:
        bridge.submit(GenerationRequest("r", "s", (Turn("m0", "user", "x"),), ""))
    assert blocker.args[0].error == "decode failed"
    bridge.shutdown()


def test_each_update_says_when_its_oldest_event_reached_the_bridge(qtbot, fake):
    """``waited_since`` is what ``hearth bench`` B6 measures text-on-screen latency from."""
    import time

    engine, model = fake
    bridge = EngineBridge(model, "fake")
    updates: list[StreamUpdate] = []
    bridge.update_received.connect(lambda u: updates.append((time.perf_counter(), u)))
    before = time.perf_counter()
    bridge.submit(GenerationRequest("r", "s", (Turn("m0", "user", "hello"),), ""))
    qtbot.waitUntil(lambda: any(u.done for _t, u in updates), timeout=10_000)
    texts = [(t, u) for t, u in updates if u.text]
    assert texts
    for received, update in texts:
        assert before <= update.waited_since <= received
    bridge.shutdown()


def test_read_aheads_queued_behind_a_newer_draft_or_the_message_are_dropped_unread(qapp, fake):
    """The GUI notes each ask (and the message) before it is queued: the worker renders and
    reads only the newest draft, and nothing once the message is sent (B11's paste turn had
    its message wait behind queued reads)."""
    engine, model = fake
    worker = _BridgeWorker(model, "fake")
    request = GenerationRequest("", "c", (), "")

    def ask(draft: str, generation: int) -> None:
        worker.note_read("c", generation)
        worker.read_ahead(ReadAheadRequest(request, draft, generation))

    worker.note_read("c", 2)
    worker.read_ahead(ReadAheadRequest(request, "an older draft ", 1))  # gen 2 was asked since
    worker.note_read("c", -1)  # ... and the message sent (EngineBridge.submit)
    worker.read_ahead(ReadAheadRequest(request, "the newest draft ", 2))
    assert [c for c in model.calls if c[0] == "read_ahead"] == []
    ask("the next draft ", 3)  # a word just ended: read to its end, no margin
    assert model.calls[-1] == ("read_ahead", len(_tokens("<|user|>the next draft")))
    ask("the next draft is typ", 4)  # inside a word: two tokens left out (bytes: no merge)
    assert model.calls[-1] == ("read_ahead", len(_tokens("<|user|>the next draft is typ")) - 2)


def test_a_whole_read_takes_the_word_being_typed_too(qapp, fake):
    engine, model = fake
    worker = _BridgeWorker(model, "fake")
    request = GenerationRequest("", "c", (), "")
    worker.note_read("c", 1)
    worker.read_ahead(ReadAheadRequest(request, "the next draft is typ", 1, whole=True))
    assert model.calls[-1] == ("read_ahead", len(_tokens("<|user|>the next draft is typ")))  # not the "<|end|>"


def test_the_message_as_last_read_is_not_rendered_again(qapp, fake):
    """Enter with the draft type-ahead read last: the request's plan and prompt are the read's
    (no template rendered, nothing tokenized on the way to the engine); another message is
    rendered as usual. Either way the engine gets the message's whole prompt."""
    engine, model = fake
    worker = _BridgeWorker(model, "fake")
    renders: list[object] = []
    render = model.apply_chat_template
    model.apply_chat_template = lambda request: renders.append(request) or render(request)
    history = (Turn("u1", "user", "hi"), Turn("a1", "assistant", "hello"))
    worker.note_read("c", 1)
    worker.read_ahead(ReadAheadRequest(GenerationRequest("", "c", history, "be brief"), "and then?", 1, whole=True))
    assert renders
    renders.clear()
    message = GenerationRequest("r1", "c", (*history, Turn("u2", "user", "and then?")), "be brief")
    worker.submit(message)
    assert renders == []
    prompt = _tokens("<|system|>be brief<|end|>\n<|user|>hi<|end|>\n<|assistant|>hello<|end|>\n<|user|>and then?<|end|>\n<|assistant|>")
    assert model.calls[-1] == ("infer", len(prompt))
    streams = [worker._live["r1"].stream]
    worker.note_read("c2", 1)
    worker.read_ahead(ReadAheadRequest(GenerationRequest("", "c2", (), ""), "a draft", 1, whole=True))
    renders.clear()
    worker.submit(GenerationRequest("r2", "c2", (Turn("u3", "user", "a draft, edited"),), ""))
    assert renders
    assert model.calls[-1] == ("infer", len(_tokens("<|user|>a draft, edited<|end|>\n<|assistant|>")))
    streams.append(worker._live["r2"].stream)
    worker.stop()  # cancels both; the fake's threads end before the worker goes
    assert all(stream.done.wait(10) for stream in streams)


def test_a_send_waits_until_the_engine_reads_its_prompt_or_will_not(qtbot, fake):
    """``EngineBridge.submit`` waits (bounded) on an event the worker sets as the engine starts
    reading the prompt (``on_reading``), or once it is clear it will not (refused, ended
    first); none is left behind."""
    import threading

    engine, model = fake
    before = set(threading.enumerate())
    worker = _BridgeWorker(model, "fake")
    read = worker.expect_reading("r1")
    worker.submit(GenerationRequest("r1", "c1", (Turn("m0", "user", "hello"),), ""))
    assert read.is_set()  # the fake engine reads at once
    assert worker._awaited == {}

    # An engine that never says it reads: the request's end (an error here) sets it.
    infer, readings = model.infer, []
    model.infer = lambda tokens, *, on_reading=None, **kw: readings.append(on_reading) or infer(tokens, **kw)
    model.fail_next = "decode failed"
    read = worker.expect_reading("r2")
    worker.submit(GenerationRequest("r2", "c2", (Turn("m0", "user", "hello"),), ""))
    assert readings and readings[0] is not None
    qtbot.waitUntil(read.is_set, timeout=10_000)
    assert worker._awaited == {}

    # Refused before it reaches the engine: set at once.
    model.infer = lambda *a, **kw: (_ for _ in ()).throw(EngineError("the model is unloaded"))
    read = worker.expect_reading("r3")
    worker.submit(GenerationRequest("r3", "c3", (Turn("m0", "user", "hello"),), ""))
    assert read.is_set() and worker._awaited == {}
    for thread in set(threading.enumerate()) - before:  # the fake's streams let go of the worker here
        thread.join(10)


def test_a_send_waits_only_while_the_engine_runs_nothing(qtbot, fake):
    """While another reply streams, the request starts after the tick in flight: the GUI
    thread does not wait for it (it would only stall until the bound)."""
    engine, model = fake
    model.token_delay_s = 0.05  # a slow reply keeps the engine busy
    bridge = EngineBridge(model, "fake")
    asked: list[str] = []
    expect = bridge._worker.expect_reading
    bridge._worker.expect_reading = lambda rid: asked.append(rid) or expect(rid)
    done: list[str] = []
    bridge.update_received.connect(lambda u: u.done and done.append(u.request_id))
    bridge.submit(GenerationRequest("r1", "c1", (Turn("m0", "user", "hello"),), ""))
    qtbot.waitUntil(lambda: model.snapshot().phase == "generating", timeout=10_000)
    bridge.submit(GenerationRequest("r2", "c2", (Turn("m0", "user", "hello"),), ""))
    assert asked == ["r1"]
    qtbot.waitUntil(lambda: sorted(done) == ["r1", "r2"], timeout=30_000)
    bridge.shutdown()
