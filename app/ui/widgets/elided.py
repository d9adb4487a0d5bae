"""A one-line label, and a combo box, that shorten their text with "…" to the width they are given."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPaintEvent, QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QSizePolicy,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QWidget,
)


class ElidedLabel(QLabel):
    """One line that shortens itself with "…" to the width it is given (it never widens its
    card); the full text is its tooltip."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.set_full_text(text)

    def full_text(self) -> str:
        return self._full

    def set_full_text(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)
        self._elide()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        width = max(self.width(), 40)
        self.setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, width))


class ElidedComboBox(QComboBox):
    """A combo box whose closed text shortens with "…" when the box is narrower than it (a
    plain one cut it off mid-letter); the open list shows every choice whole."""

    def shown_text(self) -> str:
        """The text drawn in the closed box."""
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        field = self.style().subControlRect(
            QStyle.ComplexControl.CC_ComboBox, opt, QStyle.SubControl.SC_ComboBoxEditField, self
        )
        return self.fontMetrics().elidedText(self.currentText(), Qt.TextElideMode.ElideRight, max(field.width(), 10))

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        if self.isEditable():
            super().paintEvent(event)
            return
        painter = QStylePainter(self)
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        opt.currentText = self.shown_text()
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)
