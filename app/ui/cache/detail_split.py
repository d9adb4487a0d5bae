"""The layout both cache panels share: a view above a read-only text with the selected entry."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPlainTextEdit, QSplitter, QWidget


def detail_split(view: QWidget, placeholder: str, view_stretch: int) -> tuple[QPlainTextEdit, QSplitter]:
    """``view`` over a read-only ``cacheText`` pane (stretch ``view_stretch`` : 1)."""
    detail = QPlainTextEdit()
    detail.setObjectName("cacheText")
    detail.setReadOnly(True)
    detail.setPlaceholderText(placeholder)
    split = QSplitter(Qt.Orientation.Vertical)
    split.addWidget(view)
    split.addWidget(detail)
    split.setStretchFactor(0, view_stretch)
    split.setStretchFactor(1, 1)
    return detail, split
