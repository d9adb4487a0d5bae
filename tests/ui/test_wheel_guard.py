"""Issue 50, item 3: the mouse wheel scrolls a settings panel; it never changes a field the
pointer happens to be over. A spin box, combo box or slider takes the wheel once it has the
focus (a click or Tab), as Qt's own idiom has it."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QComboBox, QSlider, QWidget

from tests.ui.screens import screenshot

LEFT = Qt.MouseButton.LeftButton


def wheel(widget: QWidget, notches: int) -> None:
    """Turn the wheel ``notches`` (negative: towards the user, i.e. scroll down) with the
    pointer over ``widget``'s middle, delivered as Qt delivers the window system's wheel
    events: to the widget under the pointer, then to each parent while it is ignored (an
    event sent with ``sendEvent`` alone is not passed on)."""
    centre = widget.rect().center()
    target: QWidget | None = widget.childAt(centre) or widget
    assert target is not None
    pos = QPointF(target.mapFrom(widget, centre))
    while target is not None:
        event = QWheelEvent(
            pos, QPointF(target.mapToGlobal(pos)), QPoint(0, 0), QPoint(0, 120 * notches),
            Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False,
        )  # fmt: skip
        QApplication.sendEvent(target, event)
        if event.isAccepted() or target.isWindow():
            return
        pos = QPointF(target.mapToParent(pos.toPoint()))
        target = target.parentWidget()


def test_wheel_over_the_settings_panel_scrolls_it_and_changes_no_setting(make_window, qtbot):
    window = make_window(size=(1200, 560))
    page = window.chat_page
    page.new_conversation()
    qtbot.mouseClick(page.settings_button, LEFT)
    panel = page.settings_panel
    qtbot.waitUntil(panel.isVisible, timeout=5_000)
    bar = panel.verticalScrollBar()
    assert bar.maximum() > 0, "the panel must be taller than its viewport for this journey"
    policy, draft_max = panel.overflow.picker, panel.form.draft_max
    temperature = panel.temperature
    before = (policy.currentIndex(), draft_max.value(), temperature.value())

    # The pointer rests on the fields on the panel's right half while the wheel turns.
    for field in (draft_max, policy, temperature, draft_max, policy):
        panel.ensureWidgetVisible(field)
        scrolled_from = bar.value()
        wheel(field, -1)
        assert (policy.currentIndex(), draft_max.value(), temperature.value()) == before
        assert bar.value() > scrolled_from or bar.value() == bar.maximum(), "the panel scrolls instead"
        wheel(field, +1)  # and back up
        assert (policy.currentIndex(), draft_max.value(), temperature.value()) == before
    assert not any(w.hasFocus() for w in (policy, draft_max, temperature)), "the wheel gives no focus"
    screenshot(window, "settings-wheel-scrolls-the-panel")

    # A field the user clicked takes the wheel: that is how a value is wheeled on purpose.
    panel.ensureWidgetVisible(draft_max)
    window.activateWindow()  # a click focuses a field of the active window only
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    qtbot.mouseClick(draft_max.lineEdit(), LEFT)
    qtbot.waitUntil(draft_max.hasFocus, timeout=5_000)
    wheel(draft_max, +1)
    assert draft_max.value() == before[1] + 1
    # Everywhere in the window: no shown spin box, combo box or slider takes the focus by wheel.
    shown = [w for kind in (QAbstractSpinBox, QComboBox, QSlider) for w in window.findChildren(kind) if w.isVisible()]
    assert len(shown) > 10
    assert all(w.focusPolicy() == Qt.FocusPolicy.StrongFocus for w in shown)
