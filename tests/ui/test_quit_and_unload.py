"""Issue 50, item 8: quitting keeps every chat's unsent message for the next start, and a quit
or an unload that would stop a reply being written asks first."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.storage import SamplingSettings
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import (
    REPLY_TIMEOUT_MS,
    answer_confirmation,
    current_id,
    message_input,
    select_conversation,
    type_and_send,
)
from tests.ui.screens import screenshot
from tests.ui.test_models_in_chat import library_model, manager_idle

LEFT = Qt.MouseButton.LeftButton
LONG = SamplingSettings(temperature=0.0, max_tokens=1500, grammar=ASCII_GRAMMAR)


def answer_next_question(qtbot, button: str, asked: list[str]) -> None:
    answer_confirmation(button, asked)


def press_ctrl_q(qtbot, window) -> None:
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    qtbot.keyClick(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)


# The offscreen platform cannot size a dialog's window as a desktop's does; the dialog works.
@pytest.mark.qt_log_ignore("This plugin does not support")
def test_quit_asks_while_a_reply_streams_and_drafts_come_back(make_window, qtbot, data_dir):
    window = make_window(sampling=LONG)
    page, controller = window.chat_page, window.controller
    page.new_conversation()
    drafted = current_id(window)
    qtbot.keyClicks(message_input(window), "a draft kept for later")
    page.new_conversation()
    type_and_send(qtbot, window, "write a long answer")
    streaming = current_id(window)
    qtbot.waitUntil(lambda: controller.is_busy(streaming), timeout=REPLY_TIMEOUT_MS)
    qtbot.keyClicks(message_input(window), "and a second draft")  # typed while it streams

    asked: list[str] = []
    answer_next_question(qtbot, "cancelButton", asked)
    press_ctrl_q(qtbot, window)
    assert len(asked) == 1 and "A reply is still being written in “write a long answer”" in asked[0]
    assert window.isVisible() and controller.is_busy(streaming)  # Cancel: it goes on

    answer_next_question(qtbot, "confirmButton", asked)
    press_ctrl_q(qtbot, window)
    assert len(asked) == 2
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10_000)

    window = make_window(sampling=LONG)
    assert current_id(window) == streaming  # the last chat opens with its draft
    assert message_input(window).toPlainText() == "and a second draft"
    select_conversation(qtbot, window, drafted)
    assert message_input(window).toPlainText() == "a draft kept for later"
    screenshot(window, "chat-draft-after-restart")
    # Nothing streams: Ctrl+Q quits without a question.
    press_ctrl_q(qtbot, window)
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10_000)
    assert len(asked) == 2


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_unloading_a_model_that_writes_a_reply_asks_first(make_window, qtbot, data_dir, tiny_model_path):
    path = library_model(data_dir, tiny_model_path)
    window = make_window(model_path=path, model_id=None, work_areas=True, sampling=LONG)
    controller = window.controller
    type_and_send(qtbot, window, "write a long answer")
    cid = current_id(window)
    qtbot.waitUntil(lambda: controller.is_busy(cid), timeout=REPLY_TIMEOUT_MS)
    window.show_library()
    manager_idle(qtbot, window)
    page = window.model_manager.library_page
    assert page.select_path(path)

    asked: list[str] = []
    answer_next_question(qtbot, "cancelButton", asked)
    qtbot.mouseClick(page.unload_button, LEFT)
    assert len(asked) == 1 and asked[0].startswith("tiny-chat is still writing a reply in “write a long answer”")
    assert window.models.ids() == ["tiny-chat"] and controller.is_busy(cid)

    answer_next_question(qtbot, "confirmButton", asked)
    qtbot.mouseClick(page.unload_button, LEFT)
    manager_idle(qtbot, window)
    assert len(asked) == 2 and window.models.ids() == []
    qtbot.waitUntil(lambda: not controller.is_busy(cid), timeout=REPLY_TIMEOUT_MS)
