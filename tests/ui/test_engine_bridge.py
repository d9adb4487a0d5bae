"""The bridge as a thread and a coalescer, on the fake engine (byte-level tokens): turns that
continue their session, errors and reads as updates, and the send's bounded wait."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.conversation.requests import GenerationRequest, ReadAheadRequest
from app.conversation.state import SessionState
from app.conversation.window import Turn
from app.engine.errors import EngineError
from app.ui import gui_affinity
from app.ui.bridge_records import ReadAheadUpdate, StreamUpdate
from app.ui.engine_bridge import EngineBridge
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


def test_a_draft_is_read_ahead_through_the_bridge_and_reports_its_progress(qtbot, fake):
    """What is read is ``app.conversation.turns``' to say (tests/unit/conversation/test_turns.py);
    the bridge reads it and reports how far, and says why when nothing is read."""
    engine, model = fake
    bridge = EngineBridge(model, "fake")
    updates: list[ReadAheadUpdate] = []
    bridge.read_ahead_received.connect(updates.append)
    request = GenerationRequest("", "c", (), "")
    bridge.read_ahead(ReadAheadRequest(request, "", 1))
    qtbot.waitUntil(lambda: any(u.skipped for u in updates), timeout=10_000)
    assert updates[-1] == ReadAheadUpdate("c", 1, finished=True, skipped="empty")
    bridge.read_ahead(ReadAheadRequest(request, "the next draft ", 2))
    qtbot.waitUntil(lambda: any(u.generation == 2 and u.finished for u in updates), timeout=10_000)
    target = len(_tokens("<|user|>the next draft"))
    assert ("read_ahead", target) in model.calls
    last = [u for u in updates if u.generation == 2][-1]
    assert (last.held, last.target, last.draft_start) == (target, target, len(_tokens("<|user|>")))
    bridge.shutdown()


def test_a_send_waits_until_the_engine_reads_its_prompt_or_will_not(qtbot, fake):
    """``EngineBridge.submit`` waits (bounded) on an event the bridge's thread sets as the
    engine starts reading the prompt (``on_reading``), or once it is clear it will not (refused,
    ended first); none is left behind."""
    import threading

    engine, model = fake
    before = set(threading.enumerate())
    bridge = EngineBridge(model, "fake")
    events: dict[str, object] = {}
    expect = bridge.readings.expect
    bridge.readings.expect = lambda rid: events.setdefault(rid, expect(rid))
    updates: list[StreamUpdate] = []
    bridge.update_received.connect(updates.append)

    def send(rid: str) -> None:
        bridge.submit(GenerationRequest(rid, f"c-{rid}", (Turn("m0", "user", "hello"),), ""))
        qtbot.waitUntil(lambda: any(u.request_id == rid and (u.done or u.error) for u in updates), timeout=10_000)
        assert events[rid].is_set() and len(bridge.readings) == 0

    send("r1")  # the fake engine reads at once, as it starts the stream
    assert (events["r1"].cpu is None) == (gui_affinity.current_cpu() is None)  # where, when the OS says

    # An engine that never says it reads: the request's end (an error here) sets it.
    infer, readings = model.infer, []
    model.infer = lambda tokens, *, on_reading=None, **kw: readings.append(on_reading) or infer(tokens, **kw)
    model.fail_next = "decode failed"
    send("r2")
    assert readings and readings[0] is not None and events["r2"].cpu is None

    # Refused before it reaches the engine: set at once, by the bridge's thread.
    model.infer = lambda *a, **kw: (_ for _ in ()).throw(EngineError("the model is unloaded"))
    send("r3")
    assert events["r3"].cpu is None
    bridge.shutdown()
    for thread in set(threading.enumerate()) - before:  # the fake's streams let go here
        thread.join(10)


def test_a_send_waits_only_while_the_engine_runs_nothing(qtbot, fake):
    """While another reply streams, the request starts after the tick in flight: the GUI
    thread does not wait for it (it would only stall until the bound)."""
    engine, model = fake
    model.token_delay_s = 0.05  # a slow reply keeps the engine busy
    bridge = EngineBridge(model, "fake")
    asked: list[str] = []
    expect = bridge.readings.expect
    bridge.readings.expect = lambda rid: asked.append(rid) or expect(rid)
    done: list[str] = []
    bridge.update_received.connect(lambda u: u.done and done.append(u.request_id))
    bridge.submit(GenerationRequest("r1", "c1", (Turn("m0", "user", "hello"),), ""))
    qtbot.waitUntil(lambda: model.snapshot().phase == "generating", timeout=10_000)
    bridge.submit(GenerationRequest("r2", "c2", (Turn("m0", "user", "hello"),), ""))
    assert asked == ["r1"]
    qtbot.waitUntil(lambda: sorted(done) == ["r1", "r2"], timeout=30_000)
    bridge.shutdown()
