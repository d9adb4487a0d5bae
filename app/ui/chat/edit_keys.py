"""Keys of the edit-and-branch box: Ctrl+Enter sends the edit, Esc cancels it.

An event filter rather than shortcuts: it claims the keys in ``ShortcutOverride`` first, so
the window's own Esc (stop the reply) never fires while the edit box has the focus.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent

SUBMIT_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)


class EditKeys(QObject):
    """Install on the edit box: ``submit`` on Ctrl+Enter, ``cancel`` on Esc."""

    def __init__(
        self, parent: QObject, *, submit: Callable[[], None], cancel: Callable[[], None]
    ) -> None:
        super().__init__(parent)
        self._submit = submit
        self._cancel = cancel

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 — Qt override
        kind = event.type()
        if kind not in (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress):
            return False
        assert isinstance(event, QKeyEvent)
        action = self._action_for(event)
        if action is None:
            return False
        event.accept()
        if kind == QEvent.Type.KeyPress:
            action()
            return True
        return False  # ShortcutOverride accepted: the key press comes to us, not a shortcut

    def _action_for(self, event: QKeyEvent) -> Callable[[], None] | None:
        mods = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
        if event.key() in SUBMIT_KEYS and mods == Qt.KeyboardModifier.ControlModifier:
            return self._submit
        if event.key() == Qt.Key.Key_Escape and mods == Qt.KeyboardModifier.NoModifier:
            return self._cancel
        return None
