"""Hearth's memory as one bar: each part of the budget (``Engine.memory_status``) against its
cap — the loaded models' weights, KV cells, recurrent states and compute buffers, the state
buffers, the RAM tier, and Hearth itself — with the numbers beside it."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.units import human_bytes

PARTS = (
    ("weights", "Model weights", "#2563eb"),
    ("kv", "KV cache", "#7c3aed"),
    ("recurrent", "Recurrent state", "#db2777"),
    ("buffers", "Compute buffers", "#0891b2"),
    ("pool", "State buffers", "#f59e0b"),
    ("ram_tier", "Saved in RAM", "#16a34a"),
    ("fixed", "Hearth itself", "#6b7280"),
)
"""(status key, words, colour): the order they fill the bar. The RAM tier and the state buffers
are the parts that give way when memory runs short."""


class _Segments(QWidget):
    """The bar itself: one rectangle per part, widths in proportion to the cap."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("memoryBudgetBar")
        self.setMinimumHeight(18)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.parts: list[tuple[str, int, str]] = []  # (key, bytes, colour)
        self.cap = 0

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        return QSize(300, 18)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt override)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        w, h = float(self.width()), float(self.height())
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(128, 128, 128, 40))
        painter.drawRoundedRect(QRectF(0, 0, w, h), 4, 4)
        total = max(self.cap, sum(b for _k, b, _c in self.parts), 1)
        x = 0.0
        for _key, n, colour in self.parts:
            width = w * n / total
            painter.setBrush(QColor(colour))
            painter.drawRect(QRectF(x, 0, width, h))
            x += width
        painter.end()


class MemoryBar(QWidget):
    """The budget's parts as one bar, their numbers, and what was let go under pressure."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("memoryBudget")
        v = QVBoxLayout(self)
        v.setContentsMargins(0, 0, 0, 8)
        v.setSpacing(4)
        self.title = QLabel("<b>Memory</b>")
        self.bar = _Segments()
        self.summary = QLabel("")
        self.summary.setObjectName("memoryBudgetSummary")
        self.legend = QLabel("")
        self.legend.setObjectName("memoryBudgetLegend")
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.notice = QLabel("")
        self.notice.setObjectName("memoryBudgetNotice")
        self.notice.setWordWrap(True)
        self.notice.hide()
        for w in (self.title, self.bar, self.summary, self.legend, self.notice):
            v.addWidget(w)
        self.status: dict[str, Any] = {}

    def update_budget(self, status: dict[str, Any]) -> None:
        """``status``: ``Engine.memory_status()`` (bytes)."""
        self.status = status
        cap = int(status.get("cap", 0))
        parts = [(key, int(status.get(key, 0)), colour) for key, _words, colour in PARTS]
        self.bar.parts, self.bar.cap = parts, cap
        self.bar.update()
        total = sum(n for _k, n, _c in parts)
        whose = "your cap" if status.get("cap_set") else "what this machine can give (a fifth of its free memory left to the desktop)"
        self.summary.setText(f"{human_bytes(total)} of {human_bytes(cap)}: {whose}. "
                             f"{human_bytes(int(status.get('available', 0)))} available on this machine now.")
        self.legend.setText("  ".join(
            f'<span style="color:{colour}">■</span> {words} {human_bytes(int(status.get(key, 0)))}'
            for key, words, colour in PARTS if int(status.get(key, 0)) or key in ("weights", "ram_tier", "fixed")
        ))
        self.bar.setToolTip("\n".join(f"{words}: {human_bytes(int(status.get(key, 0)))}" for key, words, _c in PARTS)
                            + f"\nCap: {human_bytes(cap)}")
        notices = list(status.get("notices") or [])
        self.notice.setText(notices[-1] if notices else "")
        self.notice.setVisible(bool(notices))
