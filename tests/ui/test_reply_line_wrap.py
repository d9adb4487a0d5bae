"""Issue 50, item 9: the line under a reply wraps between its phrases ("99.2 tok/s", "first
token 38 ms"), never in the middle of a short one, at every window width."""

from __future__ import annotations

from PySide6.QtCore import QEvent
from PySide6.QtGui import QTextLayout, QTextOption
from PySide6.QtWidgets import QApplication, QLabel

from app.ui.chat.message_widget import KEPT_PHRASE, PHRASE_SEPARATOR
from tests.ui.helpers import chat_view, current_id, type_and_send, wait_idle
from tests.ui.screens import screenshot


def line_starts(label: QLabel) -> list[int]:
    """Where each drawn line of ``label`` starts in its text (laid out as Qt wraps it)."""
    layout = QTextLayout(QLabel.text(label), label.font())  # what is drawn, not text()
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WordWrap)
    layout.setTextOption(option)
    starts = []
    layout.beginLayout()
    while True:
        line = layout.createLine()
        if not line.isValid():
            break
        line.setLineWidth(label.contentsRect().width())
        starts.append(line.textStart())
    layout.endLayout()
    return starts


def allowed_breaks(text: str) -> set[int]:
    """Phrase starts (or the dot before one), and any position inside a phrase too long to
    keep whole."""
    out, pos = set(), 0
    for part in text.split(PHRASE_SEPARATOR):
        out.add(pos)
        if pos:
            out.add(pos - len(PHRASE_SEPARATOR) + PHRASE_SEPARATOR.index("·"))
        if len(part) > KEPT_PHRASE:
            out.update(range(pos, pos + len(part) + 1))
        pos += len(part) + len(PHRASE_SEPARATOR)
    return out


def test_the_reply_line_wraps_between_phrases(make_window, qtbot):
    window = make_window(size=(800, 700))
    type_and_send(qtbot, window, "tell me about the harbour")
    wait_idle(qtbot, window, current_id(window))
    meta = chat_view(window).message_widgets()[-1].meta
    text = meta.text()
    assert text.count(PHRASE_SEPARATOR) >= 2, text
    wrapped = 0
    for width in range(640, 1300, 20):
        window.resize(width, 700)
        for _ in range(4):
            QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        starts = line_starts(meta)
        wrapped += len(starts) > 1
        bad = [s for s in starts if s not in allowed_breaks(text)]
        assert not bad, (width, [text[s - 12 : s + 12] for s in bad])
        if width == 800:
            screenshot(window, "chat-reply-line-800")
    assert wrapped > 0  # some widths do wrap it
