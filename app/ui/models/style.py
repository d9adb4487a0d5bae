"""The Models view's own stylesheet, built from the active theme's colours.

The app-wide sheet (``app.ui.theme``) belongs to the main window; this one is set on the
``modelManager`` widget only and rebuilt when the palette changes (light/dark switch).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QPainter, QPixmap, QPolygonF

from app.ui.theme import Colors, colors

_ARROW_DIR = Path(tempfile.gettempdir()) / "hearth-ui-arrows"


def _arrow(direction: str, color: str) -> str:
    """A small triangle PNG (QSS cannot draw one), written once per colour; its path."""
    path = _ARROW_DIR / f"{direction}-{color.lstrip('#')}.png"
    if not path.is_file():
        _ARROW_DIR.mkdir(parents=True, exist_ok=True)
        pix = QPixmap(16, 16)
        pix.fill(QColor(0, 0, 0, 0))
        p = QPainter(pix)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(QColor(0, 0, 0, 0))
        p.setBrush(QColor(color))
        pts = [(3, 5.5), (13, 5.5), (8, 11)] if direction == "down" else \
            [(3, 10.5), (13, 10.5), (8, 5)]
        p.drawPolygon(QPolygonF([QPointF(x, y) for x, y in pts]))
        p.end()
        pix.save(str(path))
    return path.as_posix()


def models_stylesheet(c: Colors | None = None) -> str:
    c = c or colors()
    values = {k: getattr(c, k) for k in c.__dataclass_fields__}
    values["arrow_up"] = _arrow("up", c.muted)
    values["arrow_down"] = _arrow("down", c.muted)
    return _QSS % values


_QSS = """
QWidget#modelManager { background: %(window)s; }
QLabel#pageTitle { font-size: 16pt; font-weight: 700; color: %(text)s; }
QLabel#caption { color: %(muted)s; font-size: 9pt; }
QLabel#sectionLabel { color: %(muted)s; font-size: 8pt; font-weight: 700; letter-spacing: 0.5px; }
QLabel#cardTitle { font-size: 11pt; font-weight: 700; color: %(text)s; }
QPushButton#segment { background: transparent; border: none; border-radius: 8px;
    padding: 6px 14px; color: %(muted)s; font-weight: 600; }
QPushButton#segment:hover { background: %(hover)s; color: %(text)s; }
QPushButton#segment:checked { background: %(accent_soft)s; color: %(accent)s; }
QFrame#segmentBar { background: %(sidebar)s; border: 1px solid %(border)s; border-radius: 10px; }
QFrame#card { background: %(sidebar)s; border: 1px solid %(border)s; border-radius: 12px; }
QFrame#errorCard { background: %(error_bg)s; border-radius: 8px; }
QFrame#errorCard QLabel { color: %(error_text)s; }
QFrame#infoCard { background: %(info_bg)s; border-radius: 8px; }
QFrame#infoCard QLabel { color: %(info_text)s; }
QLabel#memoryEstimate { color: %(text)s; font-weight: 600; }
QLabel#fingerprintLabel { font-family: monospace; font-size: 15pt; font-weight: 700;
    color: %(accent)s; }
QLabel#baseFingerprint, QLabel#adapterSha { font-family: monospace; color: %(muted)s;
    font-size: 8.5pt; }
QLabel#adapterName { font-weight: 600; color: %(text)s; }
QLabel#scaleValue { font-family: monospace; font-weight: 600; color: %(text)s; min-width: 36px; }
QFrame#adapterRow { background: %(surface)s; border: 1px solid %(border)s; border-radius: 10px; }
QPushButton[role="primary"] { background: %(accent)s; color: %(accent_text)s; border: none;
    border-radius: 8px; padding: 6px 14px; font-weight: 600; }
QPushButton[role="primary"]:disabled { background: %(border)s; color: %(faint)s; }
QPushButton[role="secondary"] { background: %(surface)s; color: %(text)s;
    border: 1px solid %(border)s; border-radius: 8px; padding: 6px 12px; }
QPushButton[role="secondary"]:hover { background: %(hover)s; }
QPushButton[role="secondary"]:disabled { color: %(faint)s; }
QTableView, QListView { background: %(surface)s; border: 1px solid %(border)s; border-radius: 10px;
    gridline-color: transparent; selection-background-color: %(selected)s;
    selection-color: %(text)s; outline: none; }
QTableView::item { padding: 4px 8px; border: none; }
QHeaderView::section { background: %(sidebar)s; color: %(muted)s; border: none;
    border-bottom: 1px solid %(border)s; padding: 6px 8px; font-size: 8.5pt; font-weight: 700; }
QLineEdit, QSpinBox, QComboBox { background: %(input_bg)s; border: 1px solid %(border)s;
    border-radius: 6px; padding: 4px 6px; color: %(text)s; }
QLineEdit:focus, QSpinBox:focus, QComboBox:focus { border-color: %(accent)s; }
QSpinBox::up-button, QSpinBox::down-button { width: 18px; border: none;
    background: transparent; }
QSpinBox::up-button { subcontrol-position: top right; }
QSpinBox::down-button { subcontrol-position: bottom right; }
QSpinBox::up-button:hover, QSpinBox::down-button:hover { background: %(hover)s; }
QSpinBox::up-arrow { image: url(%(arrow_up)s); width: 10px; height: 10px; }
QSpinBox::down-arrow { image: url(%(arrow_down)s); width: 10px; height: 10px; }
QSpinBox::up-arrow:disabled, QSpinBox::down-arrow:disabled { image: none; }
QComboBox::drop-down { border: none; width: 22px; }
QComboBox::down-arrow { image: url(%(arrow_down)s); width: 12px; height: 12px; }
QComboBox QAbstractItemView { background: %(surface)s; border: 1px solid %(border)s;
    selection-background-color: %(hover)s; selection-color: %(text)s; outline: none; }
QProgressBar { background: %(border)s; border: none; border-radius: 3px; max-height: 6px; }
QProgressBar::chunk { background: %(accent)s; border-radius: 3px; }
QSlider::groove:horizontal { height: 4px; background: %(border)s; border-radius: 2px; }
QSlider::sub-page:horizontal { background: %(accent)s; border-radius: 2px; }
QSlider::handle:horizontal { background: %(surface)s; border: 2px solid %(accent)s;
    width: 12px; height: 12px; margin: -6px 0; border-radius: 8px; }
"""
