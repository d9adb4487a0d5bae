"""Small line icons drawn with QPainter, so the app ships no image files and icons follow
the theme's text colour at any DPI."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPainterPath, QPen, QPixmap

SIZE = 64


def icon(name: str, color: QColor | str, size: int = SIZE) -> QIcon:
    """A themed icon by name (see ``_PAINTERS``); drawn once per name, colour and size.

    NOTE: each message widget asks for its action buttons' icons, and drawing one took
    ~0.7 ms (B11's send profile: ~2 ms of each send's redraw, which runs while the engine
    reads the prompt). A ``QIcon`` is implicitly shared, so one serves every button."""
    return _drawn(name, QColor(color).name(QColor.NameFormat.HexArgb), size)


@lru_cache(maxsize=512)
def _drawn(name: str, color: str, size: int) -> QIcon:
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.scale(size / 24.0, size / 24.0)
    pen = QPen(QColor(color), 1.9)
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
    p.setPen(pen)
    p.setBrush(Qt.BrushStyle.NoBrush)
    _PAINTERS[name](p, QColor(color))
    p.end()
    return QIcon(pix)


def _chat(p: QPainter, _c: QColor) -> None:
    path = QPainterPath()
    path.addRoundedRect(QRectF(3, 4, 18, 13), 4, 4)
    p.drawPath(path)
    p.drawPolyline([QPointF(8, 17), QPointF(7, 21), QPointF(12, 17)])


def _models(p: QPainter, _c: QColor) -> None:
    top = [QPointF(12, 3), QPointF(20, 7.5), QPointF(12, 12), QPointF(4, 7.5), QPointF(12, 3)]
    p.drawPolyline(top)
    p.drawLine(QPointF(4, 7.5), QPointF(4, 16.5))
    p.drawLine(QPointF(20, 7.5), QPointF(20, 16.5))
    p.drawLine(QPointF(12, 12), QPointF(12, 21))
    p.drawPolyline([QPointF(4, 16.5), QPointF(12, 21), QPointF(20, 16.5)])


def _cache(p: QPainter, _c: QColor) -> None:
    p.drawEllipse(QRectF(4, 3, 16, 5))
    p.drawLine(QPointF(4, 5.5), QPointF(4, 18.5))
    p.drawLine(QPointF(20, 5.5), QPointF(20, 18.5))
    p.drawArc(QRectF(4, 9.5, 16, 5), 180 * 16, 180 * 16)
    p.drawArc(QRectF(4, 16, 16, 5), 180 * 16, 180 * 16)


def _plus(p: QPainter, _c: QColor) -> None:
    p.drawLine(QPointF(12, 5), QPointF(12, 19))
    p.drawLine(QPointF(5, 12), QPointF(19, 12))


def _send(p: QPainter, _c: QColor) -> None:
    p.drawLine(QPointF(12, 19), QPointF(12, 5))
    p.drawPolyline([QPointF(6, 11), QPointF(12, 5), QPointF(18, 11)])


def _stop(p: QPainter, c: QColor) -> None:
    p.setBrush(c)
    p.drawRoundedRect(QRectF(7, 7, 10, 10), 2, 2)


def _copy(p: QPainter, _c: QColor) -> None:
    p.drawRoundedRect(QRectF(8, 8, 12, 12), 2.5, 2.5)
    p.drawPolyline(
        [QPointF(16, 5), QPointF(16, 4.5), QPointF(4, 4.5), QPointF(4, 16), QPointF(5, 16)]
    )


def _refresh(p: QPainter, _c: QColor) -> None:
    p.drawArc(QRectF(4.5, 4.5, 15, 15), 40 * 16, 290 * 16)
    a = math.radians(40)
    tip = QPointF(12 + 7.5 * math.cos(a), 12 - 7.5 * math.sin(a))
    p.drawPolyline(
        [QPointF(tip.x() - 4.5, tip.y() - 0.5), tip, QPointF(tip.x() + 0.5, tip.y() - 4.5)]
    )


def _edit(p: QPainter, _c: QColor) -> None:
    path = QPainterPath(QPointF(15.5, 5))
    path.lineTo(19, 8.5)
    path.lineTo(9, 18.5)
    path.lineTo(4.5, 19.5)
    path.lineTo(5.5, 15)
    path.closeSubpath()
    p.drawPath(path)


def _left(p: QPainter, _c: QColor) -> None:
    p.drawPolyline([QPointF(14.5, 6), QPointF(8.5, 12), QPointF(14.5, 18)])


def _right(p: QPainter, _c: QColor) -> None:
    p.drawPolyline([QPointF(9.5, 6), QPointF(15.5, 12), QPointF(9.5, 18)])


def _sliders(p: QPainter, c: QColor) -> None:
    for y, x in ((7, 15), (12, 8), (17, 13)):
        p.drawLine(QPointF(4, y), QPointF(20, y))
        p.setBrush(c)
        p.drawEllipse(QPointF(x, y), 1.9, 1.9)
        p.setBrush(Qt.BrushStyle.NoBrush)


def _search(p: QPainter, _c: QColor) -> None:
    p.drawEllipse(QRectF(4, 4, 12, 12))
    p.drawLine(QPointF(14.5, 14.5), QPointF(20, 20))


def _close(p: QPainter, _c: QColor) -> None:
    p.drawLine(QPointF(7, 7), QPointF(17, 17))
    p.drawLine(QPointF(17, 7), QPointF(7, 17))


def _more(p: QPainter, c: QColor) -> None:
    p.setBrush(c)
    for x in (6, 12, 18):
        p.drawEllipse(QPointF(x, 12), 1.3, 1.3)


_PAINTERS: dict[str, Callable[[QPainter, QColor], None]] = {
    "chat": _chat,
    "models": _models,
    "cache": _cache,
    "plus": _plus,
    "send": _send,
    "stop": _stop,
    "copy": _copy,
    "refresh": _refresh,
    "edit": _edit,
    "left": _left,
    "right": _right,
    "sliders": _sliders,
    "search": _search,
    "close": _close,
    "more": _more,
}
