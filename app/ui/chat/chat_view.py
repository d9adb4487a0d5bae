"""The message column of the current conversation (objectName ``chatView``).

Re-rendered whole when the branch changes; while a reply streams only its
:class:`MessageWidget` is updated (the controller's updates are already per-frame).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.ui.chat.controller import ChatController
from app.ui.chat.message_widget import MessageWidget

MAX_COLUMN_WIDTH = 820


class ChatView(QScrollArea):
    def __init__(self, controller: ChatController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._controller = controller
        self.conversation_id: str | None = None
        self._messages: list[MessageWidget] = []
        self._live_widget: MessageWidget | None = None
        self._stick_to_bottom = True

        outer = QWidget()
        outer.setObjectName("chatColumn")
        row = QHBoxLayout(outer)
        row.setContentsMargins(24, 24, 24, 24)
        self._column = QWidget()
        self._column.setObjectName("chatColumn")
        self._column.setMaximumWidth(MAX_COLUMN_WIDTH)
        self._layout = QVBoxLayout(self._column)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(22)
        row.addStretch(1)
        row.addWidget(self._column, 100)
        row.addStretch(1)
        self.setWidget(outer)
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range_changed)

        controller.conversation_changed.connect(self._on_conversation_changed)
        controller.reply_progressed.connect(self._on_reply_progressed)

    # -- public --------------------------------------------------------------------------

    def set_conversation(self, cid: str | None) -> None:
        self.conversation_id = cid
        self._stick_to_bottom = True
        self.rerender()

    def message_widgets(self) -> list[MessageWidget]:
        out = list(self._messages)
        if self._live_widget is not None:
            out.append(self._live_widget)
        return out

    def transcript(self) -> str:
        """Everything a person reads in the view, one message per paragraph."""
        return "\n\n".join(w.text() for w in self.message_widgets())

    def live_widget(self) -> MessageWidget | None:
        return self._live_widget

    def rerender(self) -> None:
        self._clear()
        cid = self.conversation_id
        if cid is None:
            self._layout.addWidget(
                self._empty_state("Start a conversation", "Create a chat from the sidebar.")
            )
            self._layout.addStretch(1)
            return
        branch = self._controller.branch(cid)
        label = self._controller.model_id or "Assistant"
        for msg in branch:
            widget = MessageWidget(
                msg.role,
                msg.content,
                message_id=msg.id,
                thinking=msg.thinking,
                stats=msg.stats,
                branch=self._controller.siblings(msg.id),
                label=label,
            )
            widget.regenerate_requested.connect(self._on_regenerate_requested)
            widget.edit_submitted.connect(self._on_edit_submitted)
            widget.branch_stepped.connect(self._on_branch_stepped)
            self._messages.append(widget)
            self._layout.addWidget(widget)
        live = self._controller.live_reply(cid)
        if live is not None:
            self._live_widget = MessageWidget("assistant", "", streaming=True, label=label)
            self._live_widget.set_content(live.text, live.thinking, live.thinking_done)
            self._layout.addWidget(self._live_widget)
        error = self._controller.failed.get(cid)
        if error and live is None:
            self._layout.addWidget(self._error_card(error))
        if not branch and live is None:
            self._layout.addWidget(
                self._empty_state(
                    "How can I help?", "Ask anything. Replies stream from the local model."
                )
            )
        self._layout.addStretch(1)
        busy = self._controller.is_busy(cid)
        for w in self._messages:
            for btn in w.action_buttons.values():
                btn.setEnabled(not busy)
            if w.switcher is not None:
                w.switcher.setEnabled(not busy)

    # -- slots ---------------------------------------------------------------------------

    def _on_conversation_changed(self, cid: str) -> None:
        if cid == self.conversation_id:
            self.rerender()

    def _on_reply_progressed(self, cid: str) -> None:
        if cid != self.conversation_id:
            return
        live = self._controller.live_reply(cid)
        if live is None:
            return
        if self._live_widget is None:
            self.rerender()
            return
        self._live_widget.set_content(live.text, live.thinking, live.thinking_done)

    def _on_regenerate_requested(self, message_id: str) -> None:
        if self.conversation_id:
            self._stick_to_bottom = True
            self._controller.regenerate(self.conversation_id, message_id)

    def _on_edit_submitted(self, message_id: str, text: str) -> None:
        if self.conversation_id:
            self._stick_to_bottom = True
            QTimer.singleShot(
                0, lambda: self._controller.edit(self.conversation_id or "", message_id, text)
            )

    def _on_branch_stepped(self, message_id: str, step: int) -> None:
        if self.conversation_id:
            cid = self.conversation_id
            QTimer.singleShot(0, lambda: self._controller.switch_branch(cid, message_id, step))

    def _on_scrolled(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._stick_to_bottom = value >= bar.maximum() - 24

    def _on_range_changed(self, _lo: int, hi: int) -> None:
        if self._stick_to_bottom:
            self.verticalScrollBar().setValue(hi)

    # -- helpers -------------------------------------------------------------------------

    def _clear(self) -> None:
        while self._layout.count():
            item = self._layout.takeAt(0)
            w = item.widget() if item is not None else None
            if w is not None:
                w.hide()
                w.deleteLater()
        self._messages = []
        self._live_widget = None

    def _empty_state(self, title: str, hint: str) -> QWidget:
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 80, 0, 0)
        t = QLabel(title)
        t.setObjectName("emptyTitle")
        t.setAlignment(Qt.AlignmentFlag.AlignCenter)
        h = QLabel(hint)
        h.setObjectName("emptyHint")
        h.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(t)
        layout.addWidget(h)
        return box

    def _error_card(self, error: str) -> QWidget:
        card = QFrame()
        card.setObjectName("errorCard")
        layout = QHBoxLayout(card)
        layout.setContentsMargins(14, 10, 10, 10)
        text = QLabel(f"The reply failed: {error}")
        text.setObjectName("errorCardText")
        text.setWordWrap(True)
        retry = QPushButton("Retry")
        retry.setObjectName("retryButton")
        retry.setProperty("class", "secondary")
        retry.clicked.connect(self._on_retry_clicked)
        layout.addWidget(text, 1)
        layout.addWidget(retry)
        return card

    def _on_retry_clicked(self) -> None:
        if self.conversation_id:
            cid = self.conversation_id
            QTimer.singleShot(0, lambda: self._controller.retry(cid))
