"""Every user message ends with a reply, a kept partial reply, or an error card with Retry —
after a restart too — and Enter while a reply streams says what it does (issue 27, item 3).

Driven by clicks and key events on the real window (tiny model, real SQLite, fresh data dir).
Before: after a restart a failed last message showed no card and no Retry (the only way on was
a second user message in a row); unloading the model mid-reply threw the partial reply away;
a message sent while the first had no reply made two user turns in a row; Enter while a reply
streamed did nothing at all."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton

from app.storage import SamplingSettings
from tests.ui.conftest import ASCII_GRAMMAR, TEST_SAMPLING
from tests.ui.helpers import (
    REPLY_TIMEOUT_MS,
    answer_confirmation,
    chat_view,
    current_id,
    message_input,
    select_conversation,
    stop_button,
    type_and_send,
    wait_idle,
)
from tests.ui.screens import screenshot
from tests.ui.test_models_in_chat import click_library, library_model

LEFT = Qt.MouseButton.LeftButton
BROKEN = SamplingSettings(temperature=0.0, max_tokens=8, grammar="root ::= ((( broken")
LONG = SamplingSettings(temperature=0.0, max_tokens=800, grammar=ASCII_GRAMMAR)


def card_text(window) -> str:
    """The words of the card under the chat's last message ("" when there is none)."""
    for name in ("errorCardText", "unansweredText"):
        label = chat_view(window).findChild(QLabel, name)
        if label is not None and label.isVisible():
            return label.text()
    return ""


def click_retry(qtbot, window) -> None:
    button = chat_view(window).findChild(QPushButton, "retryButton")
    assert button is not None and button.isVisible(), chat_view(window).transcript()
    qtbot.mouseClick(button, LEFT)


def composer_words(window) -> str:
    """What the composer says besides the draft (its visible labels)."""
    labels = window.chat_page.composer.findChildren(QLabel)
    return " ".join(label.text() for label in labels if label.isVisible())


def roles(window, cid: str) -> list[str]:
    return [m.role for m in window.controller.branch(cid)]


def test_a_failed_or_unanswered_last_message_keeps_its_card_after_a_restart(
    make_window, qtbot, data_dir
):
    window = make_window(sampling=BROKEN)
    type_and_send(qtbot, window, "this will fail")
    failed = current_id(window)
    qtbot.waitUntil(lambda: card_text(window).startswith("The reply failed"), timeout=60_000)
    error = window.controller.failed[failed]
    # A second chat whose message was never answered (the app was closed while it waited).
    storage = window.storage
    stranded = storage.create_conversation("Stranded", model_id="tiny", sampling=TEST_SAMPLING)
    storage.add_message(stranded.id, None, "user", "are you there")
    window.chat_page.open_conversation(failed)
    window.close()

    again = make_window(data_dir, sampling=TEST_SAMPLING)
    assert again.chat_page.current_id == failed
    assert error in card_text(again)  # the error card, with its words, after the restart
    screenshot(again, "stranded-failed-after-restart")
    again.controller.update_settings(failed, sampling=TEST_SAMPLING)
    click_retry(qtbot, again)
    qtbot.waitUntil(lambda: roles(again, failed) == ["user", "assistant"], timeout=REPLY_TIMEOUT_MS)
    wait_idle(qtbot, again, failed)
    assert card_text(again) == ""

    select_conversation(qtbot, again, stranded.id)
    assert "no reply yet" in card_text(again)
    screenshot(again, "stranded-unanswered-after-restart")
    click_retry(qtbot, again)
    qtbot.waitUntil(lambda: roles(again, stranded.id) == ["user", "assistant"],
                    timeout=REPLY_TIMEOUT_MS)
    wait_idle(qtbot, again, stranded.id)
    assert card_text(again) == ""


@pytest.mark.qt_log_ignore("This plugin does not support")  # the unload question
def test_unloading_mid_reply_keeps_the_partial_reply(make_window, qtbot, data_dir, tiny_model_path):
    path = library_model(data_dir, tiny_model_path)
    window = make_window(model_path=path, model_id=None, work_areas=True, sampling=LONG)
    type_and_send(qtbot, window, "tell me a long story")
    cid = current_id(window)
    controller = window.controller
    qtbot.waitUntil(lambda: (controller.live_reply(cid) is not None
                             and controller.live_reply(cid).num_tokens > 5), timeout=REPLY_TIMEOUT_MS)
    asked: list[str] = []
    answer_confirmation("confirmButton", asked)  # it asks first, as a reply would stop: unload
    click_library(qtbot, window, path, "unload")
    assert len(asked) == 1
    assert not controller.is_busy(cid)
    reply = controller.branch(cid)[-1]
    assert reply.role == "assistant" and reply.content.strip()  # what it wrote is kept
    assert reply.stats is not None and reply.stats.finish_reason == "unloaded"
    widget = chat_view(window).message_widgets()[-1]
    assert widget.cut_notice is not None and "interrupted" in widget.cut_notice.findChild(
        QLabel, "cutNoticeText").text()
    assert card_text(window) == ""
    assert "reply so far is kept" in window.banner.text()
    screenshot(window, "stranded-partial-reply-kept")

    # Loaded again: Continue goes on from the kept text (a new version beside it); a short
    # continuation shows that as well as a long one.
    controller.update_settings(cid, sampling=TEST_SAMPLING)
    click_library(qtbot, window, path, "load")
    assert not window.banner.isVisible()
    widget = chat_view(window).message_widgets()[-1]
    assert widget.continue_button is not None
    qtbot.mouseClick(widget.continue_button, LEFT)
    qtbot.waitUntil(lambda: controller.is_busy(cid) or len(controller.branch(cid)) == 2
                    and controller.branch(cid)[-1].id != reply.id, timeout=10_000)
    wait_idle(qtbot, window, cid)
    last = controller.branch(cid)[-1]
    assert roles(window, cid) == ["user", "assistant"] and last.id != reply.id
    assert last.content.startswith(reply.content)


def test_no_second_user_turn_in_a_row_and_enter_while_streaming_says_why(
    make_window, qtbot, data_dir, tiny_model_path
):
    path = library_model(data_dir, tiny_model_path)
    window = make_window(model_path=path, model_id=None, work_areas=True, sampling=LONG)
    controller = window.controller
    box = message_input(window)

    # Enter while a reply streams: not sent, and the composer says so; the draft stays.
    type_and_send(qtbot, window, "tell me a long story")
    cid = current_id(window)
    assert controller.is_busy(cid)
    box.setPlainText("and another thing")
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert controller.is_busy(cid)
    assert "still being written" in composer_words(window)
    assert box.toPlainText() == "and another thing"
    assert roles(window, cid) == ["user"]
    screenshot(window, "stranded-enter-while-streaming")
    qtbot.waitUntil(lambda: (controller.live_reply(cid) is None
                             or controller.live_reply(cid).num_tokens > 2), timeout=REPLY_TIMEOUT_MS)
    qtbot.mouseClick(stop_button(window), LEFT)  # Stop; the draft stays
    wait_idle(qtbot, window, cid)
    assert "still being written" not in composer_words(window)
    controller.update_settings(cid, sampling=TEST_SAMPLING)  # short replies from here on
    qtbot.keyClick(box, Qt.Key.Key_Return)  # now it is sent
    qtbot.waitUntil(lambda: box.toPlainText() == "", timeout=5_000)
    wait_idle(qtbot, window, cid)
    assert roles(window, cid) == ["user", "assistant", "user", "assistant"]

    # Unloaded: a message is kept with its error card; a second one is refused, with a word.
    click_library(qtbot, window, path, "unload")
    type_and_send(qtbot, window, "while nothing is loaded")
    qtbot.waitUntil(lambda: "not loaded" in card_text(window), timeout=10_000)
    type_and_send(qtbot, window, "hello, anyone?")
    assert "no reply yet" in composer_words(window)
    assert box.toPlainText() == "hello, anyone?"
    assert roles(window, cid)[-2:] == ["assistant", "user"]
    screenshot(window, "stranded-second-message-refused")

    click_library(qtbot, window, path, "load")
    click_retry(qtbot, window)
    qtbot.waitUntil(lambda: roles(window, cid)[-1] == "assistant", timeout=REPLY_TIMEOUT_MS)
    wait_idle(qtbot, window, cid)
    branch = controller.branch(cid)
    assert [m.role for m in branch] == ["user", "assistant"] * 3
    assert branch[-2].content == "while nothing is loaded"
    qtbot.keyClick(box, Qt.Key.Key_Return)  # the kept draft goes now, as the next turn
    wait_idle(qtbot, window, cid)
    branch = controller.branch(cid)
    assert [m.role for m in branch] == ["user", "assistant"] * 4
    assert branch[-2].content == "hello, anyone?"
