"""The GUI thread keeps off the core where llama.cpp reads a sent message (``app.ui.gui_affinity``)."""

from __future__ import annotations

import os
import threading
from types import SimpleNamespace

import pytest

from app.conversation.requests import GenerationRequest
from app.conversation.window import Turn
from app.ui import gui_affinity
from app.ui.engine_bridge import EngineBridge
from tests.helpers.fake_engine import FakeEngine

pytestmark = pytest.mark.skipif(
    gui_affinity.current_cpu() is None or len(os.sched_getaffinity(0)) < 2,
    reason="the OS does not say which core a thread runs on, or there is one core: nothing to keep off",
)


@pytest.fixture
def guard():
    whole = os.sched_getaffinity(0)
    guard = gui_affinity.CoreGuard()
    yield guard
    guard.release()
    os.sched_setaffinity(0, whole)


def test_keep_off_narrows_the_thread_until_release_and_frees_threads_started_meanwhile(guard):
    whole = os.sched_getaffinity(0)
    cpu = min(whole)
    assert guard.keep_off(cpu, threads=1, request_id="r1")
    assert guard.active and guard.request_id == "r1"
    assert os.sched_getaffinity(0) == whole - {cpu}
    assert gui_affinity.current_cpu() != cpu  # moved at once
    started, release_seen = threading.Event(), threading.Event()
    masks: list[set[int]] = []

    def child() -> None:  # inherits the narrowed set
        masks.append(os.sched_getaffinity(0))
        started.set()
        release_seen.wait(10)
        masks.append(os.sched_getaffinity(0))

    thread = threading.Thread(target=child)
    thread.start()
    assert started.wait(10)
    guard.release()
    release_seen.set()
    thread.join(10)
    assert masks == [whole - {cpu}, whole]
    assert os.sched_getaffinity(0) == whole
    assert not guard.active and guard.request_id is None
    guard.release()  # twice: nothing more
    assert os.sched_getaffinity(0) == whole


def test_release_from_another_thread_frees_the_narrowed_thread_not_the_caller(guard):
    """The bridge releases on whichever thread sees the request's first update; the cores go
    back to the thread ``keep_off`` narrowed (until this was fixed, ``release`` set the
    calling thread's own cores and left the GUI thread narrowed)."""
    whole = os.sched_getaffinity(0)
    cpu = min(whole)
    assert guard.keep_off(cpu, threads=1, request_id="r1")
    other_before: list[set[int]] = []

    def elsewhere() -> None:
        os.sched_setaffinity(0, {cpu})  # a thread with its own, different set
        other_before.append(os.sched_getaffinity(0))
        guard.release()
        other_before.append(os.sched_getaffinity(0))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(10)
    assert os.sched_getaffinity(0) == whole  # this (the narrowed) thread has its cores back
    assert other_before == [{cpu}, {cpu}]  # the caller's own set is untouched
    assert not guard.active


def test_the_core_is_asked_with_the_gil_held():
    """``current_cpu`` runs in ``on_reading``, right before the ``llama_decode``: a ctypes call
    that let the GIL go there would let another thread take it and the read wait."""
    import ctypes

    getcpu = gui_affinity._GETCPU
    assert getcpu is not None and getcpu._flags_ & ctypes._FUNCFLAG_PYTHONAPI  # type: ignore[attr-defined]
    assert gui_affinity.current_cpu() in os.sched_getaffinity(0)


def test_nothing_changes_where_no_core_would_be_left(guard):
    whole = os.sched_getaffinity(0)
    assert not guard.keep_off(min(whole), threads=len(whole), request_id="r1")  # llama.cpp takes them all
    assert not guard.keep_off(max(whole) + 1, threads=1, request_id="r1")  # not one of the thread's
    os.sched_setaffinity(0, {min(whole)})
    assert not guard.keep_off(min(whole), threads=1, request_id="r1")  # its only core
    assert os.sched_getaffinity(0) == {min(whole)} and not guard.active


def test_a_send_keeps_the_gui_thread_off_the_reading_core_until_its_first_update(qtbot, tmp_path):
    """Through the bridge, on the fake engine (which reads at once, on its own thread): the
    GUI thread leaves the core the engine's thread read on, and gets its cores back at the
    request's first update; a model on every core leaves it alone (its default, unset, is
    every core up to 8: ``app.engine.config.default_threads``)."""
    whole = os.sched_getaffinity(0)
    engine = FakeEngine(tmp_path)
    one = engine.load_model("one", SimpleNamespace(path="/x/a.gguf", n_ctx=4096, n_seq_max=4, n_threads=1))
    every = engine.load_model("all", SimpleNamespace(path="/x/b.gguf", n_ctx=4096, n_seq_max=4, n_threads=len(whole)))
    one.token_delay_s = 0.05
    bridges = [EngineBridge(one, "one"), EngineBridge(every, "all")]
    seen: list[tuple[set[int], bool]] = []
    try:
        bridge = bridges[0]
        bridge.update_received.connect(lambda u: seen.append((os.sched_getaffinity(0), u.done)))
        bridge.submit(GenerationRequest("r1", "c1", (Turn("m0", "user", "hello"),), ""))
        guarded = gui_affinity.GUARD.request_id == "r1"
        narrowed = os.sched_getaffinity(0)
        qtbot.waitUntil(lambda: any(done for _, done in seen), timeout=30_000)
        assert guarded and len(narrowed) == len(whole) - 1
        assert seen[0][0] == whole  # released before the update is handled
        assert os.sched_getaffinity(0) == whole and not gui_affinity.GUARD.active

        done: list[bool] = []
        bridges[1].update_received.connect(lambda u: done.append(u.done))
        bridges[1].submit(GenerationRequest("r2", "c2", (Turn("m0", "user", "hello"),), ""))
        assert not gui_affinity.GUARD.active and os.sched_getaffinity(0) == whole
        qtbot.waitUntil(lambda: any(done), timeout=30_000)
    finally:
        for b in bridges:
            b.shutdown()
        engine.close()
        os.sched_setaffinity(0, whole)
