"""At 1280 px wide (a common laptop window) nothing a person must read is cut off at the
right edge: the line under each reply wraps, its reason for ending comes first, and every
part of it is on screen."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QLabel, QWidget

from app.conversation.wording import reply_line_parts
from app.storage import SamplingSettings
from tests.helpers.forced_drafts import always_draft
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import chat_view, current_id, type_and_send, wait_idle
from tests.ui.screens import screenshot

WIDTH = (1280, 800)
# A few tokens a reply, so every reply ends at the reply length limit (the reason shown).
SHORT = SamplingSettings(temperature=0.0, max_tokens=6, grammar=ASCII_GRAMMAR)


def hidden_words(label: QLabel, viewport: QWidget, *, scrolls: bool = False) -> list[str]:
    """The words of ``label`` that are not fully inside ``viewport`` as laid out (wrapped the
    way the label wraps), e.g. past its right edge or below the label's bottom. With
    ``scrolls`` the viewport scrolls vertically: only its left and right edges count."""
    rect = label.contentsRect()
    area = viewport.rect()
    if scrolls:
        area = QRect(area.left(), -100_000, area.width(), 200_000)
    visible = QRect(label.mapTo(viewport, rect.topLeft()), rect.size()).intersected(area)
    fm = label.fontMetrics()
    flags = Qt.TextFlag.TextWordWrap if label.wordWrap() else Qt.TextFlag.TextSingleLine
    needed = fm.boundingRect(QRect(0, 0, rect.width(), 100_000), flags, label.text())
    missing: list[str] = []
    if needed.height() > visible.height() or needed.width() > visible.width():
        # Which words: lay the text out word by word as the label does (no wrap: one line).
        x, y = 0, 0
        line_h = fm.lineSpacing()
        for word in label.text().split():
            w = fm.horizontalAdvance(word)
            if label.wordWrap() and x > 0 and x + w > rect.width():
                x, y = 0, y + line_h
            if x + w > visible.width() or y + fm.height() > visible.height():
                missing.append(word)
            x += w + fm.horizontalAdvance(" ")
    return missing


@pytest.fixture(autouse=True)
def forced(monkeypatch: pytest.MonkeyPatch) -> None:
    always_draft(monkeypatch)  # "drafted N, accepted M" makes the line as long as it gets


def test_every_part_of_the_line_under_a_reply_is_visible_at_1280_px(make_window, qtbot):
    window = make_window(size=WIDTH, sampling=SHORT)
    type_and_send(qtbot, window, "say it again and again and again")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    type_and_send(qtbot, window, "and once more, all of it, again and again")
    wait_idle(qtbot, window, cid)
    replies = [m for m in window.controller.branch(cid) if m.role == "assistant"]
    assert len(replies) == 2 and all(r.stats is not None for r in replies)
    assert replies[-1].stats.finish_reason == "length" and replies[-1].stats.drafted_tokens > 0
    page = chat_view(window).page()
    qtbot.wait(200)  # the wrapped lines settle
    widgets = [w for w in page.message_widgets() if w.role == "assistant"]
    for widget, reply in zip(widgets, replies, strict=True):
        meta = widget.meta
        assert meta is not None and meta.isVisible()
        parts = reply_line_parts(reply.stats, cid, window.controller.title_of)
        assert parts[0] == "reached the reply length limit"  # the reason first
        assert meta.text() == "  ·  ".join(parts)
        assert hidden_words(meta, page.viewport()) == [], meta.text()
        right = meta.mapTo(page.viewport(), QPoint(meta.width(), 0)).x()
        assert right <= page.viewport().width()
    page.verticalScrollBar().setValue(page.verticalScrollBar().maximum())
    screenshot(window, "chat-reply-line-1280")


def test_the_chat_settings_panel_is_not_clipped_at_1280_px(make_window, qtbot):
    window = make_window(size=WIDTH, sampling=SHORT)
    type_and_send(qtbot, window, "hello")
    wait_idle(qtbot, window)
    page = window.chat_page
    qtbot.mouseClick(page.settings_button, Qt.MouseButton.LeftButton)
    panel = page.settings_panel
    qtbot.waitUntil(panel.isVisible, timeout=5_000)
    qtbot.wait(200)  # the splitter and the form settle
    viewport, body = panel.viewport(), panel.widget()
    assert panel.mapTo(window, QPoint(panel.width(), 0)).x() <= window.width()
    clipped = []
    for w in body.findChildren(QWidget):
        if not w.isVisibleTo(body) or w.width() == 0:
            continue
        right = w.mapTo(viewport, QPoint(w.width(), 0)).x()
        if right > viewport.width():
            clipped.append(f"{w.objectName() or type(w).__name__} ends at {right} > {viewport.width()}")
        if isinstance(w, QLabel) and w.text() and (missing := hidden_words(w, viewport, scrolls=True)):
            clipped.append(f"label {w.text()!r} hides {missing}")
    screenshot(window, "chat-settings-1280")
    assert clipped == []
