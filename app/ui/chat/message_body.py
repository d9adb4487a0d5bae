"""A message's body: Markdown prose as Qt labels and fenced code as :class:`CodeBlock`
(language, Copy, Pygments colours), updated in place as a reply streams."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.chat.highlight import highlight_html, plain_html
from app.ui.chat.long_words import breakable, breakable_html, strip_breaks_on_copy
from app.ui.chat.markdown import Segment, split_markdown
from app.ui.theme import colors, current_icon

__all__ = ["CodeBlock", "MarkdownBody"]


class CodeBlock(QFrame):
    """A fenced code block: language, Copy, and the code coloured by Pygments
    (``app.ui.chat.highlight``); a fence still being streamed stays plain until it closes."""

    def __init__(
        self, segment: Segment, parent: QWidget | None = None, *, highlight_open: bool = True
    ) -> None:
        super().__init__(parent)
        self.setObjectName("codeBlock")
        self._code = segment.text
        self._segment = segment
        self._highlight_open = highlight_open
        header = QFrame()
        header.setObjectName("codeHeader")
        self._lang = QLabel(segment.language or "code")
        self._lang.setObjectName("codeLang")
        self.copy_button = QToolButton()
        self.copy_button.setObjectName("copyButton")
        self.copy_button.setText("Copy")
        self.copy_button.setIcon(current_icon("copy", "muted"))
        self.copy_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.copy_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.copy_button.clicked.connect(self._on_copy_clicked)
        self._copied_timer = QTimer(self)
        self._copied_timer.setSingleShot(True)
        self._copied_timer.setInterval(1500)
        self._copied_timer.timeout.connect(lambda: self.copy_button.setText("Copy"))
        hl = QHBoxLayout(header)
        hl.setContentsMargins(12, 4, 6, 4)
        hl.addWidget(self._lang)
        hl.addStretch(1)
        hl.addWidget(self.copy_button)
        self._body = QLabel()
        self._body.setObjectName("codeText")
        self._body.setTextFormat(Qt.TextFormat.RichText)
        self._body.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self._body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._body.setWordWrap(True)
        self._render()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(header)
        layout.addWidget(self._body)

    def code(self) -> str:
        return self._code

    def update_segment(self, segment: Segment) -> None:
        if segment != self._segment:
            self._code = segment.text
            self._segment = segment
            self._render()
        self._lang.setText(segment.language or "code")

    def highlight_open(self) -> None:
        if not self._highlight_open:
            self._highlight_open = True
            if not self._segment.closed:
                self._render()

    def is_highlighted(self) -> bool:
        return "<span" in self._body.text()

    def _render(self) -> None:
        seg = self._segment
        # NOTE: long words get break points here too (see MarkdownBody._create); Copy copies
        # the code as written.
        if seg.closed or self._highlight_open:
            shown = highlight_html(seg.text, seg.language, dark=colors().name == "dark")
        else:
            shown = plain_html(seg.text)
        self._body.setText(breakable_html(shown))

    def _on_copy_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self._code)
        self.copy_button.setText("Copied")
        # A child timer, not a free single shot: it dies with the block (a rerender within
        # 1.5 s deletes it).
        self._copied_timer.start()


class MarkdownBody(QWidget):
    """Prose as Qt Markdown labels, fenced code as :class:`CodeBlock`; updated in place."""

    def __init__(
        self, parent: QWidget | None = None, *, markdown: bool = True, streaming: bool = False
    ) -> None:
        super().__init__(parent)
        self._markdown = markdown
        self._streaming = streaming
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(10)
        self._items: list[tuple[Segment, QWidget]] = []
        self._source = ""
        strip_breaks_on_copy()

    def source(self) -> str:
        return self._source

    def set_markdown(self, source: str) -> None:
        if source == self._source:
            return
        self._source = source
        segments = split_markdown(source) if self._markdown else [Segment("text", source)]
        for i, seg in enumerate(segments):
            if i < len(self._items):
                old, widget = self._items[i]
                if old == seg:
                    continue
                if old.kind == seg.kind:
                    self._apply(widget, seg)
                    self._items[i] = (seg, widget)
                    continue
                for _s, w in self._items[i:]:
                    w.deleteLater()
                del self._items[i:]
            widget = self._create(seg)
            self._layout.addWidget(widget)
            self._items.append((seg, widget))
        for _s, w in self._items[len(segments) :]:
            w.deleteLater()
        del self._items[len(segments) :]

    def finish(self) -> None:
        """The stream ended: a code block whose fence is still open is coloured now, as in a
        body built from the finished text."""
        if not self._streaming:
            return
        self._streaming = False
        for _s, w in self._items:
            if isinstance(w, CodeBlock):
                w.highlight_open()

    def _create(self, seg: Segment) -> QWidget:
        if seg.kind == "code":
            return CodeBlock(seg, highlight_open=not self._streaming)
        label = QLabel()
        label.setObjectName("messageText")
        label.setWordWrap(True)
        label.setTextFormat(
            Qt.TextFormat.MarkdownText if self._markdown else Qt.TextFormat.PlainText
        )
        label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        label.setOpenExternalLinks(True)
        label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        # NOTE: long words get break points, else one of them sets the label's minimum width
        # and the whole chat column is cut at the window's right edge.
        label.setText(breakable(seg.text))
        return label

    @staticmethod
    def _apply(widget: QWidget, seg: Segment) -> None:
        if isinstance(widget, CodeBlock):
            widget.update_segment(seg)
        elif isinstance(widget, QLabel):
            widget.setText(breakable(seg.text))

    def code_blocks(self) -> list[CodeBlock]:
        return [w for _s, w in self._items if isinstance(w, CodeBlock)]
