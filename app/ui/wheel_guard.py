"""The mouse wheel scrolls panels; it changes a setting only in the field that has the focus.

Spin boxes, combo boxes and sliders take the wheel by default, and Qt gives them the focus
when the wheel turns over them (``Qt.WheelFocus``), so scrolling a settings panel with the
pointer over its right half flipped "When the context is full" and moved "Draft up to". The
Qt idiom, app-wide: such a field gets ``Qt.StrongFocus`` (a click or Tab focuses it, the wheel
does not) and, unless it has the focus, its wheel events go to the scroll area around it
(or nowhere, outside one). One filter on the application (``install``) does it for every
window and dialog, built now or later.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)


def _guarded(obj: QObject) -> QWidget | None:
    if isinstance(obj, GUARDED) and not isinstance(obj, QScrollBar):
        return obj
    return None


class WheelGuard(QObject):
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        kind = event.type()
        if kind == QEvent.Type.Polish:
            widget = _guarded(watched)
            if widget is not None and widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            return False
        if kind != QEvent.Type.Wheel:
            return False
        widget = _guarded(watched)
        if widget is None or widget.hasFocus():
            return False
        area = _scroll_area(widget)
        if area is not None:
            QCoreApplication.sendEvent(area.viewport(), event)
        return True


def _scroll_area(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea) and not isinstance(parent, GUARDED):
            return parent
        parent = parent.parentWidget()
    return None


_GUARD: WheelGuard | None = None


def install(app: QApplication) -> None:
    """Guard every spin box, combo box and slider of ``app`` (idempotent)."""
    global _GUARD
    if _GUARD is None:
        _GUARD = WheelGuard(app)
        app.installEventFilter(_GUARD)
