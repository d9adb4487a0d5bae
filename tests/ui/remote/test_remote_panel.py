"""Adding a remote model in the Library: Hearth's own server (a subprocess) as the remote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from app.remote.registry import RemoteRegistry
from app.storage import Storage, database_path
from app.ui.remote.panel import RemoteModelsPanel
from tests.integration.server.conftest import Served
from tests.ui.remote.conftest import KEY
from tests.ui.screens import screenshot


def test_add_fetch_and_remove_a_remote_model(qtbot: Any, remote: Served, tmp_path: Path) -> None:
    storage = Storage(database_path(tmp_path / "app"))
    registry = RemoteRegistry(storage)
    panel = RemoteModelsPanel(registry)
    qtbot.addWidget(panel)
    panel.resize(720, 420)
    panel.show()
    dialog = panel.open_add_dialog()
    dialog.address.setText(remote.base_url)
    dialog.fetch()  # without the key: the server refuses, and the dialog says so
    qtbot.waitUntil(lambda: "Could not list" in dialog.message.text(), timeout=30_000)
    assert "API key" in dialog.message.text()
    dialog.key.setText(KEY)
    qtbot.mouseClick(dialog.fetch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.model.count() == 1, timeout=30_000)
    assert dialog.model.currentText() == remote.model_id
    dialog.context.setValue(1024)
    screenshot(dialog, "library-add-remote-model")
    dialog.buttons.accepted.emit()
    (endpoint,) = registry.endpoints()
    assert endpoint.base_url == remote.base_url and endpoint.api_key == KEY and endpoint.context_size == 1024
    assert panel.list.count() == 1 and remote.model_id in panel.list.item(0).text()
    screenshot(panel, "library-remote-models")

    # Kept across a restart of the app (the settings table).
    storage.close()
    again = RemoteRegistry(Storage(database_path(tmp_path / "app")))
    assert again.endpoints() == [endpoint]

    panel.list.setCurrentRow(0)
    qtbot.mouseClick(panel.remove_button, Qt.MouseButton.LeftButton)
    assert registry.endpoints() == [] and panel.list.count() == 0


def test_a_bad_address_is_refused_in_place(qtbot: Any, tmp_path: Path) -> None:
    panel = RemoteModelsPanel(RemoteRegistry(Storage(database_path(tmp_path))))
    qtbot.addWidget(panel)
    dialog = panel.open_add_dialog()
    dialog.address.setText("localhost:8642")
    dialog.model.setCurrentText("m")
    dialog.buttons.accepted.emit()
    assert dialog.isVisible() and "http://" in dialog.message.text()
    assert panel.registry.endpoints() == []
