"""The message box under the chat: Enter sends, Shift+Enter adds a line; send / stop."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPlainTextEdit, QToolButton, QVBoxLayout, QWidget

from app.ui.theme import colors, current_icon
from app.ui.widgets.icons import icon


class MessageInput(QPlainTextEdit):
    submitted = Signal()

    MIN_LINES = 1
    MAX_LINES = 8

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageInput")
        self.setPlaceholderText("Message Hearth…  (Enter to send, Shift+Enter for a new line)")
        self.setTabChangesFocus(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.document().documentLayout().documentSizeChanged.connect(self._fit_height)
        self._fit_height()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 — Qt override
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
            event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        ):
            self.submitted.emit()
            event.accept()
            return
        super().keyPressEvent(event)

    def _fit_height(self) -> None:
        line = self.fontMetrics().lineSpacing()
        wanted = int(self.document().size().height())
        lines = max(self.MIN_LINES, min(self.MAX_LINES, wanted))
        self.setVerticalScrollBarPolicy(
            Qt.ScrollBarPolicy.ScrollBarAsNeeded
            if wanted > self.MAX_LINES
            else Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        )
        margins = self.contentsMargins()
        doc_margin = int(self.document().documentMargin() * 2)
        self.setFixedHeight(lines * line + doc_margin + margins.top() + margins.bottom())


class Composer(QFrame):
    send_requested = Signal(str)
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("composer")
        self.input = MessageInput()
        self.send_button = QToolButton()
        self.send_button.setObjectName("sendButton")
        self.send_button.setToolTip("Send (Enter)")
        self.stop_button = QToolButton()
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setToolTip("Stop generating")
        for btn in (self.send_button, self.stop_button):
            btn.setFixedSize(32, 32)
            btn.setIconSize(QSize(18, 18))
            btn.setCursor(Qt.CursorShape.PointingHandCursor)
        self.refresh_icons()
        buttons = QVBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(14, 8, 8, 8)
        layout.setSpacing(8)
        layout.addWidget(self.input, 1)
        layout.addLayout(buttons)
        self.input.submitted.connect(self._on_submitted)
        self.input.textChanged.connect(self._update_send_enabled)
        self.send_button.clicked.connect(self._on_submitted)
        self.stop_button.clicked.connect(self.stop_requested)
        self.set_busy(False)

    def refresh_icons(self) -> None:
        self.send_button.setIcon(current_icon("send", "on_accent"))
        self.stop_button.setIcon(icon("stop", colors().window))

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.send_button.setVisible(not busy)
        self.stop_button.setVisible(busy)
        self._update_send_enabled()

    def _update_send_enabled(self) -> None:
        self.send_button.setEnabled(bool(self.input.toPlainText().strip()))

    def _on_submitted(self) -> None:
        if self._busy:
            return
        text = self.input.toPlainText().strip()
        if not text:
            return
        self.send_requested.emit(text)
