"""A dismissible notification strip shown at the top of the window (errors, undo offers)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget


class NotificationBanner(QFrame):
    """One message at a time; ``kind`` is ``error`` or ``info`` (styled through the .qss).

    ``owner`` is the conversation a message belongs to (a reply that failed there), or ""
    for the window's own; the window hides a chat's message when that chat is left or its
    error no longer holds."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("notificationBanner")
        self._label = QLabel()
        self._label.setObjectName("bannerText")
        self._label.setWordWrap(True)
        self._action = QPushButton()
        self._action.setObjectName("bannerAction")
        self._close = QToolButton()
        self._close.setObjectName("bannerClose")
        self._close.setText("✕")
        self._close.setToolTip("Dismiss")
        self._close.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(14, 8, 8, 8)
        layout.setSpacing(10)
        layout.addWidget(self._label, 1)
        layout.addWidget(self._action)
        layout.addWidget(self._close)
        self._callback: Callable[[], None] | None = None
        self.owner = ""
        self._action.clicked.connect(self._on_action_clicked)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.dismiss)
        self.hide()

    def text(self) -> str:
        return self._label.text()

    def kind(self) -> str:
        return str(self.property("kind") or "")

    def action_button(self) -> QPushButton:
        return self._action

    def show_message(
        self,
        text: str,
        *,
        kind: str = "error",
        action: str | None = None,
        callback: Callable[[], None] | None = None,
        timeout_ms: int = 0,
        owner: str = "",
    ) -> None:
        self.owner = owner
        self.setProperty("kind", kind)
        self.style().unpolish(self)
        self.style().polish(self)
        self._label.setText(text)
        self._callback = callback
        self._action.setVisible(bool(action))
        self._action.setText(action or "")
        self._timer.stop()
        if timeout_ms:
            self._timer.start(timeout_ms)
        self.show()

    def dismiss(self) -> None:
        self._timer.stop()
        self._callback = None
        self.owner = ""
        self.hide()

    def _on_action_clicked(self) -> None:
        callback = self._callback
        self.dismiss()
        if callback is not None:
            callback()
