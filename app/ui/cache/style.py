"""The dashboard's own stylesheet and chart colours, derived from the app theme's palette.

The app theme (``app.ui.theme``) styles the whole window; this adds the dashboard's cards,
captions and chips, in whichever scheme (light or dark) is active.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

from app.ui import theme


@dataclass(frozen=True, slots=True)
class ChartColors:
    background: str
    foreground: str
    grid: str
    series: tuple[str, ...]


TIER_COLORS = {"ram": "#3b82f6", "ram_file": "#8b5cf6", "disk": "#10b981"}
SLOT_COLORS = {"free": "#9ca3af", "prefilling": "#f59e0b", "generating": "#10b981", "pinned": "#3b82f6", "reading_ahead": "#a78bfa"}
PREFILL_COLOR = "#f59e0b"
DECODE_COLOR = "#10b981"


def is_dark() -> bool:
    if theme.colors().name == "dark":
        return True
    app = QApplication.instance()
    if isinstance(app, QApplication):
        return app.palette().color(QPalette.ColorRole.Window).lightness() < 128
    return False


def palette() -> theme.Colors:
    return theme.DARK if is_dark() else theme.colors()


def chart_colors() -> ChartColors:
    c = palette()
    return ChartColors(
        background=c.surface,
        foreground=c.muted,
        grid=c.border,
        series=("#e8590c", "#3b82f6", "#8b5cf6", "#10b981"),
    )


def stylesheet() -> str:
    return _QSS % theme.style_values(palette())


_QSS = """
QWidget#cacheDashboard { background: %(window)s; color: %(text)s; }
QWidget#cacheDashboard QLabel { color: %(text)s; }
QWidget#cacheScrollInner { background: %(window)s; }
QLabel#cacheTitle { font-size: 15pt; font-weight: 700; }
QLabel#cacheIntro, QLabel#cacheCaption { color: %(muted)s; }
QLabel#cacheCaption { font-size: 9pt; }
QLabel#cacheSection { color: %(muted)s; font-size: 8pt; font-weight: 700; letter-spacing: 0.5px; }
QLabel#cacheBigNumber { font-size: 16pt; font-weight: 700; color: %(text)s; }
QLabel[role="number"] { font-size: 13pt; font-weight: 700; color: %(text)s; }
QLabel#cacheNumberLabel { color: %(muted)s; font-size: 8.5pt; }
QLabel#cacheStatus { color: %(muted)s; }
QFrame#cacheCard { background: %(sidebar)s; border: 1px solid %(border)s; border-radius: 10px; }
QFrame#cacheCard QLabel { background: transparent; }
QFrame#slotChip { border-radius: 8px; border: 1px solid %(border)s; background: %(surface)s; }
QTabWidget#cacheTabs::pane { border: none; border-top: 1px solid %(border)s; }
QTabBar::tab { padding: 6px 14px; color: %(muted)s; border: none;
    border-bottom: 2px solid transparent; background: transparent; }
QTabBar::tab:selected { color: %(text)s; border-bottom: 2px solid %(accent)s; font-weight: 600; }
QTabBar::tab:hover { color: %(text)s; }
QTableView, QTreeView { background: %(surface)s; alternate-background-color: %(sidebar)s;
    border: 1px solid %(border)s; border-radius: 8px; gridline-color: transparent;
    selection-background-color: %(accent_soft)s; selection-color: %(text)s; color: %(text)s; }
QTreeView::item, QTableView::item { padding: 2px 4px; }
QHeaderView::section { background: %(sidebar)s; color: %(muted)s; border: none;
    border-bottom: 1px solid %(border)s; padding: 4px 6px; font-weight: 600; }
QPlainTextEdit#cacheText { background: %(code_bg)s; border: 1px solid %(border)s;
    border-radius: 8px; color: %(text)s; padding: 6px; }
QProgressBar { border: 1px solid %(border)s; border-radius: 6px; background: %(surface)s;
    text-align: center; color: %(text)s; min-height: 14px; }
QProgressBar::chunk { border-radius: 5px; background: %(accent)s; }
QProgressBar[tier="ram"]::chunk { background: #3b82f6; }
QProgressBar[tier="ram_file"]::chunk { background: #8b5cf6; }
QProgressBar[tier="disk"]::chunk { background: #10b981; }
QLineEdit, QDoubleSpinBox { background: %(input_bg)s; border: 1px solid %(border)s;
    border-radius: 6px; padding: 3px 6px; color: %(text)s; }
QToolButton#cacheAction { border: 1px solid %(border)s; border-radius: 6px; padding: 4px 10px;
    background: %(surface)s; color: %(text)s; }
QToolButton#cacheAction:hover { background: %(hover)s; }
QToolButton#cacheAction[popupMode="InstantPopup"] { padding-right: 22px; }
QToolButton#cacheAction::menu-indicator { image: url(%(arrow_down)s); subcontrol-origin: padding;
    subcontrol-position: center right; width: 10px; height: 10px; right: 6px; }
QToolButton#cacheAction:disabled { color: %(faint)s; }
"""
