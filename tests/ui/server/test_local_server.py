"""The "Local server" switch in Settings: the window's own engine behind the OpenAI API.

Real window, tiny model, real uvicorn on a free port, the official ``openai`` client.
"""

from __future__ import annotations

import threading
from typing import Any

import openai
from pytestqt.modeltest import ModelTester

from app.ui.server import LocalServerPanel
from tests.ui.conftest import WindowFactory
from tests.ui.screens import screenshot


def _open_panel(window: Any) -> LocalServerPanel:
    dialog = window.app_actions.open_settings()
    panel = dialog.findChild(LocalServerPanel, "localServerPanel")
    assert panel is not None
    dialog.tabs.setCurrentWidget(panel)
    return panel


def test_switch_serves_the_windows_engine_and_logs_requests(qtbot: Any, make_window: WindowFactory) -> None:
    window = make_window()
    panel = _open_panel(window)
    ModelTester(None).check(panel.log_model)
    assert panel.status_label.text() == "● Off" and not panel.address.isVisible()
    window.local_server.start(0)  # any free port (a fixed one could be taken on a test machine)
    qtbot.waitUntil(lambda: panel.status_label.text() == "● On", timeout=30_000)
    assert panel.switch.isChecked()
    url = panel.address.text()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")

    # A client on another thread (the GUI thread keeps processing events meanwhile).
    result: dict[str, Any] = {}

    def client() -> None:
        c = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        result["models"] = [m.id for m in c.models.list().data]
        result["reply"] = c.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hello"}], max_tokens=6, temperature=0,
        )

    worker = threading.Thread(target=client)
    worker.start()
    qtbot.waitUntil(lambda: not worker.is_alive(), timeout=120_000)
    assert result["models"] == ["tiny"]
    assert result["reply"].usage.completion_tokens <= 6
    qtbot.waitUntil(lambda: panel.log_model.rowCount() == 1, timeout=30_000)
    row = panel.log_model.records[0]
    assert row.endpoint == "chat" and row.state == "done" and row.completion_tokens == result["reply"].usage.completion_tokens
    assert panel.live_model.rowCount() == 0
    panel.window().resize(900, 640)
    screenshot(panel.window(), "settings-local-server")

    panel.switch.setChecked(False)  # the switch stops it
    qtbot.waitUntil(lambda: panel.status_label.text() == "● Off", timeout=30_000)
    try:
        openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=5).models.list()
        raise AssertionError("the server still answers after the switch went off")
    except openai.APIConnectionError:
        pass


def test_the_switch_is_remembered_and_a_taken_port_is_reported(
    qtbot: Any, make_window: WindowFactory, data_dir: Any
) -> None:
    import socket

    window = make_window()
    panel = _open_panel(window)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        panel.port.setValue(port)
        panel.switch.setChecked(True)
        qtbot.waitUntil(lambda: str(port) in panel.hint.text(), timeout=30_000)
        assert not panel.switch.isChecked() and window.local_server.status.state == "failed"
    assert window.storage.get_setting("local_server")["enabled"] is True
    # Next time the window opens, the server comes back on by itself (the port is free now).
    window.close()
    again = make_window()
    qtbot.waitUntil(lambda: again.local_server.status.state == "on", timeout=30_000)
    assert again.local_server.status.url == f"http://127.0.0.1:{port}/v1"
