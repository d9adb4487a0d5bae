"""The chat work area on the real engine and the tiny model, driven through its widgets."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QPushButton

from app.storage import SamplingSettings
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import (
    chat_view,
    conversation_list,
    current_id,
    message_input,
    select_conversation,
    send_button,
    stop_button,
    type_and_send,
    wait_idle,
)

LONG = SamplingSettings(temperature=0.0, max_tokens=120, grammar=ASCII_GRAMMAR)


def test_contract_widgets_exist(make_window, qtbot):
    window = make_window(work_areas=True)
    for name in (
        "conversationList",
        "chatView",
        "messageInput",
        "sendButton",
        "stopButton",
        "modelManager",
        "cacheDashboard",
    ):
        assert window.findChild(object, name) is not None, name
    # The full Models and Cache views, not the placeholders.
    assert type(window.model_manager).__name__ == "ModelManager"
    assert type(window.cache_dashboard).__name__ == "CacheDashboard"
    assert not window.banner.isVisible(), window.banner.text()
    areas = {"models": window.model_manager, "cache": window.cache_dashboard, "chat": window.chat_page}
    for key, area in areas.items():
        qtbot.mouseClick(window.nav_buttons[key], Qt.MouseButton.LeftButton)
        qtbot.waitUntil(area.isVisible, timeout=5_000)  # the rail button shows its area
        assert window.stack.currentWidget() is area and window.nav_buttons[key].isChecked()


def test_enter_sends_and_reply_streams_into_chat_view(make_window, qtbot):
    window = make_window(
        sampling=SamplingSettings(temperature=0.0, max_tokens=48, grammar=ASCII_GRAMMAR)
    )
    controller = window.controller
    with qtbot.waitSignal(controller.reply_progressed, timeout=60_000):
        type_and_send(qtbot, window, "Hello, who are you?")
    cid = current_id(window)
    view = chat_view(window)
    # Streaming: a live reply widget is in the view and receives text before the end.
    assert message_input(window).toPlainText() == ""
    assert "Hello, who are you?" in view.transcript()
    qtbot.waitUntil(lambda: view.live_widget() is None or view.live_widget().text() != "…")
    wait_idle(qtbot, window, cid)
    branch = controller.branch(cid)
    assert [m.role for m in branch] == ["user", "assistant"]
    reply = branch[-1]
    assert reply.content and reply.content in view.transcript()
    assert reply.stats is not None and reply.stats.cache_hit_kind == "cold"
    meta = view.message_widgets()[-1].meta
    # The line says in plain words that nothing was reused: the whole prompt was read.
    assert meta is not None and "first token" in meta.text()
    assert f"read all {reply.stats.prompt_tokens} prompt tokens" in meta.text()
    assert "Counted as a miss — read in full" in meta.toolTip()
    # The sidebar lists it under the first message's text.
    assert (
        window.chat_page.list_model.data(window.chat_page.list_model.index(0, 0))
        == "Hello, who are you?"
    )


def test_enter_hands_the_request_to_the_engine_before_the_widgets_update(make_window, qtbot, monkeypatch):
    """The time to the first token starts at Enter: the request goes to the model's bridge
    before the chat is redrawn and before the sidebar, composer and type-ahead hear the chat
    is busy (their work waits, the engine does not)."""
    window = make_window()
    controller = window.controller
    bridge = window.models.get("tiny")
    order: list[str] = []
    submit = bridge.submit
    monkeypatch.setattr(bridge, "submit", lambda request: (order.append("submit"), submit(request))[1])
    controller.busy_changed.connect(lambda _cid, busy: order.append(f"busy {busy}"))
    controller.conversation_changed.connect(lambda _cid: order.append("redraw"))
    type_and_send(qtbot, window, "Hello there.")
    assert order[:3] == ["submit", "busy True", "redraw"], order
    wait_idle(qtbot, window, current_id(window))
    assert controller.branch(current_id(window))[-1].role == "assistant"


def test_shift_enter_is_a_newline_and_send_button_sends(make_window, qtbot):
    window = make_window()
    box = message_input(window)
    box.setFocus()
    qtbot.keyClicks(box, "line one")
    qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(box, "line two")
    assert box.toPlainText() == "line one\nline two"
    assert window.chat_page.current_id is None or not window.controller.branch(
        window.chat_page.current_id
    )
    qtbot.mouseClick(send_button(window), Qt.MouseButton.LeftButton)
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    assert window.controller.branch(cid)[0].content == "line one\nline two"


def test_second_turn_continues_the_sticky_session(make_window, qtbot):
    window = make_window()
    type_and_send(qtbot, window, "first question")
    wait_idle(qtbot, window)
    type_and_send(qtbot, window, "second question")
    wait_idle(qtbot, window)
    branch = window.controller.branch(current_id(window))
    assert [m.role for m in branch] == ["user", "assistant"] * 2
    second = branch[-1].stats
    assert second is not None
    # Only the new turn is prefilled: the session's KV is reused.
    assert second.cache_hit_kind in ("continuation", "sticky")
    assert second.cache_read > 0


def test_two_conversations_generate_at_once_and_one_is_stopped(make_window, qtbot):
    window = make_window(sampling=LONG)
    controller = window.controller
    type_and_send(qtbot, window, "tell me a long story")
    first = current_id(window)
    qtbot.mouseClick(window.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)
    second = current_id(window)
    assert second != first
    type_and_send(qtbot, window, "and another long one")
    # Both are generating at the same time, and both are marked busy in the sidebar.
    assert controller.is_busy(first) and controller.is_busy(second)
    assert controller.catalog.is_busy(first) and controller.catalog.is_busy(second)
    qtbot.waitUntil(
        lambda: (controller.live_reply(second) or _done()).num_tokens > 2, timeout=60_000
    )
    assert stop_button(window).isVisible() and not send_button(window).isVisible()
    assert window.chat_page.current_id == second
    qtbot.mouseClick(stop_button(window), Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window, second)
    stopped = controller.branch(second)[-1]
    assert stopped.role == "assistant" and stopped.stats is not None
    assert stopped.stats.finish_reason == "cancelled"
    assert "stopped" in chat_view(window).message_widgets()[-1].meta.text()
    wait_idle(qtbot, window, first)
    finished = controller.branch(first)[-1]
    assert finished.stats is not None and finished.stats.finish_reason in ("length", "stop")
    assert finished.stats.completion_tokens > stopped.stats.completion_tokens


def _done():
    class _Finished:
        num_tokens = 10**9

    return _Finished()


def test_regenerate_keeps_both_replies_switchable(make_window, qtbot):
    window = make_window(
        sampling=SamplingSettings(temperature=1.0, seed=1, max_tokens=16, grammar=ASCII_GRAMMAR)
    )
    type_and_send(qtbot, window, "pick a word")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    first_reply = window.controller.branch(cid)[-1]
    window.controller.update_settings(
        cid,
        sampling=SamplingSettings(temperature=1.0, seed=2, max_tokens=16, grammar=ASCII_GRAMMAR),
    )
    view = chat_view(window)
    qtbot.mouseClick(
        view.message_widgets()[-1].action_buttons["regenerate"], Qt.MouseButton.LeftButton
    )
    wait_idle(qtbot, window, cid)
    branch = window.controller.branch(cid)
    assert len(branch) == 2 and branch[-1].id != first_reply.id
    switcher = view.message_widgets()[-1].switcher
    assert switcher is not None and switcher.label.text() == "2/2"
    qtbot.mouseClick(switcher.prev_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.controller.branch(cid)[-1].id == first_reply.id)
    qtbot.waitUntil(lambda: view.message_widgets()[-1].switcher.label.text() == "1/2")
    assert first_reply.content in view.transcript()


def test_edit_earlier_message_branches_and_switches_back(make_window, qtbot):
    window = make_window()
    type_and_send(qtbot, window, "original first")
    wait_idle(qtbot, window)
    type_and_send(qtbot, window, "original second")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    old_branch = window.controller.branch(cid)
    view = chat_view(window)
    first_user = view.message_widgets()[0]
    qtbot.mouseClick(first_user.action_buttons["edit"], Qt.MouseButton.LeftButton)
    assert first_user.editor is not None
    first_user.editor.setPlainText("edited first")
    save = [b for b in first_user.findChildren(QPushButton) if b.text() == "Send as new branch"][0]
    qtbot.mouseClick(save, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: window.controller.is_busy(cid) or len(window.controller.branch(cid)) == 2
    )
    wait_idle(qtbot, window, cid)
    new_branch = window.controller.branch(cid)
    assert [m.content for m in new_branch][0] == "edited first"
    assert len(new_branch) == 2  # the later turns belong to the old branch only
    widgets = view.message_widgets()
    assert widgets[0].switcher is not None and widgets[0].switcher.label.text() == "2/2"
    qtbot.mouseClick(widgets[0].switcher.prev_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: [m.id for m in window.controller.branch(cid)] == [m.id for m in old_branch]
    )
    qtbot.waitUntil(lambda: "original second" in view.transcript())
    assert "edited first" not in view.transcript()


def test_search_export_delete_and_undo(make_window, qtbot, tmp_path, monkeypatch):
    window = make_window()
    controller = window.controller
    type_and_send(qtbot, window, "bananas are yellow")
    banana = current_id(window)
    wait_idle(qtbot, window, banana)
    qtbot.mouseClick(window.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)
    type_and_send(qtbot, window, "the sky is blue")
    sky = current_id(window)
    wait_idle(qtbot, window, sky)
    model = window.chat_page.list_model
    assert model.rowCount() == 2

    # Search by content.
    qtbot.keyClicks(window.chat_page.sidebar.search, "banana")
    assert model.rowCount() == 1 and model.data(model.index(0, 0)) == "bananas are yellow"
    window.chat_page.sidebar.search.clear()
    assert model.rowCount() == 2

    # Export both formats through the file dialog.
    md_path, json_path = tmp_path / "out.md", tmp_path / "out.json"
    monkeypatch.setattr(
        QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(md_path), ""))
    )
    window.chat_page.sidebar.export_requested.emit(banana, "markdown")
    monkeypatch.setattr(
        QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(json_path), ""))
    )
    window.chat_page.sidebar.export_requested.emit(banana, "json")
    assert "## User\n\nbananas are yellow" in md_path.read_text()
    doc = json.loads(json_path.read_text())
    assert doc["title"] == "bananas are yellow" and len(doc["messages"]) == 2

    # Delete (the Delete key on the list) and undo from the banner.
    select_conversation(qtbot, window, sky)
    qtbot.keyClick(conversation_list(window), Qt.Key.Key_Delete)
    assert model.rowCount() == 1 and controller.catalog.row_of(sky) == -1
    assert window.banner.isVisible() and "Deleted" in window.banner.text()
    qtbot.mouseClick(window.banner.action_button(), Qt.MouseButton.LeftButton)
    assert model.rowCount() == 2 and controller.catalog.row_of(sky) >= 0
    assert window.chat_page.current_id == sky
    assert "the sky is blue" in chat_view(window).transcript()


def test_rename_through_the_list(make_window, qtbot):
    window = make_window()
    type_and_send(qtbot, window, "rename me")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    model = window.chat_page.list_model
    assert model.setData(model.index(0, 0), "Renamed chat")
    assert window.controller.conversation(cid).title == "Renamed chat"
    assert window.chat_page.title_label.text() == "Renamed chat"


def test_engine_error_is_shown_and_the_message_can_be_retried(make_window, qtbot):
    bad = SamplingSettings(temperature=0.0, max_tokens=8, grammar="root ::= ((( broken")
    window = make_window(sampling=bad)
    type_and_send(qtbot, window, "this will fail")
    cid = current_id(window)
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=60_000)
    assert window.banner.kind() == "error" and window.banner.text()
    branch = window.controller.branch(cid)
    assert [m.content for m in branch] == ["this will fail"]  # the user's message stays
    window.controller.update_settings(
        cid, sampling=SamplingSettings(temperature=0.0, max_tokens=8, grammar=ASCII_GRAMMAR)
    )
    retry = chat_view(window).findChild(QPushButton, "retryButton")
    assert retry is not None
    qtbot.mouseClick(retry, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(window.controller.branch(cid)) == 2, timeout=60_000)
    assert window.controller.branch(cid)[-1].role == "assistant"


def test_settings_panel_saves_per_conversation(make_window, qtbot):
    window = make_window()
    page = window.chat_page
    page.new_conversation()
    cid = current_id(window)
    qtbot.mouseClick(page.settings_button, Qt.MouseButton.LeftButton)
    assert page.settings_panel.isVisible()
    panel = page.settings_panel
    panel.system_prompt.setPlainText("Answer in one word.")
    panel.temperature.setValue(0.3)
    panel.top_k.setValue(12)
    panel.seed.setValue(42)
    panel.stop_strings.setPlainText("END\n###")
    panel.json_mode.setChecked(True)
    panel.thinking.setChecked(True)
    panel.thinking_budget.setValue(64)
    panel.flush()
    conv = window.controller.conversation(cid)
    assert conv.system_prompt == "Answer in one word."
    s = conv.sampling
    assert (s.temperature, s.top_k, s.seed, s.stop_sequences) == (0.3, 12, 42, ("END", "###"))
    assert s.json_mode and s.thinking and s.thinking_budget_tokens == 64


def test_status_bar_reports_model_slots_and_hit_rate(make_window, qtbot):
    window = make_window()
    qtbot.waitUntil(lambda: window.last_status is not None, timeout=5_000)
    assert window.status_model.text().endswith("tiny")
    assert window.status_slots.text() == "Slots 0/4 busy"
    type_and_send(qtbot, window, "count the slots")
    wait_idle(qtbot, window)
    qtbot.waitUntil(lambda: "%" in window.status_hits.text(), timeout=5_000)
