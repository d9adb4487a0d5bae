"""Styles of the chat's model picker, context meter, view divider and Continue button.

Applied to the chat page itself (it cascades to these widgets only); re-applied when the
theme changes, from the active palette (``app.ui.theme.colors``).
"""

from __future__ import annotations

from app.ui.theme import Colors, colors

AMBER = {"light": "#b45309", "dark": "#f59e0b"}
AMBER_BG = {"light": "#fef3c7", "dark": "#3b2f12"}


def amber(c: Colors | None = None) -> str:
    c = c or colors()
    return AMBER.get(c.name, AMBER["light"])


def chat_extras_qss(c: Colors | None = None) -> str:
    c = c or colors()
    warn, warn_bg = amber(c), AMBER_BG.get(c.name, AMBER_BG["light"])
    return f"""
QComboBox#modelPicker {{ background: {c.accent_soft}; color: {c.accent}; border: none;
    border-radius: 10px; padding: 2px 10px; font-size: 8.5pt; font-weight: 600; }}
QComboBox#modelPicker[loaded="false"] {{ background: {c.error_bg}; color: {c.error_text}; }}
QComboBox#modelPicker::drop-down {{ border: none; width: 14px; }}
QLabel#contextMeter {{ color: {c.faint}; font-size: 8pt; padding: 0 4px; }}
QLabel#contextMeter[level="near"] {{ color: {warn}; font-weight: 600; }}
QLabel#contextMeter[level="over"] {{ color: {c.error_text}; font-weight: 600; }}
QFrame#contextDivider QLabel {{ color: {c.muted}; font-size: 8.5pt; }}
QFrame#contextDivider QFrame#dividerLine {{ background: {c.border}; max-height: 1px;
    min-height: 1px; }}
QLabel#dividerSummary {{ color: {c.muted}; font-size: 8.5pt; border-left: 2px solid {c.border};
    padding-left: 8px; }}
QFrame#contextDivider QLabel#dividerNoSummary {{ color: {warn}; border-left: 2px solid {warn};
    padding-left: 8px; }}
QFrame#cutNotice {{ background: {warn_bg}; border-radius: 8px; }}
QFrame#cutNotice QLabel {{ color: {warn}; }}
QFrame#unansweredCard {{ background: {warn_bg}; border-radius: 10px; }}
QFrame#unansweredCard QLabel {{ color: {warn}; }}
QLabel#composerNote {{ color: {warn}; font-size: 8pt; padding: 0 4px; }}
QLabel#prefillText {{ color: {c.muted}; font-size: 9pt; }}
QLabel#readAheadText {{ color: {c.muted}; font-size: 8pt; padding: 0 4px; }}
"""
