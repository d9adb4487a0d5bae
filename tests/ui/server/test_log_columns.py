"""Issue 50, item 9: the Local server page shows its request log's columns whole — the
Settings dialog opens 460 px wide, where the nine columns were cut."""

from __future__ import annotations

import threading
from typing import Any

import openai
from PySide6.QtCore import Qt

from app.ui.server import LocalServerPanel
from tests.ui.conftest import WindowFactory
from tests.ui.screens import screenshot

LEFT = Qt.MouseButton.LeftButton


def test_the_request_log_shows_every_column_whole(qtbot: Any, make_window: WindowFactory) -> None:
    window = make_window()
    dialog = window.app_actions.open_settings()
    panel = dialog.findChild(LocalServerPanel, "localServerPanel")
    assert panel is not None and dialog.width() < 600  # how it opens
    bar = dialog.tabs.tabBar()
    qtbot.mouseClick(bar, LEFT, pos=bar.tabRect(dialog.tabs.indexOf(panel)).center())
    window.local_server.start(0)
    qtbot.waitUntil(lambda: panel.status_label.text() == "● On", timeout=30_000)
    url = panel.address.text()

    def client() -> None:
        c = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello"}], max_tokens=4)

    worker = threading.Thread(target=client)
    worker.start()
    qtbot.waitUntil(lambda: not worker.is_alive(), timeout=120_000)
    qtbot.waitUntil(lambda: panel.log_model.rowCount() == 1, timeout=30_000)
    view = panel.log_view
    header = view.horizontalHeader()

    def whole() -> None:
        for col in range(header.count()):
            need = max(header.sectionSizeHint(col), view.sizeHintForColumn(col))
            assert header.sectionSize(col) >= need, (panel.log_model.columns[col], header.sectionSize(col), need)
        assert view.horizontalScrollBar().maximum() == 0  # nothing off to the side

    qtbot.waitUntil(whole, timeout=5_000)
    screenshot(dialog, "settings-local-server-default-size")
    panel.switch.setChecked(False)
    qtbot.waitUntil(lambda: panel.status_label.text() == "● Off", timeout=30_000)
