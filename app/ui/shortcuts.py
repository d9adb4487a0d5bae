"""Every keyboard shortcut of the app in one table, and the dialog that lists them.

The window's actions (``app.ui.app_actions``) take their keys from :data:`SHORTCUTS`, and
Help → Keyboard shortcuts shows the same table, so the list cannot drift from what works.
Rows marked ``in_text`` are handled by a text box itself (the composer, the edit box) and are
listed for reference only.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QLabel,
    QVBoxLayout,
    QWidget,
)


@dataclass(frozen=True, slots=True)
class Shortcut:
    name: str  # the action's id in AppActions.actions
    keys: str  # portable QKeySequence text
    label: str  # what it does, as the list shows it
    group: str
    in_text: bool = False  # handled by a text box, not by a window action


SHORTCUTS: tuple[Shortcut, ...] = (
    Shortcut("new_chat", "Ctrl+N", "New chat", "Chats"),
    Shortcut("search", "Ctrl+K", "Search chats", "Chats"),
    Shortcut("stop", "Esc", "Stop the reply being written", "Chats"),
    Shortcut("send", "Return", "Send the message", "Writing", in_text=True),
    Shortcut("newline", "Shift+Return", "New line in the message", "Writing", in_text=True),
    Shortcut("submit_edit", "Ctrl+Return", "Send an edited message as a new branch", "Writing",
             in_text=True),
    Shortcut("cancel_edit", "Esc", "Cancel an edit", "Writing", in_text=True),
    Shortcut("go_chat", "Ctrl+1", "Go to Chat", "Window"),
    Shortcut("go_models", "Ctrl+2", "Go to Models", "Window"),
    Shortcut("go_cache", "Ctrl+3", "Go to Cache", "Window"),
    Shortcut("settings", "Ctrl+,", "Settings", "Window"),
    Shortcut("shortcuts", "Ctrl+/", "Keyboard shortcuts", "Window"),
    Shortcut("quit", "Ctrl+Q", "Quit Hearth", "Window"),
)


def shortcut(name: str) -> Shortcut:
    return next(s for s in SHORTCUTS if s.name == name)


def key_text(keys: str) -> str:
    """The keys as this platform writes them (``Ctrl+N``, ``⌘N`` on macOS); the main
    keyboard's Return key is written "Enter", as people call it."""
    text = QKeySequence(keys).toString(QKeySequence.SequenceFormat.NativeText)
    return text.replace("Return", "Enter")


class ShortcutsDialog(QDialog):
    """Help → Keyboard shortcuts: the table above, grouped."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("shortcutsDialog")
        self.setWindowTitle("Keyboard shortcuts")
        grid = QGridLayout()
        grid.setHorizontalSpacing(18)
        grid.setVerticalSpacing(6)
        row = 0
        group = ""
        self.rows: list[tuple[str, str]] = []  # (keys as shown, label): what a person reads
        for s in SHORTCUTS:
            if s.group != group:
                group = s.group
                heading = QLabel(group.upper())
                heading.setObjectName("sectionLabel")
                grid.addWidget(heading, row, 0, 1, 2)
                row += 1
            keys = QLabel(key_text(s.keys))
            keys.setObjectName("keyCap")
            keys.setAlignment(Qt.AlignmentFlag.AlignCenter)
            grid.addWidget(keys, row, 0, Qt.AlignmentFlag.AlignLeft)
            grid.addWidget(QLabel(s.label), row, 1)
            self.rows.append((keys.text(), s.label))
            row += 1
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(22, 18, 22, 14)
        # NOTE: no layout-driven minimum pushed to the platform window (offscreen warns).
        layout.setSizeConstraint(QVBoxLayout.SizeConstraint.SetNoConstraint)
        layout.addLayout(grid)
        layout.addSpacing(8)
        layout.addWidget(buttons)
