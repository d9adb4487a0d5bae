"""The message box under the chat: Enter sends, Shift+Enter adds a line; send / stop; the
context meter (tokens the model's view of the chat uses, with the draft, of its context, and
how much of the draft type-ahead has read already) and type-ahead's "Reading the prompt…"
while a long paste is read (``app.ui.chat.type_ahead``)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QMimeData, QRect, QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QKeyEvent, QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.chat.chat_style import amber
from app.ui.chat.documents_bar import local_files
from app.ui.theme import colors, current_icon
from app.ui.widgets.icons import icon


class MessageInput(QPlainTextEdit):
    submitted = Signal()
    pasted = Signal()  # text was pasted or dropped in (type-ahead reads it at once)
    files_given = Signal(list)  # local files pasted or dropped in: attached, not typed

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
        self.textChanged.connect(self._fit_height)  # the placeholder comes and goes
        self._fit_height()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 — Qt override
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
            event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        ):
            self.submitted.emit()
            event.accept()
            return
        super().keyPressEvent(event)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 — Qt override
        files = local_files(source)
        if files:  # a file copied in a file manager: attach it (its path is not the message)
            self.files_given.emit(files)
            return
        super().insertFromMimeData(source)
        self.pasted.emit()

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 — Qt override
        return bool(local_files(source)) or super().canInsertFromMimeData(source)

    def event(self, event: QEvent) -> bool:
        # NOTE: the box's own resize, not resizeEvent: that one is the viewport's, inside the
        # scroll area's layout of its children, where a new height never reaches the viewport
        # (the placeholder's second line stayed cut in a 40 px box with a 24 px viewport).
        done = super().event(event)
        if (
            event.type() == QEvent.Type.Resize
            and isinstance(event, QResizeEvent)
            and event.oldSize().width() != event.size().width()
            and self.document().isEmpty()
        ):
            self._fit_height()
        return done

    def _placeholder_lines(self) -> int:
        """How many lines the placeholder takes, wrapped as Qt draws it in the empty box (0
        when the box has text)."""
        text = self.placeholderText()
        if not text or not self.document().isEmpty():
            return 0
        margin = int(self.document().documentMargin())
        width = max(1, self.viewport().width() - margin)
        fm = self.fontMetrics()
        rect = fm.boundingRect(QRect(0, 0, width, 10_000), Qt.TextFlag.TextWordWrap, text)
        return 1 + max(0, round((rect.height() - fm.height()) / fm.lineSpacing()))

    def _fit_height(self) -> None:
        line = self.fontMetrics().lineSpacing()
        wanted = int(self.document().size().height())
        # NOTE: the empty box is as high as its wrapped placeholder: Qt wraps the placeholder
        # but clips it to the box, so a one-line box cut it off in a narrow window (or with
        # the settings panel open at 1200 px).
        wanted = max(wanted, self._placeholder_lines())
        lines = max(self.MIN_LINES, min(self.MAX_LINES, wanted))
        self.setVerticalScrollBarPolicy(
            Qt.ScrollBarPolicy.ScrollBarAsNeeded
            if wanted > self.MAX_LINES
            else Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        )
        margins = self.contentsMargins()
        doc_margin = int(self.document().documentMargin() * 2)
        self.setFixedHeight(lines * line + doc_margin + margins.top() + margins.bottom())


NEAR_END = 0.85
"""The meter turns amber when the view (with the draft) passes this share of the limit."""
DRAFT_COUNT_MS = 250
BUSY_NOTE = ("Not sent: a reply is still being written. Your message stays here — send it "
             "when the reply ends, or press Stop (Esc) first.")


BAR_W, BAR_H = 72, 6


class ContextMeter(QLabel):
    """``used / n_ctx tokens`` beside a bar: the chat's view (solid), the part of the draft
    type-ahead has read already (lighter), the rest of the draft (faint); amber near the end
    of the prompt limit, red past it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("contextMeter")
        self.level = "ok"
        self.parts = (0, 0, 0, 0)
        """What the bar shows: (used, read ahead, draft, n_ctx) tokens."""
        self.set_use(None)

    def set_use(
        self, used: int | None, n_ctx: int = 0, limit: int = 0, draft: int = 0, policy: str = "",
        *, ahead: int = 0,
    ) -> None:  # fmt: skip
        """``ahead``: of the ``draft``'s tokens, those type-ahead has read into the chat's
        sequence already."""
        if used is None or n_ctx <= 0:
            self.setText("")
            self.setToolTip("")
            self._set_level("ok")
            self._set_parts((0, 0, 0, 0))
            return
        total = used + draft
        ahead = max(0, min(ahead, draft))
        self.setText(f"{total:,} / {n_ctx:,} tokens")
        tip = (f"The model's view of this chat holds {used:,} tokens"
               + (f", and your draft about {draft:,} more" if draft else "")
               + f", of a {n_ctx:,}-token context ({n_ctx - limit:,} are kept for the reply).")
        if ahead:
            tip += (f"\nRead ahead while you type: {ahead:,} of the draft's tokens are read "
                    "already (the lighter part of the bar), so the reply starts sooner.")
        if policy:
            tip += f"\nWhen it is full: {policy}."
        self.setToolTip(tip)
        limit = limit or n_ctx
        self._set_level("over" if total > limit else "near" if total >= NEAR_END * limit else "ok")
        self._set_parts((used, ahead, draft, n_ctx))

    def _set_parts(self, parts: tuple[int, int, int, int]) -> None:
        shown = parts[3] > 0
        self.setContentsMargins(BAR_W + 8 if shown else 0, 0, 0, 0)
        if parts != self.parts:
            self.parts = parts
            self.update()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 — Qt override
        super().paintEvent(event)
        used, ahead, draft, n_ctx = self.parts
        if n_ctx <= 0:
            return
        c = colors()
        fill = QColor({"ok": c.accent, "near": amber(c), "over": c.error_text}[self.level])
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        top = (self.height() - BAR_H) / 2
        painter.setBrush(QColor(c.border))
        painter.drawRoundedRect(QRectF(4, top, BAR_W, BAR_H), BAR_H / 2, BAR_H / 2)
        x = 4.0
        for tokens, alpha in ((used, 255), (ahead, 120), (draft - ahead, 45)):
            w = min(BAR_W + 4 - x, BAR_W * tokens / n_ctx)
            if w <= 0:
                continue
            color = QColor(fill)
            color.setAlpha(alpha)
            painter.setBrush(color)
            painter.drawRect(QRectF(x, top, max(w, 1.0), BAR_H))
            x += w
        painter.end()

    def _set_level(self, level: str) -> None:
        if level != self.level:
            self.level = level
            self.setProperty("level", level)
            self.style().unpolish(self)
            self.style().polish(self)


class Composer(QFrame):
    send_requested = Signal(str)
    stop_requested = Signal()
    draft_changed = Signal(str)  # the draft's text, after typing pauses (for its token count)
    attach_requested = Signal()  # the attach button

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
        self.attach_button = QToolButton()  # documents (app.ui.chat.documents)
        self.attach_button.setObjectName("attachButton")
        self.attach_button.setToolTip("Attach files: text, Markdown, source code, PDF, HTML, DOCX "
                                      "(or drop them on the chat)")
        self.attach_button.setFixedSize(32, 32)
        self.attach_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.attach_button.clicked.connect(self.attach_requested)
        self.meter = ContextMeter()
        self.reading = QLabel()  # type-ahead: "Reading the prompt…" while a paste is read
        self.reading.setObjectName("readAheadText")
        self.reading.hide()
        self.note = QLabel()  # why Enter did not send (a reply is being written …)
        self.note.setObjectName("composerNote")
        self.note.setWordWrap(True)
        self.note.hide()
        self._draft_timer = QTimer(self)
        self._draft_timer.setSingleShot(True)
        self._draft_timer.setInterval(DRAFT_COUNT_MS)
        self._draft_timer.timeout.connect(lambda: self.draft_changed.emit(self.input.toPlainText()))
        self.refresh_icons()
        buttons = QVBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        row = QHBoxLayout()
        row.setSpacing(8)
        row.addWidget(self.attach_button, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.input, 1)
        row.addLayout(buttons)
        foot = QHBoxLayout()
        foot.addWidget(self.reading)
        foot.addWidget(self.note, 10)
        foot.addStretch(1)
        foot.addWidget(self.meter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 8, 8, 4)
        layout.setSpacing(0)
        layout.addLayout(row)
        layout.addLayout(foot)
        self.input.submitted.connect(self._on_submitted)
        self.input.textChanged.connect(self._update_send_enabled)
        self.input.textChanged.connect(self.note.hide)
        self.input.textChanged.connect(self._draft_timer.start)
        self.send_button.clicked.connect(self._on_submitted)
        self.stop_button.clicked.connect(self.stop_requested)
        self.set_busy(False)

    def refresh_icons(self) -> None:
        self.send_button.setIcon(current_icon("send", "on_accent"))
        self.stop_button.setIcon(icon("stop", colors().window))
        self.attach_button.setIcon(icon("plus", colors().muted))

    def show_reading(self, text: str) -> None:
        """Type-ahead's progress on a long draft ("" hides it); the user types on meanwhile."""
        self.reading.setText(text)
        self.reading.setVisible(bool(text))

    def show_note(self, text: str) -> None:
        """Say under the message box why it was not sent (it stays in the box)."""
        self.note.setText(text)
        self.note.show()

    def set_busy(self, busy: bool) -> None:
        if getattr(self, "_busy", None) != busy:
            self.note.hide()
        self._busy = busy
        self.send_button.setVisible(not busy)
        self.stop_button.setVisible(busy)
        self._update_send_enabled()

    def _update_send_enabled(self) -> None:
        self.send_button.setEnabled(bool(self.input.toPlainText().strip()))

    def _on_submitted(self) -> None:
        text = self.input.toPlainText().strip()
        if not text:
            return
        if self._busy:
            self.show_note(BUSY_NOTE)
            return
        self.send_requested.emit(text)
