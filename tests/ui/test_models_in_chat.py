"""Models in the chat, on the real engine: unload, load again, switch, two models at once, and
unloading while a reply streams or while the bridge thread is inside the tokenizer."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from app.storage import SamplingSettings
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import (
    REPLY_TIMEOUT_MS,
    answer_confirmation,
    chat_view,
    current_id,
    type_and_send,
    wait_idle,
)
from tests.ui.screens import screenshot

LEFT = Qt.MouseButton.LeftButton
LONG = SamplingSettings(temperature=0.0, max_tokens=200, grammar=ASCII_GRAMMAR)


def library_model(data_dir: Path, tiny_model_path: Path, name: str = "tiny-chat") -> Path:
    """The tiny model as a file of the window's Library (its models folder)."""
    folder = data_dir / "models"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.gguf"
    shutil.copyfile(tiny_model_path, path)
    return path


def manager_idle(qtbot, window) -> None:
    mm = window.model_manager
    qtbot.waitUntil(
        lambda: mm.io_runner.num_pending == 0 and mm.engine_runner.num_pending == 0,
        timeout=REPLY_TIMEOUT_MS,
    )


def click_library(qtbot, window, path: Path, button: str) -> None:
    """Models → Library → select the file → press Load or Unload, as a person does."""
    window.show_library()
    mm = window.model_manager
    manager_idle(qtbot, window)
    qtbot.waitUntil(lambda: mm.library_page.select_path(path), timeout=10_000)
    widget = getattr(mm.library_page, f"{button}_button")
    qtbot.waitUntil(widget.isEnabled, timeout=10_000)
    qtbot.mouseClick(widget, LEFT)
    manager_idle(qtbot, window)
    qtbot.mouseClick(window.nav_buttons["chat"], LEFT)


def retry(qtbot, window) -> None:
    button = chat_view(window).findChild(QPushButton, "retryButton")
    assert button is not None, chat_view(window).transcript()
    qtbot.mouseClick(button, LEFT)


def test_unload_then_load_again_and_the_chat_goes_on(make_window, qtbot, data_dir, tiny_model_path):
    path = library_model(data_dir, tiny_model_path)
    window = make_window(model_path=path, model_id=None, work_areas=True)
    engine = window.engine
    type_and_send(qtbot, window, "before the unload")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    assert window.status_model.text() == "● tiny-chat"
    # The Library shows the model running with the settings it was loaded with.
    window.show_library()
    manager_idle(qtbot, window)
    page = window.model_manager.library_page
    assert page.select_path(path)
    assert page.n_ctx.value() == engine.get_model("tiny-chat").config.n_ctx == 1024

    click_library(qtbot, window, path, "unload")
    assert window.models.ids() == [] and engine.list_models() == []
    assert window.status_model.text() == "No model loaded"
    assert window.chat_page.model_picker.currentText() == "tiny-chat (not loaded)"
    type_and_send(qtbot, window, "while nothing is loaded")
    qtbot.waitUntil(lambda: cid in window.controller.failed, timeout=10_000)
    assert "not loaded" in window.controller.failed[cid]
    assert window.controller.branch(cid)[-1].content == "while nothing is loaded"  # kept
    screenshot(window, "chat-model-unloaded")

    click_library(qtbot, window, path, "load")
    assert window.models.ids() == ["tiny-chat"]
    assert window.status_model.text() == "● tiny-chat"
    assert window.chat_page.model_picker.currentText() == "tiny-chat"
    retry(qtbot, window)
    qtbot.waitUntil(lambda: window.controller.branch(cid)[-1].role == "assistant",
                    timeout=REPLY_TIMEOUT_MS)
    type_and_send(qtbot, window, "and after the reload")
    wait_idle(qtbot, window, cid)
    roles = [m.role for m in window.controller.branch(cid)]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]


def test_two_loaded_models_each_conversation_on_its_own(make_window, qtbot, data_dir, tiny_model_path):
    first = library_model(data_dir, tiny_model_path, "tiny-a")
    second = library_model(data_dir, tiny_model_path, "tiny-b")
    window = make_window(model_path=first, model_id=None, work_areas=True)
    click_library(qtbot, window, second, "load")
    assert window.models.ids() == ["tiny-a", "tiny-b"]
    picker = window.chat_page.model_picker
    items = [picker.itemText(i) for i in range(picker.count())]
    assert items[:2] == ["tiny-a", "tiny-b"] and items[-1].startswith("Load a model")

    window.chat_page.new_conversation()
    a = current_id(window)
    window.chat_page.pick_model("tiny-a")
    type_and_send(qtbot, window, "a question for model a")
    window.chat_page.new_conversation()
    b = current_id(window)
    picker.setCurrentIndex(picker.findData("tiny-b"))
    picker.activated.emit(picker.currentIndex())  # what a pick in the list emits
    assert window.controller.model_of(b) == "tiny-b"
    type_and_send(qtbot, window, "a question for model b")
    wait_idle(qtbot, window, a)
    wait_idle(qtbot, window, b)
    assert window.status_model.text() == "● tiny-b"
    screenshot(window, "chat-two-models")

    def pinned(model_id: str) -> set[str]:
        slots = window.engine.get_model(model_id).snapshot().slots
        return {s.session_id for s in slots if s.session_id}

    # Each conversation's session is held by its own model's scheduler, and only there.
    assert a in pinned("tiny-a") and a not in pinned("tiny-b")
    assert b in pinned("tiny-b") and b not in pinned("tiny-a")

    # Switching a conversation to the other model frees its seq on the old one.
    window.chat_page.open_conversation(a)
    window.chat_page.pick_model("tiny-b")
    qtbot.waitUntil(lambda: a not in pinned("tiny-a"), timeout=10_000)
    type_and_send(qtbot, window, "now on model b")
    wait_idle(qtbot, window, a)
    assert a in pinned("tiny-b")
    assert window.controller.conversation(a).model_id == "tiny-b"
    assert window.controller.branch(a)[-1].role == "assistant"


@pytest.mark.qt_log_ignore("This plugin does not support")  # the unload question
def test_unload_while_a_reply_streams(make_window, qtbot, data_dir, tiny_model_path):
    path = library_model(data_dir, tiny_model_path)
    window = make_window(model_path=path, model_id=None, work_areas=True, sampling=LONG)
    type_and_send(qtbot, window, "tell me a long story")
    cid = current_id(window)
    qtbot.waitUntil(lambda: (window.controller.live_reply(cid) or _Done).num_tokens > 5,
                    timeout=REPLY_TIMEOUT_MS)
    assert window.controller.is_busy(cid)
    asked: list[str] = []
    answer_confirmation("confirmButton", asked)  # it asks first (issue 50): yes, unload
    window.model_manager.unload_model("tiny-chat")  # the Library's Unload, mid-reply
    assert len(asked) == 1
    qtbot.waitUntil(lambda: not window.controller.is_busy(cid), timeout=10_000)
    kept = window.controller.branch(cid)[-1]  # the partial reply is kept, marked
    assert kept.role == "assistant" and kept.stats and kept.stats.finish_reason == "unloaded"
    assert window.banner.isVisible() and "was unloaded" in window.banner.text()
    manager_idle(qtbot, window)
    assert window.engine.list_models() == []

    click_library(qtbot, window, path, "load")
    regenerate = chat_view(window).message_widgets()[-1].action_buttons["regenerate"]
    qtbot.mouseClick(regenerate, LEFT)
    qtbot.waitUntil(lambda: window.controller.branch(cid)[-1].id != kept.id,
                    timeout=REPLY_TIMEOUT_MS)
    wait_idle(qtbot, window, cid)
    assert window.controller.branch(cid)[-1].role == "assistant"


class _Done:
    num_tokens = 10**9


@pytest.mark.qt_log_ignore("This plugin does not support")  # the unload question
def test_unload_while_the_bridge_tokenizes(make_window, qtbot, data_dir, tiny_model_path):
    """No native call may follow the model's free: the bridge is stopped first."""
    path = library_model(data_dir, tiny_model_path)
    window = make_window(model_path=path, model_id=None, work_areas=True)
    model = window.engine.get_model("tiny-chat")
    backend = model.backend
    log: list[tuple[str, float]] = []
    lock = threading.Lock()
    real_tokenize, real_close = backend.tokenize, backend.close

    def tokenize(*args, **kwargs):
        with lock:
            log.append(("start", time.perf_counter()))
        try:
            return real_tokenize(*args, **kwargs)
        finally:
            with lock:
                log.append(("end", time.perf_counter()))

    def close():
        with lock:
            log.append(("free", time.perf_counter()))
        real_close()

    backend.tokenize, backend.close = tokenize, close
    counts: list[int] = []
    window.models.count_received.connect(lambda _key, n: counts.append(n))
    bridge = window.models.get("tiny-chat")
    text = "the harbour at dawn, with boats and gulls and nets " * 4000  # ~50k tokens a call
    window.chat_page.new_conversation()
    for _ in range(4):
        bridge.count_tokens(current_id(window), text)
    type_and_send(qtbot, window, "a message whose prompt is rendered meanwhile")
    qtbot.waitUntil(lambda: any(kind == "start" for kind, _t in log), timeout=10_000)
    answer_confirmation("confirmButton", [], tries=50)  # a reply on its way: it asks first
    window.model_manager.unload_model("tiny-chat")
    manager_idle(qtbot, window)
    assert window.engine.list_models() == []
    with lock:
        events = list(log)
    frees = [t for kind, t in events if kind == "free"]
    assert len(frees) == 1
    assert all(t < frees[0] for kind, t in events if kind in ("start", "end"))
    assert len([k for k, _t in events if k == "start"]) == len([k for k, _t in events if k == "end"])
    cid = current_id(window)
    qtbot.waitUntil(lambda: not window.controller.is_busy(cid), timeout=10_000)

    click_library(qtbot, window, path, "load")
    if window.controller.branch(cid)[-1].role == "user":
        retry(qtbot, window)
    qtbot.waitUntil(lambda: window.controller.branch(cid)[-1].role == "assistant",
                    timeout=REPLY_TIMEOUT_MS)


def test_library_settings_are_what_the_default_model_runs_with(make_window, qtbot, data_dir, tiny_model_path):
    """The Library's load settings for the default model are the ones it starts with (it
    always started at 4,096 while the form showed another size), and the form, the composer
    meter and the engine agree after a restart."""
    from app.ui.models.settings import (
        SETTINGS_FILE,
        JsonSettingsStore,
        LoadSettings,
        save_settings_for,
    )

    path = library_model(data_dir, tiny_model_path, "default-tiny")
    store = JsonSettingsStore(data_dir / SETTINGS_FILE)
    save_settings_for(store, path, LoadSettings(n_ctx=768, n_seq_max=2, n_batch=128, n_threads=2))
    for _start in range(2):  # a first start and a restart on the same data dir
        window = make_window(model_path=path, model_id="default-tiny", model_options=None,
                             work_areas=True)
        model = window.engine.get_model("default-tiny")
        assert (model.config.n_ctx, model.config.n_seq_max, model.config.n_batch) == (768, 2, 128)
        window.chat_page.new_conversation()
        type_and_send(qtbot, window, "hello")
        wait_idle(qtbot, window, current_id(window))
        assert window.controller.branch(current_id(window))[-1].role == "assistant"
        assert window.chat_page.composer.meter.text().endswith("/ 768 tokens")
        window.show_library()
        mm = window.model_manager
        manager_idle(qtbot, window)
        qtbot.waitUntil(lambda mm=mm: mm.library_page.select_path(path), timeout=10_000)
        assert (mm.library_page.n_ctx.value(), mm.library_page.n_seq_max.value()) == (768, 2)
        window.close()
