"""Paints one download: file name and repo, a progress bar, and the status line."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPainterPath
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem

from app.ui.qt_models.download_list import ITEM_ROLE, STATUS_ROLE
from app.ui.state.downloads import DownloadItem, DownloadState
from app.ui.theme import colors

ROW_HEIGHT = 66


class DownloadDelegate(QStyledItemDelegate):
    def sizeHint(  # noqa: N802
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        return QSize(max(200, option.rect.width()), ROW_HEIGHT)

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        item = index.data(ITEM_ROLE)
        if not isinstance(item, DownloadItem):
            return
        c = colors()
        r = QRectF(option.rect).adjusted(8, 4, -8, -4)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        if option.state & QStyle.StateFlag.State_Selected:
            bg = QPainterPath()
            bg.addRoundedRect(r.adjusted(-4, 0, 4, 0), 8, 8)
            painter.fillPath(bg, QColor(c.accent_soft))
        font = QFont(option.font)
        font.setBold(True)
        painter.setFont(font)
        painter.setPen(QColor(c.text))
        line1 = QRectF(r.left() + 4, r.top() + 2, r.width() - 8, 18)
        quant = f"  {item.quant.upper()}" if item.quant else ""
        painter.drawText(line1, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         item.filename)
        painter.setFont(option.font)
        painter.setPen(QColor(c.muted))
        painter.drawText(line1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                         f"{item.repo_id}{quant}")
        bar = QRectF(r.left() + 4, r.top() + 25, r.width() - 8, 6)
        track = QPainterPath()
        track.addRoundedRect(bar, 3, 3)
        track_color = QColor(c.muted)
        track_color.setAlpha(60)
        painter.fillPath(track, track_color)
        frac = 1.0 if item.state == DownloadState.FINISHED else item.fraction
        if frac > 0:
            fill = QPainterPath()
            fill.addRoundedRect(QRectF(bar.left(), bar.top(), bar.width() * frac, bar.height()),
                                3, 3)
            color = {DownloadState.FAILED: c.error_text, DownloadState.PAUSED: c.faint,
                     DownloadState.FINISHED: "#16a34a"}.get(item.state, c.accent)
            painter.fillPath(fill, QColor(color))
        small = QFont(option.font)
        small.setPointSizeF(max(6.0, option.font.pointSizeF() * 0.9))
        painter.setFont(small)
        painter.setPen(QColor(c.error_text if item.state == DownloadState.FAILED else c.muted))
        line3 = QRectF(r.left() + 4, r.top() + 36, r.width() - 8, 18)
        percent = f"{frac * 100:.0f}%"
        pct_width = painter.fontMetrics().horizontalAdvance("100%") + 8
        text = painter.fontMetrics().elidedText(str(index.data(STATUS_ROLE)),
                                                Qt.TextElideMode.ElideRight,
                                                int(line3.width() - pct_width))
        painter.drawText(line3, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, text)
        painter.setPen(QColor(c.text))
        painter.drawText(line3, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                         percent)
        painter.restore()
