"""Minimal Models and Cache work areas (``modelManager``, ``cacheDashboard``); their own
issues replace these with the full views."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


class PlaceholderArea(QWidget):
    def __init__(
        self, object_name: str, title: str, text: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName(object_name)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(40, 40, 40, 40)
        heading = QLabel(title)
        heading.setObjectName("placeholderTitle")
        self.body = QLabel(text)
        self.body.setObjectName("placeholderText")
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(heading)
        layout.addWidget(self.body)
        layout.addStretch(1)

    def set_text(self, text: str) -> None:
        self.body.setText(text)
