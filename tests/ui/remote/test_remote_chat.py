"""A chat on a remote model: Hearth's own ``hearth serve`` (a subprocess) as the remote.

The journey a user takes: add the endpoint in the Library, pick it in a chat, send; the reply
streams in and is exactly what the server answers the same greedy request. Then what goes
wrong in real life: a wrong API key, the server down — each a clear error card, the message
kept, and Retry works once things are fixed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton

from app.conversation.window import OverflowPolicy
from app.remote.endpoint import RemoteEndpoint
from app.storage import SamplingSettings
from app.ui.main_window import MainWindow
from app.ui.remote.panel import RemoteModelsPanel
from tests.integration.server.conftest import Served, start_server, wait_until
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import chat_view, current_id, stop_button, type_and_send, wait_idle
from tests.ui.remote.conftest import KEY
from tests.ui.screens import screenshot

SAMPLING = SamplingSettings(temperature=0.0, max_tokens=16, grammar=ASCII_GRAMMAR)
# The tiny model's random words are no summary (the app checks what a model wrote); under this
# grammar every reply, the summary included, speaks of the chat's questions.
ABOUT_BREAD = SamplingSettings(temperature=0.0, max_tokens=16, grammar='root ::= "Answers to many questions about bread, and more bread."')
TIMEOUT_MS = 120_000


def expected_reply(remote: Served, window: MainWindow, cid: str) -> str:
    """What the server answers the conversation, asked directly with the ``openai`` client."""
    conv = window.controller.conversation(cid)
    s = conv.sampling
    messages: list[Any] = [{"role": "system", "content": conv.system_prompt}] if conv.system_prompt else []
    messages += [{"role": m.role, "content": m.content} for m in window.controller.branch(cid)[:-1]]
    out = remote.client().chat.completions.create(
        model=remote.model_id, messages=messages, temperature=s.temperature, top_p=s.top_p,
        max_tokens=s.max_tokens, extra_body={"top_k": s.top_k, "min_p": s.min_p,
                                             "repetition_penalty": s.repetition_penalty,
                                             "grammar": s.grammar},
    )
    return out.choices[0].message.content or ""


def pick(window: MainWindow, model_id: str) -> None:
    picker = window.chat_page.model_picker
    index = picker.findData(model_id)
    assert index >= 0, [picker.itemText(i) for i in range(picker.count())]
    assert "remote" in picker.itemText(index)
    picker.setCurrentIndex(index)
    picker.activated.emit(index)  # what a pick in the list emits
    assert window.controller.model_of(window.chat_page.current_id) == model_id


def retry_button(qtbot: Any, window: MainWindow) -> QPushButton:
    """The error card's Retry, once the view shows it."""

    def shown() -> QPushButton | None:
        buttons = [b for b in chat_view(window).findChildren(QPushButton, "retryButton") if b.isVisible()]
        return buttons[-1] if buttons else None

    qtbot.waitUntil(lambda: shown() is not None, timeout=10_000)
    button = shown()
    assert button is not None
    return button


def reply_meta(window: MainWindow) -> str:
    labels = chat_view(window).findChildren(QLabel, "replyMeta")
    shown = [label.text() for label in labels if label.text()]
    return shown[-1] if shown else ""


def test_add_pick_and_chat_with_a_remote_model(make_window: Any, qtbot: Any, remote: Served) -> None:
    window = make_window(sampling=SAMPLING, work_areas=True, size=(1280, 820))
    # The Library: Add remote model… → address, key, fetch the server's models, OK.
    panel = window.model_manager.findChild(RemoteModelsPanel, "remoteModelsPanel")
    assert panel is not None
    dialog = panel.open_add_dialog()
    dialog.address.setText(remote.base_url)
    dialog.key.setText(KEY)
    qtbot.mouseClick(dialog.fetch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.model.count() == 1, timeout=30_000)
    dialog.context.setValue(1024)
    dialog.buttons.accepted.emit()
    (endpoint,) = window.models.registry.endpoints() if window.models.registry else []
    assert window.models.get(endpoint.model_id) is not None
    window.show_library()
    assert panel.isVisible() and panel.list.count() == 1
    screenshot(window, "library-with-remote-model")
    window.nav_buttons["chat"].click()
    intro = window.cache_dashboard.findChild(QLabel, "cacheIntro")
    assert intro is not None and "no local KV cache" in intro.text()

    # A chat picks it next to the loaded local model, and replies through it.
    window.chat_page.new_conversation()
    picker = window.chat_page.model_picker
    assert picker.findData("tiny") >= 0
    pick(window, endpoint.model_id)
    type_and_send(qtbot, window, "hello over there")
    cid = current_id(window)
    qtbot.waitUntil(lambda: window.controller.live_reply(cid) is None
                    or bool(window.controller.live_reply(cid).text) or cid in window.controller.failed,
                    timeout=TIMEOUT_MS)
    wait_idle(qtbot, window, cid)
    assert cid not in window.controller.failed, window.controller.failed.get(cid)
    reply = window.controller.branch(cid)[-1]
    assert reply.role == "assistant" and reply.content
    assert reply.content == expected_reply(remote, window, cid)
    assert reply.stats is not None and reply.stats.reuse_source == "remote"
    assert reply.stats.prompt_tokens > 0 and reply.stats.completion_tokens > 0
    assert "remote · no local cache" in reply_meta(window)

    # The second turn re-sends the conversation; Hearth's server says what it reused.
    type_and_send(qtbot, window, "and again")
    qtbot.waitUntil(lambda: len(window.controller.branch(cid)) == 4 or cid in window.controller.failed,
                    timeout=TIMEOUT_MS)
    wait_idle(qtbot, window, cid)
    second = window.controller.branch(cid)[-1]
    assert second.role == "assistant" and second.content == expected_reply(remote, window, cid)
    assert second.stats is not None and second.stats.cache_read > 0
    assert "the server reused" in reply_meta(window)
    shot = screenshot(window, "chat-remote-model")
    assert shot is None or shot.exists()


def test_wrong_key_and_server_down_are_clear_and_lose_nothing(
    make_window: Any, qtbot: Any, remote: Served, tiny_model_path: Path, tmp_path: Path
) -> None:
    window = make_window(sampling=SAMPLING)
    registry = window.models.registry
    assert registry is not None
    wrong = RemoteEndpoint(remote.base_url, remote.model_id, name="office box", api_key="not-the-key",
                           context_size=1024)
    registry.add(wrong)
    window.chat_page.new_conversation()
    pick(window, wrong.model_id)
    controller = window.controller

    # A wrong key: a clear error, the message stays, Retry once the key is right.
    type_and_send(qtbot, window, "hello")
    cid = current_id(window)
    qtbot.waitUntil(lambda: cid in controller.failed, timeout=TIMEOUT_MS)
    assert "refused the API key" in controller.failed[cid]
    assert [m.content for m in controller.branch(cid)] == ["hello"]
    assert window.banner.isVisible() and window.banner.kind() == "error"
    registry.add(dataclasses.replace(wrong, api_key=KEY))  # same name: replaces it
    retry = retry_button(qtbot, window)
    before = controller.failed[cid]
    qtbot.mouseClick(retry, Qt.MouseButton.LeftButton)  # (Retry starts on the next loop turn)
    qtbot.waitUntil(lambda: len(controller.branch(cid)) == 2 or controller.failed.get(cid, before) is not before,
                    timeout=TIMEOUT_MS)
    wait_idle(qtbot, window, cid)
    assert controller.branch(cid)[-1].role == "assistant", controller.failed.get(cid)

    # The server goes down: a clear error, the message stays; back up → Retry answers.
    port = remote.base_url.rsplit(":", 1)[1].split("/")[0]
    remote.stop()
    type_and_send(qtbot, window, "are you still there")
    qtbot.waitUntil(lambda: cid in controller.failed, timeout=TIMEOUT_MS)
    assert "cannot reach" in controller.failed[cid] and "Retry" in controller.failed[cid]
    assert [m.content for m in controller.branch(cid)][-1] == "are you still there"
    screenshot(window, "chat-remote-model-down")
    (tmp_path / "again").mkdir()
    back = start_server(tiny_model_path, tmp_path / "again", "--ctx", "1024", "--port", port, api_key=KEY)
    try:
        assert back.base_url == remote.base_url
        retry = retry_button(qtbot, window)
        before = controller.failed[cid]
        qtbot.mouseClick(retry, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(controller.branch(cid)) == 4
                        or controller.failed.get(cid, before) is not before, timeout=TIMEOUT_MS)
        wait_idle(qtbot, window, cid)
        assert controller.branch(cid)[-1].role == "assistant", controller.failed.get(cid)
        assert controller.branch(cid)[-2].content == "are you still there"
    finally:
        back.stop()


def test_stop_hangs_up_and_the_server_stops_generating(make_window: Any, qtbot: Any, remote: Served) -> None:
    window = make_window(sampling=dataclasses.replace(SAMPLING, max_tokens=900))
    registry = window.models.registry
    assert registry is not None
    endpoint = RemoteEndpoint(remote.base_url, remote.model_id, api_key=KEY, context_size=1024)
    registry.add(endpoint)
    window.chat_page.new_conversation()
    pick(window, endpoint.model_id)
    type_and_send(qtbot, window, "tell me a very long story")
    cid = current_id(window)
    controller = window.controller
    qtbot.waitUntil(lambda: bool(getattr(controller.live_reply(cid), "text", "")) or cid in controller.failed,
                    timeout=TIMEOUT_MS)
    assert remote.get("/hearth/status")["requests"], "the server should still be generating"
    qtbot.mouseClick(stop_button(window), Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window, cid)
    reply = controller.branch(cid)[-1]
    assert reply.role == "assistant" and reply.content  # what had arrived is kept
    assert reply.stats is not None and reply.stats.finish_reason == "cancelled"
    assert "stopped" in reply_meta(window)
    wait_until(lambda: not remote.get("/hearth/status")["requests"])
    record = remote.get("/hearth/status")["recent"][-1]
    assert record["state"] == "cancelled" and record["completion_tokens"] < 900

    # The endpoint is removed in the Library while a reply streams: a clear error, the
    # message kept, and the picker says the chat's model is gone.
    type_and_send(qtbot, window, "another long story please")
    qtbot.waitUntil(lambda: bool(getattr(controller.live_reply(cid), "text", "")) or cid in controller.failed,
                    timeout=TIMEOUT_MS)
    registry.remove(endpoint.model_id)
    qtbot.waitUntil(lambda: not controller.is_busy(cid), timeout=10_000)
    assert "removed or changed while it was replying" in window.banner.text()
    last = controller.branch(cid)[-1]
    if cid in controller.failed:  # nothing had arrived yet: the message stays, with Retry
        assert last.content == "another long story please"
    else:  # what had arrived is kept, marked
        assert last.role == "assistant" and last.stats and last.stats.finish_reason == "unloaded"
    assert window.chat_page.model_picker.currentText().endswith("(not loaded)")
    wait_until(lambda: not remote.get("/hearth/status")["requests"])  # the server stopped too


def test_a_chat_longer_than_the_remote_context_is_summarised_to_fit(
    make_window: Any, qtbot: Any, remote: Served
) -> None:
    window = make_window(sampling=SAMPLING)
    registry = window.models.registry
    assert registry is not None
    # Hearth's server holds 1,024 tokens; the Library says 512, so the estimate has room.
    endpoint = RemoteEndpoint(remote.base_url, remote.model_id, api_key=KEY, context_size=512)
    registry.add(endpoint)
    storage, controller = window.storage, window.controller
    conv = storage.create_conversation("Bread questions")
    parent = None
    for turn in range(6):
        parent = storage.add_message(conv.id, parent, "user", f"question {turn} " + "about bread " * 40).id
        parent = storage.add_message(conv.id, parent, "assistant", "an answer " * 40).id
    controller.refresh()
    window.chat_page.open_conversation(conv.id)
    pick(window, endpoint.model_id)
    controller.set_policy(conv.id, OverflowPolicy.SUMMARISE)
    controller.update_settings(conv.id, sampling=ABOUT_BREAD)
    type_and_send(qtbot, window, "and one more question")
    qtbot.waitUntil(lambda: len(controller.branch(conv.id)) == 14 or conv.id in controller.failed,
                    timeout=TIMEOUT_MS)
    wait_idle(qtbot, window, conv.id)
    assert conv.id not in controller.failed, controller.failed.get(conv.id)
    reply = controller.branch(conv.id)[-1]
    assert reply.role == "assistant" and reply.stats is not None
    assert reply.stats.prompt_tokens + reply.stats.completion_tokens <= 1024
    view = controller.window(conv.id)
    assert view.start_id is not None  # older turns summarised by the remote model
    assert view.summary == "Answers to many questions about bread, and more bread." and view.no_summary == ""
    shown = [m.id for m in controller.branch(conv.id)]
    assert shown.index(view.start_id) > 0
    screenshot(window, "chat-remote-model-summarised")


def test_remote_models_and_a_chats_choice_survive_a_restart(make_window: Any, qtbot: Any) -> None:
    window = make_window(sampling=SAMPLING)
    registry = window.models.registry
    assert registry is not None
    endpoint = RemoteEndpoint("http://192.0.2.7:8642/v1", "big-model", name="GPU box", context_size=32768)
    registry.add(endpoint)
    window.chat_page.new_conversation()
    cid = current_id(window)
    pick(window, endpoint.model_id)
    window.close()

    again = make_window(sampling=SAMPLING)
    assert again.models.get(endpoint.model_id) is not None
    assert again.controller.default_model_id == "tiny"  # the local model stays the default
    again.chat_page.open_conversation(cid)
    assert again.controller.model_of(cid) == endpoint.model_id
    assert again.chat_page.model_picker.currentText() == "GPU box · remote"
    assert again.status_model.text() == "● GPU box · remote"
