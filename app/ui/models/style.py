"""The Models view's own stylesheet, built from the active theme's colours.

The app-wide sheet (``app.ui.theme``) belongs to the main window; this one is set on the
``modelManager`` widget only and rebuilt when the palette changes (light/dark switch).
"""

from __future__ import annotations

from app.ui.theme import Colors, colors, style_values


def models_stylesheet(c: Colors | None = None) -> str:
    return _QSS % style_values(c or colors())


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
QLineEdit, QSpinBox { background: %(input_bg)s; border: 1px solid %(border)s;
    border-radius: 6px; padding: 4px 6px; color: %(text)s; }
QLineEdit:focus, QSpinBox:focus { border-color: %(accent)s; }
QProgressBar { background: %(border)s; border: none; border-radius: 3px; max-height: 6px; }
QProgressBar::chunk { background: %(accent)s; border-radius: 3px; }
QSlider::groove:horizontal { height: 4px; background: %(border)s; border-radius: 2px; }
QSlider::sub-page:horizontal { background: %(accent)s; border-radius: 2px; }
QSlider::handle:horizontal { background: %(surface)s; border: 2px solid %(accent)s;
    width: 12px; height: 12px; margin: -6px 0; border-radius: 8px; }
"""
