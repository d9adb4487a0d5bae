"""An error belongs to its chat and to the moment it happened (issue 27, item 1).

The window's banner used to keep a chat's error forever: New chat and every later message in
any chat still showed "this chat has reached the model's context…", and after unload → send →
reload the banner and the error card still said "…is not loaded" while the picker and the
status bar said loaded. Driven by clicks and key events on the real window (tiny model)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton

from app.conversation.window import OverflowPolicy
from tests.ui.helpers import (
    REPLY_TIMEOUT_MS,
    chat_view,
    current_id,
    select_conversation,
    type_and_send,
    wait_idle,
)
from tests.ui.screens import screenshot
from tests.ui.test_models_in_chat import click_library, library_model

LEFT = Qt.MouseButton.LeftButton
SMALL = {"n_ctx": 512, "n_seq_max": 4, "n_batch": 256}
NOTE = ("Note {i}: please keep in mind that the lanterns of the northern coast were counted "
        "twice this year, once in spring and once in late autumn, by two teams of four.")


def error_card_text(window) -> str:
    label = chat_view(window).findChild(QLabel, "errorCardText")
    return label.text() if label is not None and label.isVisible() else ""


def retry_button(window) -> QPushButton | None:
    button = chat_view(window).findChild(QPushButton, "retryButton")
    return button if button is not None and button.isVisible() else None


def banner_text(window) -> str:
    return window.banner.text() if window.banner.isVisible() else ""


def full_chat(window) -> str:
    """A chat (under "stop at the limit") whose history already fills the 512-token context."""
    storage = window.storage
    conv = storage.create_conversation("A full chat", model_id="tiny")
    parent = None
    for i in range(12):
        parent = storage.add_message(conv.id, parent, "user", NOTE.format(i=i)).id
        parent = storage.add_message(conv.id, parent, "assistant", "noted and kept in mind").id
    window.controller.replies.state.set_policy(conv.id, OverflowPolicy.STOP)
    window.controller.refresh()
    return conv.id


def test_a_chats_context_limit_error_stays_with_that_chat(make_window, qtbot):
    window = make_window(model_options=dict(SMALL))
    full = full_chat(window)
    select_conversation(qtbot, window, full)
    type_and_send(qtbot, window, "and one more note, please")
    qtbot.waitUntil(lambda: "reached the model's context" in banner_text(window), timeout=60_000)
    qtbot.waitUntil(lambda: "reached the model's context" in error_card_text(window))
    screenshot(window, "errors-context-limit-in-its-chat")

    # New chat: a fresh chat is not full; the other chat's banner must not follow.
    qtbot.mouseClick(window.chat_page.sidebar.new_button, LEFT)
    fresh = current_id(window)
    assert fresh != full
    assert "reached the model's context" not in banner_text(window)
    assert error_card_text(window) == ""
    type_and_send(qtbot, window, "hello there")
    wait_idle(qtbot, window, fresh)
    assert window.controller.branch(fresh)[-1].role == "assistant"
    assert banner_text(window) == "" and error_card_text(window) == ""
    screenshot(window, "errors-new-chat-has-no-banner")

    # The full chat still shows its error where it happened, with Retry ...
    select_conversation(qtbot, window, full)
    qtbot.waitUntil(lambda: "reached the model's context" in error_card_text(window))
    # ... and once the chat may drop its oldest turns, Retry answers and the error is gone.
    window.chat_page.settings_panel.overflow.choose(OverflowPolicy.DROP_OLDEST)
    button = retry_button(window)
    assert button is not None
    qtbot.mouseClick(button, LEFT)  # (Retry starts on the next loop turn)
    qtbot.waitUntil(lambda: window.controller.branch(full)[-1].role == "assistant"
                    or full not in window.controller.failed, timeout=REPLY_TIMEOUT_MS)
    wait_idle(qtbot, window, full)
    assert window.controller.branch(full)[-1].role == "assistant", window.controller.failed
    assert banner_text(window) == "" and error_card_text(window) == ""


def test_not_loaded_goes_away_once_the_model_is_loaded(make_window, qtbot, data_dir, tiny_model_path):
    path = library_model(data_dir, tiny_model_path)
    window = make_window(model_path=path, model_id=None, work_areas=True)
    type_and_send(qtbot, window, "before the unload")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)

    click_library(qtbot, window, path, "unload")
    type_and_send(qtbot, window, "while nothing is loaded")
    qtbot.waitUntil(lambda: "not loaded" in error_card_text(window), timeout=10_000)
    assert "not loaded" in banner_text(window)
    screenshot(window, "errors-not-loaded")

    click_library(qtbot, window, path, "load")
    assert window.status_model.text() == "● tiny-chat"
    assert window.chat_page.model_picker.currentText() == "tiny-chat"
    # Loaded now: nothing may still say it is not.
    assert "not loaded" not in banner_text(window)
    assert "not loaded" not in error_card_text(window)
    screenshot(window, "errors-loaded-again")
    # The message sent meanwhile still has no reply: Retry (on its card) answers it.
    button = retry_button(window)
    assert button is not None, chat_view(window).transcript()
    qtbot.mouseClick(button, LEFT)
    qtbot.waitUntil(lambda: window.controller.branch(cid)[-1].role == "assistant",
                    timeout=REPLY_TIMEOUT_MS)
    wait_idle(qtbot, window, cid)
    roles = [m.role for m in window.controller.branch(cid)]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert banner_text(window) == "" and error_card_text(window) == ""
    assert retry_button(window) is None


def test_a_message_that_cannot_be_stored_gets_no_reply_and_stays_in_the_composer(make_window, qtbot, monkeypatch):
    """The request goes before the message is stored (the engine reads while the GUI stores
    and redraws); when storing fails, the request is withdrawn: no reply, no busy chat, no
    leaked seq, the text still in the composer, the error said. The next send works."""
    from app.storage import StorageError
    from tests.ui.helpers import message_input

    window = make_window()
    storage, controller = window.storage, window.controller
    store = storage.add_message

    def failing(conversation_id, parent_id, role, content, **kw):
        if role == "user":
            raise StorageError("disk I/O error")
        return store(conversation_id, parent_id, role, content, **kw)

    monkeypatch.setattr(storage, "add_message", failing)
    errors: list[str] = []
    controller.error_raised.connect(errors.append)
    submitted: list[str] = []
    bridge = controller.models.get("tiny")
    submit = bridge.submit
    monkeypatch.setattr(bridge, "submit", lambda request: (submitted.append(request.request_id), submit(request)))
    type_and_send(qtbot, window, "Please remember this")
    cid = current_id(window)
    assert submitted, "the request went before the message was stored"
    assert message_input(window).toPlainText() == "Please remember this"
    assert errors and "Could not save the message" in errors[-1] and "disk I/O error" in errors[-1]
    assert not controller.is_busy(cid)
    # The withdrawn request ends in the engine (cancelled) and nothing is kept for it.
    qtbot.waitUntil(lambda: bridge.model.snapshot().phase == "idle", timeout=REPLY_TIMEOUT_MS)
    qtbot.wait(200)  # its last update, if any, reaches the GUI thread
    assert storage.active_branch(cid) == []
    assert controller.live_reply(cid) is None and not error_card_text(window)

    monkeypatch.setattr(storage, "add_message", store)
    qtbot.keyClick(message_input(window), Qt.Key.Key_Return)
    wait_idle(qtbot, window, cid)
    branch = storage.active_branch(cid)
    assert [m.role for m in branch] == ["user", "assistant"]
    assert branch[0].content == "Please remember this" and branch[1].parent_id == branch[0].id
    assert message_input(window).toPlainText() == ""
