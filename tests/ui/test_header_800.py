"""Issue 50, item 9: at 800 px with the chat settings open, the chat's title still reads (it
was "W…"), and the model picker shortens its name with "…" instead of cutting it."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QStyle, QStyleOptionComboBox

from tests.ui.helpers import current_id, type_and_send, wait_idle
from tests.ui.screens import screenshot

LEFT = Qt.MouseButton.LeftButton
LONG_ID = "tiny-model-with-a-rather-long-file-name.Q8_0"


def test_the_title_and_the_model_read_at_800_px_with_settings_open(make_window, qtbot):
    window = make_window(size=(800, 600), model_id=LONG_ID)
    page = window.chat_page
    type_and_send(qtbot, window, "What is the tallest lighthouse on the northern coast?")
    wait_idle(qtbot, window, current_id(window))
    qtbot.mouseClick(page.settings_button, LEFT)
    qtbot.waitUntil(lambda: page.settings_panel.isVisible() and not page.sidebar.isVisible(), timeout=5_000)

    def reads() -> None:
        shown = page.title_label.text()
        assert len(shown.rstrip("…")) >= 12, shown  # "What is the t…", not "W…"
        picker = page.model_picker
        assert picker.currentText() == LONG_ID
        drawn = picker.shown_text()
        assert drawn == LONG_ID or (drawn.endswith("…") and LONG_ID.startswith(drawn[:-1])), drawn
        assert picker.fontMetrics().horizontalAdvance(drawn) < picker.width()

    qtbot.waitUntil(reads, timeout=5_000)
    screenshot(window, "layout-800-chat-title-with-settings")

    # The settings' combo boxes shorten their choice with "…" where it does not fit (they
    # cut "Keep the system prompt, drop the oldest turns" mid-letter).
    panel = page.settings_panel
    boxes = [panel.preset_picker, panel.overflow.picker, panel.form.draft_model]
    for box in boxes:
        panel.ensureWidgetVisible(box)
        opt = QStyleOptionComboBox()
        box.initStyleOption(opt)
        field = box.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, opt, QStyle.SubControl.SC_ComboBoxEditField, box)
        drawn = box.shown_text()
        assert box.fontMetrics().horizontalAdvance(drawn) <= field.width(), (box.objectName(), drawn)
        assert drawn == box.currentText() or (drawn.endswith("…") and box.currentText().startswith(drawn[:-1]))
    assert any(box.shown_text() != box.currentText() for box in boxes)  # one of them is long
    panel.ensureWidgetVisible(panel.overflow.picker)
    screenshot(window, "layout-800-settings-combos")
    # A wide window shows the whole name.
    window.resize(1400, 800)
    qtbot.waitUntil(lambda: page.model_picker.shown_text() == LONG_ID, timeout=5_000)
