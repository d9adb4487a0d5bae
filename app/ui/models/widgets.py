"""Small building blocks shared by the Models view's pages."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)


def caption(text: str, name: str = "caption") -> QLabel:
    """A muted explanatory line under a heading."""
    label = QLabel(text)
    label.setObjectName(name)
    label.setWordWrap(True)
    return label


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


def section(text: str) -> QLabel:
    label = QLabel(text.upper())
    label.setObjectName("sectionLabel")
    return label


SIDE_CARD_STRETCH = (3, 2)
"""Stretch of (the table, the card) beside it: a narrow window shares its width 3:2."""


def side_card(width: int = 300, min_width: int = 240) -> tuple[QFrame, QVBoxLayout]:
    """The details card at the right of the library and Hub pages: ``width`` wide when there
    is room, down to ``min_width`` in a narrow window (add it with SIDE_CARD_STRETCH)."""
    card = QFrame()
    card.setObjectName("card")
    card.setMinimumWidth(min_width)
    card.setMaximumWidth(width)
    layout = QVBoxLayout(card)
    layout.setContentsMargins(16, 16, 16, 16)
    layout.setSpacing(8)
    return card, layout


def button(text: str, name: str, *, primary: bool = False) -> QPushButton:
    """A button with a findable ``name``; its look comes from the ``role`` property."""
    b = QPushButton(text)
    b.setObjectName(name)
    b.setProperty("role", "primary" if primary else "secondary")
    b.setCursor(Qt.CursorShape.PointingHandCursor)
    return b


class MessageCard(QFrame):
    """An inline ``error`` or ``info`` message, hidden while empty; the text is selectable.

    ``label`` carries the findable ``name`` (e.g. ``loadError``) so tests read what users see.
    """

    def __init__(self, name: str, kind: str = "error", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("errorCard" if kind == "error" else "infoCard")
        self.label = QLabel()
        self.label.setObjectName(name)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 8)
        layout.addWidget(self.label)
        self.hide()

    def text(self) -> str:
        return self.label.text()

    def show_text(self, text: str) -> None:
        self.label.setText(text)
        self.setVisible(bool(text))

    def clear(self) -> None:
        self.show_text("")
