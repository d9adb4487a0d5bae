"""The chat area in a narrow window: the sidebar steps aside for the settings panel.

Sidebar (≥ 200 px) + conversation + settings panel (≥ 260 px) do not fit an 800 px window:
the splitter squeezed the conversation to a sliver and clipped the panel. While the panel is
open and the conversation would get less than ``MIN_CHAT_WIDTH``, the sidebar is hidden;
it comes back as soon as there is room again or the panel closes. Only a sidebar this
helper hid is ever shown again by it.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QSplitter, QWidget

MIN_CHAT_WIDTH = 380


class NarrowLayout(QObject):
    def __init__(self, splitter: QSplitter, sidebar: QWidget, panel: QWidget) -> None:
        super().__init__(splitter)
        self._splitter = splitter
        self._sidebar = sidebar
        self._panel = panel
        self.sidebar_hidden = False  # by us
        splitter.installEventFilter(self)
        panel.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 — Qt override
        if event.type() in (QEvent.Type.Resize, QEvent.Type.Show, QEvent.Type.Hide):
            self.update()
        return False

    def update(self) -> None:
        needed = (
            self._sidebar.minimumSizeHint().width()
            + MIN_CHAT_WIDTH
            + max(self._panel.minimumWidth(), self._panel.minimumSizeHint().width())
        )
        crowded = self._panel.isVisibleTo(self._splitter) and self._splitter.width() < needed
        if crowded and self._sidebar.isVisibleTo(self._splitter):
            self._sidebar.hide()
            self.sidebar_hidden = True
        elif not crowded and self.sidebar_hidden:
            self.sidebar_hidden = False
            self._sidebar.show()
