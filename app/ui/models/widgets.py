"""Small building blocks shared by the Models view's pages."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QPushButton,
    QVBoxLayout,
    QWidget,
)


def caption(text: str, name: str = "caption") -> QLabel:
    """A muted explanatory line under a heading."""
    label = QLabel(text)
    label.setObjectName(name)
    label.setWordWrap(True)
    return label


def section(text: str) -> QLabel:
    label = QLabel(text.upper())
    label.setObjectName("sectionLabel")
    return label


SIDE_CARD_STRETCH = (3, 2)
"""Stretch of (the table, the card) beside it: a narrow window shares its width 3:2."""


def beside_card(row: QHBoxLayout, main: QWidget | QLayout, card: QFrame) -> None:
    """Add ``main`` and its side ``card`` to ``row``, sharing a narrow window 3:2."""
    if isinstance(main, QLayout):
        row.addLayout(main, SIDE_CARD_STRETCH[0])
    else:
        row.addWidget(main, SIDE_CARD_STRETCH[0])
    row.addWidget(card, SIDE_CARD_STRETCH[1])


def side_card(width: int = 300, min_width: int = 240) -> tuple[QFrame, QVBoxLayout]:
    """The details card at the right of the library and Hub pages: ``width`` wide when there
    is room, down to ``min_width`` in a narrow window (add it with :func:`beside_card`)."""
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
