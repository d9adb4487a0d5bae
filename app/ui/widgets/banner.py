"""A dismissible notification strip shown at the top of the window (errors, undo offers)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

OVERLAY_RIGHT_FREE = 340
"""Pixels at the right end of the work area an overlaid banner leaves uncovered."""
OVERLAY_MIN_WIDTH = 360


class NotificationBanner(QFrame):
    """One message at a time; ``kind`` is ``error`` or ``info`` (styled through the .qss).

    ``owner`` is the conversation a message belongs to (a reply that failed there), or ""
    for the window's own; the window hides a chat's message when that chat is left or its
    error no longer holds.

    ``overlay``: the banner lies over the top of its parent instead of taking a place in a
    layout, so nothing under the pointer moves when it comes or goes (in a layout
    it pushed every row ~40 px down, and a click meant for one row landed on another)."""

    def __init__(self, parent: QWidget | None = None, *, overlay: bool = False) -> None:
        super().__init__(parent)
        self._overlay = overlay and parent is not None
        self.setProperty("overlay", self._overlay)
        if self._overlay and parent is not None:
            parent.installEventFilter(self)
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
        self._place()

    def _place(self) -> None:
        """Over the parent's top left, leaving its right end free (where the pages keep their
        controls: the chat's model picker and Settings, the Models view's page switch); as
        tall as the text needs."""
        parent = self.parentWidget()
        if not self._overlay or parent is None:
            return
        width = max(min(parent.width(), OVERLAY_MIN_WIDTH), parent.width() - OVERLAY_RIGHT_FREE)
        height = self.heightForWidth(width) if self.hasHeightForWidth() else -1
        self.setGeometry(0, 0, width, max(height, self.sizeHint().height()))
        self.raise_()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if watched is self.parentWidget() and event.type() == QEvent.Type.Resize and self.isVisible():
            self._place()
        return False

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
