"""The scheduler thread (issue 15 item 10): nothing waits forever on it.

A failure outside the tick (publish, idle clean-up) is logged and the loop goes on; a loop
that dies anyway fails every running request, every queued call and every later call with
an ``EngineError`` at once; calls that race ``stop()`` are refused or run, never dropped.
Also the thread-safety of what other threads read (item 11): published snapshots.
"""

from __future__ import annotations

import threading
from types import MappingProxyType
from typing import Any

import pytest

from app.engine import Engine, ModelConfig
from app.engine.errors import EngineError, NotFound, SchedulerDied
from app.engine.events import Done, Error
from tests.helpers.stub_backend import FaultyBackend, StubBackend
from tests.helpers.waiting import wait_until

WAIT = 10.0  # seconds: only a guard against a hang, never a measurement


@pytest.fixture
def engine(tmp_path):
    engines: list[Engine] = []

    def make(stub: StubBackend | None = None, **cfg: Any):
        stub = stub or StubBackend()
        engine = Engine(tmp_path / f"e{len(engines)}", backend_factory=lambda c: stub)
        engines.append(engine)
        cfg.setdefault("cache_enabled", False)
        cfg.setdefault("n_seq_max", stub.n_seq_max)
        return engine, engine.load_model("m", ModelConfig(path="stub", **cfg)), stub

    yield make
    for e in engines:
        e.close()


def tok(text: str) -> list[int]:
    return [ord(c) for c in text]


def in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` on a helper thread; the list gets its result or exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_a_failing_publish_is_logged_and_the_model_keeps_serving(engine, caplog):
    _, model, _ = engine()
    publish = model.scheduler.publish
    failures = [RuntimeError("publish bug")] * 3

    def flaky() -> None:
        if failures:
            raise failures.pop()
        publish()

    model.scheduler.publish = flaky  # type: ignore[method-assign]
    assert model.complete("hello", response_tokens=3).finish_reason == "length"
    assert model.complete("again", response_tokens=2).finish_reason == "length"
    assert "scheduler publish failed" in caplog.text


def test_a_failing_idle_clean_up_is_logged_and_the_model_keeps_serving(engine):
    _, model, stub = engine(FaultyBackend(n_seq_max=2, step_delay=0.002))
    long_ = model.infer(tok("long"), response_tokens=30)
    for _ in range(2):  # clearing seq 1 fails at its release, then at the idle clean-up
        stub.arm("seq_rm", RuntimeError("seq_rm failed"), when=lambda seq, start: seq == 1 and start == 0)
    with pytest.raises(EngineError):
        model.complete("short", response_tokens=1)  # ends while long runs: its seq goes stale
    assert long_.result(timeout=WAIT).completion_tokens == 30
    wait_until(lambda: stub.raised.count("seq_rm") == 2, WAIT, what="the idle clean-up's seq_rm")
    assert stub.raised == ["seq_rm", "seq_rm"]  # the idle clean-up hit it too
    for i in range(3):  # seq 1 still holds cells; it is cleared before reuse
        assert len(model.complete(f"next {i}", response_tokens=2).generated) == 2


def test_a_dead_loop_fails_everything_at_once_and_forever(engine):
    _, model, _ = engine(StubBackend(n_seq_max=1, step_delay=0.002))
    running = model.infer(tok("running"), response_tokens=10_000)
    waiting = model.infer(tok("waiting"), response_tokens=5)
    wait_until(lambda: model.snapshot().pending_len == 1, WAIT, what="one request queued")

    def die() -> None:
        raise KeyboardInterrupt  # not an Exception: no phase guard catches it

    model.scheduler.publish = die  # type: ignore[method-assign]
    for stream in (running, waiting):
        with pytest.raises(EngineError) as err:
            stream.result(timeout=WAIT)
        assert err.value.code == "engine_error" and "reload the model" in str(err.value)
    assert [type(e) for e in running if isinstance(e, Done | Error)] == [Error]
    # Every later call fails at once instead of waiting forever.
    t, out = in_thread(lambda: model.complete("after", response_tokens=2))
    t.join(WAIT)
    assert not t.is_alive() and isinstance(out[0], SchedulerDied)
    with pytest.raises(SchedulerDied):
        model.end_session("s")
    assert model.scheduler.has_stopped


def test_calls_racing_stop_are_run_or_refused_never_dropped(engine):
    _, model, _ = engine()
    sch = model.scheduler
    gate = threading.Event()
    held = sch.loop.post(gate.wait)  # the loop is busy with this one
    before = sch.loop.post(lambda: "ran")  # queued before stop: it still runs
    sch.stop()
    after = sch.loop.post(lambda: "never")  # refused at once
    assert after.done() and isinstance(after.exception(), NotFound)
    gate.set()
    assert held.result(timeout=WAIT) is True
    assert before.result(timeout=WAIT) == "ran"
    assert sch.loop.ended.wait(WAIT)
    with pytest.raises(NotFound):
        model.complete("x")


def test_unload_while_streaming_ends_the_stream_with_one_error(engine):
    eng, model, _ = engine(StubBackend(step_delay=0.002))
    events: list[Any] = []
    stream = model.infer(tok("go"), response_tokens=10_000, on_event=events.append)
    wait_until(lambda: model.snapshot().num_tokens_generated, WAIT, what="a first token")
    eng.unload("m")
    with pytest.raises(EngineError) as err:
        stream.result(timeout=WAIT)
    assert err.value.code == "cancelled"
    assert [type(e) for e in events if isinstance(e, Done | Error)] == [Error]
    with pytest.raises(NotFound):
        model.complete("x")


def test_the_model_registry_is_a_published_snapshot(engine):
    eng, model, _ = engine()
    models = eng._models
    assert isinstance(models, MappingProxyType) and dict(models) == {"m": model}
    eng.unload("m")
    assert dict(models) == {"m": model}  # a reader's snapshot never changes under it
    assert dict(eng._models) == {} and eng.list_models() == []


def test_adapter_listings_are_snapshots(engine, tmp_path):
    _, model, _ = engine()
    path = tmp_path / "lora.gguf"
    path.write_bytes(b"GGUF stub adapter")
    handle = model.load_adapter(str(path))
    entries = model._lora.entries
    listing = model.list_adapters()
    model.set_adapter_scale(handle, 0.5)
    assert [e.scale for e in entries] == [1.0] and listing[0]["scale"] == 1.0
    assert model.list_adapters()[0]["scale"] == 0.5
    fingerprint = model.effective_fingerprint()
    model.unload_adapter(handle)
    assert model.list_adapters() == [] and model.effective_fingerprint() != fingerprint


def test_a_refused_adapter_change_keeps_the_old_set(engine, tmp_path):
    _, model, stub = engine()
    path = tmp_path / "lora.gguf"
    path.write_bytes(b"GGUF stub adapter")
    handle = model.load_adapter(str(path))
    applied: list[list[tuple[Any, float]]] = []

    def set_adapters(adapters):
        applied.append(list(adapters))
        if any(scale == 0.25 for _, scale in adapters):
            raise EngineError("llama.cpp refused the scale", code="adapter_load_failed")

    stub.set_adapters = set_adapters  # type: ignore[method-assign]
    with pytest.raises(EngineError):
        model.set_adapter_scale(handle, 0.25)
    assert model.list_adapters()[0]["scale"] == 1.0
    assert [s for _, s in applied[-1]] == [1.0]  # the old set was applied again
    assert model.complete("still fine", response_tokens=2).finish_reason == "length"


def test_unload_waits_for_a_tokenize_already_running_then_refuses_new_ones(engine):
    """The vocabulary is freed with the model; a tokenize on another thread (the GUI's) that
    is inside llama.cpp when the model unloads must finish before the memory goes."""
    inside, release = threading.Event(), threading.Event()
    seen_closed: list[bool] = []

    class SlowVocab(StubBackend):
        def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
            if text == "slow":
                inside.set()
                release.wait(WAIT)
                seen_closed.append(self.closed)  # freed under the call: a crash on llama.cpp
            return super().tokenize(text, add_special, parse_special)

        def close(self) -> None:
            super().close()
            release.set()  # a close during the read wakes it, and it sees the memory gone

    eng, model, stub = engine(SlowVocab())
    reader, out = in_thread(lambda: model.tokenize("slow"))
    assert inside.wait(WAIT)
    unloader, _ = in_thread(lambda: eng.unload("m"))
    unloader.join(0.5)  # a bound, not a measurement: it must not finish while the read runs
    assert unloader.is_alive() and not stub.closed
    with pytest.raises(NotFound):
        model.tokenize("fast")  # unload has begun: new reads refuse at once
    release.set()
    reader.join(WAIT)
    unloader.join(WAIT)
    assert out == [tok("slow")] and seen_closed == [False] and stub.closed
