"""Driving the real window the way a person does: by the contract's objectNames."""

from __future__ import annotations

import os
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QListView, QPlainTextEdit, QToolButton, QWidget

from app.ui.chat.chat_view import ChatView
from app.ui.main_window import MainWindow

REPLY_TIMEOUT_MS = int(os.environ.get("HEARTH_TEST_REPLY_TIMEOUT_MS", "120000"))


def child(window: QWidget, cls: type, name: str) -> Any:
    widget = window.findChild(cls, name)
    assert widget is not None, f"no {cls.__name__} named {name!r}"
    return widget


def chat_view(window: MainWindow) -> ChatView:
    return child(window, ChatView, "chatView")


def message_input(window: MainWindow) -> QPlainTextEdit:
    return child(window, QPlainTextEdit, "messageInput")


def send_button(window: MainWindow) -> QToolButton:
    return child(window, QToolButton, "sendButton")


def stop_button(window: MainWindow) -> QToolButton:
    return child(window, QToolButton, "stopButton")


def conversation_list(window: MainWindow) -> QListView:
    return child(window, QListView, "conversationList")


def type_and_send(qtbot: Any, window: MainWindow, text: str, *, click: bool = False) -> None:
    box = message_input(window)
    box.setFocus()
    qtbot.keyClicks(box, text)
    if click:
        qtbot.mouseClick(send_button(window), Qt.MouseButton.LeftButton)
    else:
        qtbot.keyClick(box, Qt.Key.Key_Return)


def current_id(window: MainWindow) -> str:
    cid = window.chat_page.current_id
    assert cid is not None
    return cid


def wait_idle(qtbot: Any, window: MainWindow, cid: str | None = None) -> None:
    cid = cid or current_id(window)
    try:
        qtbot.waitUntil(lambda: not window.controller.is_busy(cid), timeout=REPLY_TIMEOUT_MS)
    except Exception:
        live = window.controller.live_reply(cid)
        tokens = live.num_tokens if live else None
        status = window.last_status
        raise AssertionError(
            f"still generating after {REPLY_TIMEOUT_MS} ms: {tokens} tokens so far; "
            f"scheduler {status and (status.phase, status.num_busy, status.pending_len)}"
        ) from None


def select_conversation(qtbot: Any, window: MainWindow, cid: str) -> None:
    view = conversation_list(window)
    row = window.chat_page.list_model.row_of(cid)
    assert row >= 0
    rect = view.visualRect(view.model().index(row, 0))
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.chat_page.current_id == cid


def answer_confirmation(button: str, asked: list[str], *, tries: int = 500) -> None:
    """When the app's "stop a reply?" question (``app.ui.confirm``) opens, read it into ``asked``
    and click ``button`` (``confirmButton`` or ``cancelButton``); looks for it every 20 ms,
    ``tries`` times."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox, QPushButton

    def click(left: int) -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox) or box.objectName() != "confirmStopDialog":
            if left > 0:
                QTimer.singleShot(20, lambda: click(left - 1))
            return
        asked.append(box.text())
        found = box.findChild(QPushButton, button)
        assert found is not None, button
        found.click()

    QTimer.singleShot(0, lambda: click(tries))
