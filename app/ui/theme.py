"""Light and dark themes: a palette plus one stylesheet template, following the system.

``apply_theme`` picks the scheme from ``QStyleHints.colorScheme()`` unless the user chose
one; ``current_icon`` draws icons in the active scheme's colours.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPainter, QPalette, QPixmap, QPolygonF
from PySide6.QtWidgets import QApplication

from app.ui.widgets.icons import icon


@dataclass(frozen=True, slots=True)
class Colors:
    name: str
    window: str
    surface: str
    sidebar: str
    rail: str
    border: str
    text: str
    muted: str
    faint: str
    accent: str
    accent_text: str
    accent_soft: str
    user_bubble: str
    code_bg: str
    code_header: str
    hover: str
    selected: str
    input_bg: str
    error_bg: str
    error_text: str
    info_bg: str
    info_text: str


LIGHT = Colors(
    name="light", window="#ffffff", surface="#ffffff", sidebar="#f7f7f8", rail="#efeff1",
    border="#e4e4e7", text="#1f2328", muted="#6b7280", faint="#9ca3af", accent="#e8590c",
    accent_text="#ffffff", accent_soft="#fff1e8", user_bubble="#f1f1f3", code_bg="#f6f8fa",
    code_header="#eceef1", hover="#ececef", selected="#e4e4e8", input_bg="#ffffff",
    error_bg="#fdecec", error_text="#9b1c1c", info_bg="#eef2ff", info_text="#283593",
)  # fmt: skip

DARK = Colors(
    name="dark", window="#1e1f22", surface="#1e1f22", sidebar="#18191b", rail="#131416",
    border="#2e3035", text="#e8e8ea", muted="#a0a4ab", faint="#6f737a", accent="#f97316",
    accent_text="#ffffff", accent_soft="#3a2516", user_bubble="#2c2e33", code_bg="#151619",
    code_header="#232428", hover="#26282c", selected="#2f3136", input_bg="#25272b",
    error_bg="#3b1f22", error_text="#ffb4b4", info_bg="#1f2640", info_text="#c5cdfa",
)  # fmt: skip

_current: Colors = LIGHT


def colors() -> Colors:
    return _current


def current_icon(name: str, tone: str = "text") -> QIcon:
    """An icon in the active scheme: ``tone`` is ``text``, ``muted``, ``accent`` or ``on_accent``."""
    c = _current
    color = {"text": c.text, "muted": c.muted, "accent": c.accent, "on_accent": c.accent_text}[tone]
    return icon(name, color)


def system_scheme() -> str:
    hints = QGuiApplication.styleHints()
    return "dark" if hints.colorScheme() == Qt.ColorScheme.Dark else "light"


def apply_theme(app: QApplication, scheme: str = "system") -> Colors:
    """Apply ``light``, ``dark`` or the ``system`` scheme to the whole application."""
    global _current
    name = system_scheme() if scheme == "system" else scheme
    _current = DARK if name == "dark" else LIGHT
    app.setStyle("Fusion")
    app.setPalette(_palette(_current))
    app.setStyleSheet(stylesheet(_current))
    return _current


def _palette(c: Colors) -> QPalette:
    pal = QPalette()
    role = QPalette.ColorRole
    for r, value in (
        (role.Window, c.window), (role.WindowText, c.text), (role.Base, c.input_bg),
        (role.AlternateBase, c.sidebar), (role.Text, c.text), (role.Button, c.surface),
        (role.ButtonText, c.text), (role.Highlight, c.accent), (role.HighlightedText, c.accent_text),
        (role.ToolTipBase, c.surface), (role.ToolTipText, c.text), (role.PlaceholderText, c.faint),
        (role.Link, c.accent), (role.Mid, c.border), (role.Midlight, c.border),
    ):  # fmt: skip
        pal.setColor(r, QColor(value))
    pal.setColor(QPalette.ColorGroup.Disabled, role.Text, QColor(c.faint))
    pal.setColor(QPalette.ColorGroup.Disabled, role.ButtonText, QColor(c.faint))
    pal.setColor(QPalette.ColorGroup.Disabled, role.WindowText, QColor(c.faint))
    return pal


_ARROW_DIR = Path(tempfile.gettempdir()) / "hearth-ui-arrows"


def arrow_image(direction: str, color: str) -> str:
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
        pts = [(3, 5.5), (13, 5.5), (8, 11)] if direction == "down" else [(3, 10.5), (13, 10.5), (8, 5)]
        p.drawPolygon(QPolygonF([QPointF(x, y) for x, y in pts]))
        p.end()
        pix.save(str(path))
    return path.as_posix()


def style_values(c: Colors) -> dict[str, str]:
    """The colours of ``c`` plus the arrow images, for ``%``-formatting a stylesheet."""
    values = {k: str(getattr(c, k)) for k in c.__dataclass_fields__}
    values["arrow_up"] = arrow_image("up", c.muted)
    values["arrow_down"] = arrow_image("down", c.muted)
    values["arrow_down_faint"] = arrow_image("down", c.faint)
    return values


def stylesheet(c: Colors) -> str:
    return _QSS % style_values(c)


_QSS = """
QWidget { font-size: 10pt; }
QMainWindow, QWidget#chatPanel, QStackedWidget#chatView, QScrollArea#conversationPage, QWidget#chatColumn { background: %(window)s; }
QToolTip { background: %(surface)s; color: %(text)s; border: 1px solid %(border)s; padding: 4px 6px; }

/* navigation rail */
QFrame#navRail { background: %(rail)s; border-right: 1px solid %(border)s; }
QToolButton#navButton { border: none; border-radius: 10px; padding: 6px 2px; color: %(muted)s;
    font-size: 8pt; min-width: 54px; }
QToolButton#navButton:hover { background: %(hover)s; color: %(text)s; }
QToolButton#navButton:checked { background: %(selected)s; color: %(text)s; font-weight: 600; }
QLabel#brandMark { background: %(accent)s; color: %(accent_text)s; border-radius: 9px;
    font-weight: 700; font-size: 12pt; }

/* sidebar */
QFrame#sidebar { background: %(sidebar)s; border-right: 1px solid %(border)s; }
QLabel#sidebarTitle { font-size: 12pt; font-weight: 700; color: %(text)s; }
QPushButton#newChatButton { background: %(surface)s; border: 1px solid %(border)s; border-radius: 8px;
    padding: 7px 12px; font-weight: 600; color: %(text)s; text-align: left; }
QPushButton#newChatButton:hover { background: %(hover)s; }
QLineEdit#searchField { background: %(input_bg)s; border: 1px solid %(border)s; border-radius: 8px;
    padding: 6px 8px; color: %(text)s; }
QLineEdit#searchField:focus { border-color: %(accent)s; }
QListView#conversationList { background: transparent; border: none; outline: none; }
QLabel#searchEmptyText { color: %(muted)s; }
QWidget#searchEmpty { background: transparent; }
QListView#conversationList QLineEdit { background: %(input_bg)s; border: 1px solid %(accent)s;
    border-radius: 6px; padding: 2px 6px; }

/* chat header */
QFrame#chatHeader { background: %(window)s; border-bottom: 1px solid %(border)s; }
QLabel#chatTitle { font-size: 12pt; font-weight: 600; color: %(text)s; }
QLabel#modelChip { background: %(accent_soft)s; color: %(accent)s; border-radius: 10px;
    padding: 2px 10px; font-size: 8.5pt; font-weight: 600; }
QLabel#adapterChip { background: %(info_bg)s; color: %(info_text)s; border-radius: 10px;
    padding: 2px 10px; font-size: 8.5pt; font-weight: 600; }
QToolButton#headerButton { border: 1px solid transparent; border-radius: 8px; padding: 5px 8px;
    color: %(muted)s; }
QToolButton#headerButton:hover, QToolButton#headerButton:checked { background: %(hover)s;
    color: %(text)s; }

/* messages */
QFrame#userBubble { background: %(user_bubble)s; border-radius: 16px; }
QLabel#messageText { color: %(text)s; font-size: 10.5pt; }
QLabel#avatar { background: %(accent)s; color: %(accent_text)s; border-radius: 12px; font-weight: 700;
    font-size: 9pt; }
QLabel#authorLabel { font-weight: 600; color: %(text)s; }
QLabel#replyMeta { color: %(faint)s; font-size: 8.5pt; }
QLabel#emptyTitle { font-size: 18pt; font-weight: 600; color: %(text)s; }
QLabel#emptyHint { color: %(muted)s; font-size: 10.5pt; }
QToolButton#thinkingToggle { border: none; color: %(muted)s; font-style: italic; padding: 2px 0; }
QToolButton#thinkingToggle:hover { color: %(text)s; }
QLabel#thinkingText { color: %(muted)s; border-left: 2px solid %(border)s; padding-left: 10px; }
QToolButton#messageAction { border: none; border-radius: 6px; padding: 3px; }
QToolButton#messageAction:hover { background: %(hover)s; }
QToolButton#messageAction:disabled { background: transparent; }
QLabel#branchLabel { color: %(muted)s; font-size: 8.5pt; padding: 0 2px; }
QFrame#codeBlock { background: %(code_bg)s; border: 1px solid %(border)s; border-radius: 10px; }
QFrame#codeHeader { background: %(code_header)s; border-top-left-radius: 10px;
    border-top-right-radius: 10px; border-bottom: 1px solid %(border)s; }
QLabel#codeLang { color: %(muted)s; font-size: 8.5pt; }
QToolButton#copyButton { border: none; color: %(muted)s; font-size: 8.5pt; padding: 2px 6px;
    border-radius: 6px; }
QToolButton#copyButton:hover { background: %(hover)s; color: %(text)s; }
QLabel#codeText { color: %(text)s; padding: 10px 12px; }
QFrame#errorCard { background: %(error_bg)s; border-radius: 10px; }
QLabel#errorCardText { color: %(error_text)s; }
QFrame#editBox { background: %(input_bg)s; border: 1px solid %(accent)s; border-radius: 12px; }
QPlainTextEdit#editInput { border: none; background: transparent; color: %(text)s; }

/* composer */
QFrame#composer { background: %(input_bg)s; border: 1px solid %(border)s; border-radius: 16px; }
QPlainTextEdit#messageInput { background: transparent; border: none; color: %(text)s;
    font-size: 10.5pt; }
QToolButton#sendButton { background: %(accent)s; border: none; border-radius: 16px; }
QToolButton#sendButton:disabled { background: %(border)s; }
QToolButton#stopButton { background: %(text)s; border: none; border-radius: 16px; }
QLabel#composerHint { color: %(faint)s; font-size: 8pt; }

/* buttons */
QPushButton#primaryButton { background: %(accent)s; color: %(accent_text)s; border: none;
    border-radius: 8px; padding: 6px 14px; font-weight: 600; }
QPushButton#secondaryButton { background: transparent; color: %(text)s; border: 1px solid %(border)s;
    border-radius: 8px; padding: 6px 14px; }
QPushButton#secondaryButton:hover { background: %(hover)s; }

/* settings panel */
QScrollArea#settingsScroll, QWidget#settingsPanel { background: %(sidebar)s; }
QScrollArea#settingsScroll { border: none; border-left: 1px solid %(border)s; }
QLabel#panelTitle { font-size: 11pt; font-weight: 700; color: %(text)s; }
QLabel#sectionLabel { color: %(muted)s; font-size: 8pt; font-weight: 700; letter-spacing: 0.5px;
    padding-top: 8px; }
QWidget#settingsPanel QPlainTextEdit, QWidget#settingsPanel QLineEdit,
QWidget#settingsPanel QSpinBox, QWidget#settingsPanel QDoubleSpinBox {
    background: %(input_bg)s; border: 1px solid %(border)s; border-radius: 6px; padding: 3px 5px;
    color: %(text)s; }
QWidget#settingsPanel QPlainTextEdit:focus, QWidget#settingsPanel QLineEdit:focus,
QWidget#settingsPanel QSpinBox:focus, QWidget#settingsPanel QDoubleSpinBox:focus {
    border-color: %(accent)s; }

QWidget#settingsPanel QAbstractSpinBox::up-button, QWidget#settingsPanel QAbstractSpinBox::down-button {
    width: 0px; border: none; }
QWidget#settingsPanel QAbstractSpinBox::up-arrow, QWidget#settingsPanel QAbstractSpinBox::down-arrow {
    width: 0px; height: 0px; }
QCheckBox { color: %(text)s; spacing: 8px; }
QCheckBox::indicator { width: 14px; height: 14px; border: 1px solid %(faint)s; border-radius: 4px;
    background: %(input_bg)s; }
QCheckBox::indicator:hover { border-color: %(accent)s; }
QCheckBox::indicator:checked { background: %(accent)s; border-color: %(accent)s; }

/* combo boxes, spin boxes, menu buttons: one look everywhere (our arrows, never the
   platform's boxed ones that a border rule leaves behind) */
QComboBox { background: %(input_bg)s; border: 1px solid %(border)s; border-radius: 6px;
    padding: 3px 8px; color: %(text)s; }
QComboBox:hover { border-color: %(faint)s; }
QComboBox:focus, QComboBox:on { border-color: %(accent)s; }
QComboBox:disabled { color: %(faint)s; }
QComboBox::drop-down { subcontrol-origin: padding; subcontrol-position: center right;
    border: none; width: 22px; }
QComboBox::down-arrow { image: url(%(arrow_down)s); width: 12px; height: 12px; }
QComboBox::down-arrow:disabled { image: url(%(arrow_down_faint)s); }
QComboBox QAbstractItemView { background: %(surface)s; border: 1px solid %(border)s;
    selection-background-color: %(hover)s; selection-color: %(text)s; outline: none; }
QAbstractSpinBox::up-button, QAbstractSpinBox::down-button { width: 18px; border: none;
    background: transparent; }
QAbstractSpinBox::up-button { subcontrol-position: top right; }
QAbstractSpinBox::down-button { subcontrol-position: bottom right; }
QAbstractSpinBox::up-button:hover, QAbstractSpinBox::down-button:hover { background: %(hover)s; }
QAbstractSpinBox::up-arrow { image: url(%(arrow_up)s); width: 10px; height: 10px; }
QAbstractSpinBox::down-arrow { image: url(%(arrow_down)s); width: 10px; height: 10px; }
QAbstractSpinBox::up-arrow:disabled, QAbstractSpinBox::down-arrow:disabled { image: none; }
QToolButton::menu-indicator, QPushButton::menu-indicator { image: url(%(arrow_down)s);
    subcontrol-origin: padding; subcontrol-position: center right; width: 10px; height: 10px;
    right: 4px; }
QToolButton[popupMode="MenuButtonPopup"], QToolButton[popupMode="InstantPopup"] { padding-right: 18px; }

/* banner */
QFrame#notificationBanner { border-bottom: 1px solid %(border)s; background: %(info_bg)s; }
QFrame#notificationBanner[kind="error"] { background: %(error_bg)s; }
QFrame#notificationBanner[overlay="true"] { border-right: 1px solid %(border)s; border-bottom-right-radius: 8px; }
QFrame#notificationBanner QLabel#bannerText { color: %(info_text)s; }
QFrame#notificationBanner[kind="error"] QLabel#bannerText { color: %(error_text)s; }
QPushButton#bannerAction { background: transparent; border: 1px solid %(border)s; border-radius: 6px;
    padding: 3px 10px; color: %(text)s; font-weight: 600; }
QToolButton#bannerClose { border: none; color: %(muted)s; padding: 2px 6px; }

/* placeholders, status bar, splitters, scrollbars */
QLabel#placeholderTitle { font-size: 16pt; font-weight: 600; color: %(text)s; }
QLabel#placeholderText { color: %(muted)s; }
QStatusBar { background: %(rail)s; border-top: 1px solid %(border)s; color: %(muted)s; }
QStatusBar QLabel { color: %(muted)s; padding: 0 8px; font-size: 8.5pt; }
QStatusBar::item { border: none; }
QSplitter::handle { background: %(border)s; }
QScrollBar:vertical { background: transparent; width: 10px; margin: 2px; }
QScrollBar::handle:vertical { background: %(border)s; border-radius: 4px; min-height: 30px; }
QScrollBar::handle:vertical:hover { background: %(faint)s; }
QScrollBar::add-line, QScrollBar::sub-line { height: 0; width: 0; }
QScrollBar::add-page, QScrollBar::sub-page { background: transparent; }
QScrollBar:horizontal { background: transparent; height: 10px; margin: 2px; }
QScrollBar::handle:horizontal { background: %(border)s; border-radius: 4px; min-width: 30px; }
QMenuBar { background: %(rail)s; color: %(text)s; border-bottom: 1px solid %(border)s; }
QMenuBar::item { background: transparent; padding: 3px 10px; }
QMenuBar::item:selected { background: %(hover)s; border-radius: 4px; }
QLabel#keyCap { background: %(code_bg)s; border: 1px solid %(border)s; border-radius: 5px;
    padding: 1px 8px; font-family: monospace; color: %(text)s; }
QPushButton[class="secondary"] { background: transparent; color: %(text)s; border: 1px solid %(border)s;
    border-radius: 7px; padding: 4px 10px; }
QPushButton[class="secondary"]:hover { background: %(hover)s; }
QMenu { background: %(surface)s; border: 1px solid %(border)s; border-radius: 8px; padding: 4px; }
QMenu::item { padding: 6px 18px; border-radius: 6px; color: %(text)s; }
QMenu::item:selected { background: %(hover)s; }
"""
