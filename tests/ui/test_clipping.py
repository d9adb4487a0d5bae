"""Nothing a person reads in a chat is cut at the right edge (issue 27, items 4 and 7): not a
reply with a word wider than the column, finished while its chat was hidden, nor a user
message with a long identifier, nor a long line of code, nor the header's title, nor the
empty message box's placeholder, nor the line under each reply at its longest, at 1280,
1200 (settings open) and narrow windows."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from PySide6.QtCore import QEvent, QObject, QPoint, QRect, Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication, QLabel

from app.storage import SamplingSettings
from app.ui.chat import type_ahead as type_ahead_module
from app.ui.chat.long_words import ZWSP, breakable, breakable_html
from app.ui.main_window import MainWindow
from tests.helpers.forced_drafts import always_draft
from tests.ui.conftest import ASCII_GRAMMAR, TINY_OPTIONS
from tests.ui.helpers import (
    REPLY_TIMEOUT_MS,
    chat_view,
    current_id,
    message_input,
    select_conversation,
    type_and_send,
    wait_idle,
)
from tests.ui.screens import screenshot
from tests.ui.test_type_ahead import enter, write
from tests.ui.test_width_1280 import hidden_words

# A reply that is one word of 120 letters between two short ones: wider than the column of a
# 900 px window (~560 px) at the message font.
LONG_WORD = SamplingSettings(
    temperature=0.0, max_tokens=240, grammar='root ::= "the " [a-z]{120} " end"'
)
PROSE = SamplingSettings(temperature=0.0, max_tokens=160, grammar=ASCII_GRAMMAR)
IDENTIFIER = "snapshot_of_the_scheduler_state_before_the_first_decode_of_the_reply"


def cut_labels(window: MainWindow) -> list[str]:
    """Every label in the open chat that is not whole: past the viewport's right edge, narrower
    than its narrowest layout (a word wider than the label), or shorter than its wrapped
    text."""
    page = chat_view(window).page()
    viewport = page.viewport()
    out = []
    inner = page.widget()
    if inner.width() > viewport.width():
        out.append(f"the column is {inner.width()} px wide in a {viewport.width()} px view")
    for widget in page.message_widgets():
        for label in widget.findChildren(QLabel):
            if not label.isVisibleTo(widget) or not label.text():
                continue
            name = f"{widget.role} {label.objectName()} {label.text()[:24]!r}"
            right = label.mapTo(viewport, QPoint(label.width(), 0)).x()
            if right > viewport.width():
                out.append(f"{name} ends at {right} > {viewport.width()}")
            parent = label.parentWidget()
            while parent is not None and parent is not inner:  # inside each box it is in
                edge = label.mapTo(parent, QPoint(label.width(), 0)).x()
                if edge > parent.width():
                    out.append(f"{name} ends at {edge} > {parent.width()} of its "
                               f"{parent.objectName() or type(parent).__name__}")
                    break
                parent = parent.parentWidget()
            narrowest = label.minimumSizeHint().width()
            if label.wordWrap() and narrowest > label.width():
                out.append(f"{name} is {label.width()} px wide, needs {narrowest}")
            if label.wordWrap() and label.heightForWidth(label.width()) > label.height():
                out.append(f"{name} is {label.height()} px high, needs "
                           f"{label.heightForWidth(label.width())}")
    return out


def settled(qtbot: Any, window: MainWindow) -> list[str]:
    """What is cut once the layout has settled (it may take a few event-loop turns)."""
    with contextlib.suppress(Exception):  # (what is still cut is the answer)
        qtbot.waitUntil(lambda: not cut_labels(window), timeout=2_000)
    return cut_labels(window)


@pytest.mark.parametrize("width", [900, 1280])
def test_a_long_word_finished_in_a_hidden_chat_wraps(make_window, qtbot, width):
    window = make_window(size=(width, 760), sampling=LONG_WORD)
    view = chat_view(window)
    type_and_send(qtbot, window, f"what does {IDENTIFIER} hold?")
    a = current_id(window)
    # The reply streams and finishes while another chat is open.
    qtbot.mouseClick(window.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)
    assert current_id(window) != a
    wait_idle(qtbot, window, a)
    reply = window.controller.branch(a)[-1]
    assert reply.role == "assistant" and len(max(reply.content.split(), key=len)) >= 120
    select_conversation(qtbot, window, a)
    widgets = view.message_widgets()
    assert [w.role for w in widgets] == ["user", "assistant"]
    assert widgets[1].text() == reply.content  # the message's own text, no break points
    assert settled(qtbot, window) == []
    screenshot(window, f"clipping-long-word-hidden-{width}")

    # A selection copied from the reply is the reply's text (no break points in it).
    label = widgets[1].body.findChild(QLabel, "messageText")
    label.setFocus()
    label.setSelection(0, len(label.text()))
    qtbot.keySequence(label, QKeySequence.StandardKey.Copy)
    copied = QApplication.clipboard().text()
    assert ZWSP not in copied and reply.content.split()[1] in copied


class PaintSpy(QObject):
    """What is cut (``cut_labels``) each time the chat's viewport is painted."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__()
        self.window = window
        self.frames: list[list[str]] = []

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 — Qt override
        if event.type() == QEvent.Type.Paint:
            self.frames.append(cut_labels(self.window))
        return False


@pytest.mark.parametrize("width", [1000, 1280])
def test_no_frame_shows_a_reply_cut_after_it_streamed_in_a_hidden_chat(make_window, qtbot, width):
    """A reply streams and finishes while another chat is open; on opening its chat again,
    not even the first frames show a message squeezed (the page used to be laid out one box
    per event-loop turn: two frames showed both replies cut at the bottom)."""
    window = make_window(size=(width, 760), sampling=PROSE)
    type_and_send(qtbot, window, "tell me about the sea")
    a = current_id(window)
    wait_idle(qtbot, window, a)
    type_and_send(qtbot, window, "go on please, say a lot more about the waves")
    qtbot.waitUntil(lambda: (live := window.controller.live_reply(a)) is not None and live.num_tokens > 3,
                    timeout=REPLY_TIMEOUT_MS)
    qtbot.mouseClick(window.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window, a)
    page = chat_view(window).page_of(a)
    assert page is not None and not page.isVisible()
    spy = PaintSpy(window)
    page.viewport().installEventFilter(spy)
    select_conversation(qtbot, window, a)
    first = cut_labels(window)  # laid out before anything is painted
    qtbot.waitUntil(lambda: len(spy.frames) >= 3, timeout=5_000)
    page.viewport().removeEventFilter(spy)
    assert [frame for frame in spy.frames if frame] == []
    assert first == []
    screenshot(window, f"clipping-hidden-reply-shown-{width}")


def test_a_long_line_of_code_wraps_at_900_px(make_window, qtbot):
    code = SamplingSettings(
        temperature=0.0, max_tokens=240, grammar='root ::= "see\\n\\n```\\n" [a-z]{120} "\\n```\\n"'
    )
    window = make_window(size=(900, 760), sampling=code)
    type_and_send(qtbot, window, "show me the code")
    wait_idle(qtbot, window)
    reply = chat_view(window).message_widgets()[-1]
    blocks = reply.body.code_blocks()
    assert len(blocks) == 1 and len(blocks[0].code().strip()) >= 120
    assert settled(qtbot, window) == []
    screenshot(window, "clipping-long-code-900")
    # Its Copy button copies the code as written.
    qtbot.mouseClick(blocks[0].copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == blocks[0].code()


def test_a_long_word_in_the_open_chat_wraps_at_900_px(make_window, qtbot):
    window = make_window(size=(900, 760), sampling=LONG_WORD)
    type_and_send(qtbot, window, f"what does {IDENTIFIER} hold?")
    wait_idle(qtbot, window)
    assert settled(qtbot, window) == []
    # The header's title (the first message) is shortened with "…", not cut under the picker.
    page = window.chat_page
    title = page.title_label
    assert title.fontMetrics().horizontalAdvance(title.text()) <= title.width(), title.text()
    assert title.geometry().right() < page.model_picker.geometry().left()
    assert title.toolTip() == window.controller.conversation(current_id(window)).title
    screenshot(window, "clipping-long-word-open-900")


@pytest.mark.parametrize(
    ("width", "settings_open"), [(1280, False), (1200, True), (1200, False), (900, False), (800, False)]
)
def test_the_empty_boxs_placeholder_is_whole(make_window, qtbot, width, settings_open):
    window = make_window(size=(width, 760))
    page = window.chat_page
    qtbot.mouseClick(page.sidebar.new_button, Qt.MouseButton.LeftButton)
    if settings_open:
        qtbot.mouseClick(page.settings_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(page.settings_panel.isVisible, timeout=5_000)
    qtbot.wait(200)  # the splitter gives the panel its room, the box its width
    box = message_input(window)

    def whole() -> bool:
        return not placeholder_cut(box)

    with contextlib.suppress(Exception):  # the splitter and the box settle
        qtbot.waitUntil(whole, timeout=2_000)
    screenshot(window, f"clipping-placeholder-{width}{'-settings' if settings_open else ''}")
    assert placeholder_cut(box) == []
    # Typing makes it a one-line box again; clearing shows the whole placeholder again.
    qtbot.keyClicks(box, "hi")
    assert box.height() <= one_line_height(box)
    qtbot.keyClick(box, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(box, Qt.Key.Key_Backspace)
    assert placeholder_cut(box) == []


def one_line_height(box: Any) -> int:
    margins = box.contentsMargins()
    return (box.fontMetrics().lineSpacing() + int(2 * box.document().documentMargin())
            + margins.top() + margins.bottom())


def placeholder_cut(box: Any) -> list[str]:
    """The placeholder's words that the box does not show (drawn wrapped from the viewport's
    top left, inside the document margin, clipped to the viewport)."""
    margin = int(box.document().documentMargin())
    area = box.viewport().rect().adjusted(margin, margin, 0, 0)
    fm = box.fontMetrics()
    text = box.placeholderText()
    needed = fm.boundingRect(QRect(0, 0, area.width(), 10_000), Qt.TextFlag.TextWordWrap, text)
    if needed.height() <= area.height() and needed.width() <= area.width():
        return []
    missing, x, y = [], 0, 0
    for word in text.split():
        w = fm.horizontalAdvance(word)
        if x > 0 and x + w > area.width():
            x, y = 0, y + fm.lineSpacing()
        if y + fm.height() > area.height():
            missing.append(word)
        x += w + fm.horizontalAdvance(" ")
    return missing or [f"needs {needed.width()}x{needed.height()} in {area.width()}x{area.height()}"]


@pytest.mark.parametrize("width", [900, 1280])
def test_the_longest_lines_under_replies_wrap_whole(make_window, qtbot, monkeypatch, width):
    """The line under a reply at its longest: the reason it ended, speed, "read ahead while
    you typed: …, … more still held for this chat", "drafted N, accepted M"; and a reply cut
    at the context's end ("cut: the context is full"). Every word on screen."""
    always_draft(monkeypatch)  # "drafted N, accepted M" on every reply
    monkeypatch.setattr(type_ahead_module, "DEBOUNCE_MS", 120)
    short = SamplingSettings(temperature=0.0, max_tokens=6, grammar=ASCII_GRAMMAR)
    window = make_window(size=(width, 760), sampling=short, model_options={**TINY_OPTIONS, "n_ctx": 256})
    type_and_send(qtbot, window, "tell me about the sea and the boats on it")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    write(qtbot, window, "and now the harbour where they rest at night")  # read ahead
    qtbot.waitUntil(window.chat_page.type_ahead.idle, timeout=REPLY_TIMEOUT_MS)
    stats = enter(qtbot, window)
    assert stats.tokens_read_ahead > 0 and stats.drafted_tokens > 0
    assert stats.finish_reason == "length"
    window.controller.update_settings(
        cid, sampling=SamplingSettings(temperature=0.0, max_tokens=4000, grammar=ASCII_GRAMMAR)
    )
    type_and_send(qtbot, window, "now write as much as you can about the waves")
    wait_idle(qtbot, window, cid)
    cut = window.controller.branch(cid)[-1]
    assert cut.role == "assistant" and cut.stats is not None and cut.stats.context_full
    page = chat_view(window).page()
    metas = [w.meta for w in page.message_widgets() if w.meta is not None and w.meta.text()]
    assert any("read ahead while you typed" in m.text() and "drafted" in m.text() for m in metas)
    assert metas[-1].text().startswith("cut: the context is full")
    assert settled(qtbot, window) == []
    for meta in metas:
        assert hidden_words(meta, page.viewport(), scrolls=True) == [], meta.text()
    page.verticalScrollBar().setValue(page.verticalScrollBar().maximum())
    screenshot(window, f"clipping-reply-lines-{width}")


def test_break_points_go_inside_long_words_only():
    # Short words, links and paths a label can already break are left as they are.
    for text in ("a short reply", "see https://example.com/" + "a" * 40, "[the docs](" + "x" * 40 + ")",
                 "<" + "b" * 30 + ">", "www." + "c" * 30):
        assert breakable(text) == text
    word = "x" * 30
    assert breakable(f"a {word} b").replace(ZWSP, "") == f"a {word} b"
    assert all(len(part) <= 12 for part in breakable(word).split(ZWSP))
    # Identifiers break after their separators and between camel-case humps.
    assert breakable(IDENTIFIER).split(ZWSP)[:3] == ["snapshot_", "of_", "the_"]
    assert breakable("theSchedulerStateBeforeDecode").split(ZWSP) == ["the", "Scheduler", "State", "Before", "Decode"]
    # Never after a backslash (a Markdown escape), nor before a combining mark.
    assert f"\\{ZWSP}" not in breakable("\\_" * 20)
    accented = "e\u0301" * 30
    assert f"{ZWSP}\u0301" not in breakable(accented)
    # In a code block's HTML: the text gets them, tags and entities stay whole.
    html = '<div style="margin:0; white-space:pre-wrap;"><span style="color:#000">' + "&amp;x" * 15 + "</span></div>"
    broken = breakable_html(html)
    assert broken.replace(ZWSP, "") == html and ZWSP in broken
    assert "&a" + ZWSP not in broken and "<sp" + ZWSP not in broken
