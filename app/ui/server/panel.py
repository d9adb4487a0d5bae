"""The Settings page "Local server": the switch, the address, the live requests, the log.

Everything here reacts to ``LocalServer`` signals; nothing waits for the server. The switch
and port are remembered in the app database (``local_server`` setting), so the server comes
back on with the window next time (``restore_local_server``).
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.server.activity import RequestRecord
from app.server.config import DEFAULT_PORT
from app.storage import Storage
from app.ui.chat.sampling_form import section
from app.ui.server.local_server import LocalServer, ServerStatus
from app.ui.server.requests_model import RequestTableModel

log = logging.getLogger(__name__)

SETTING = "local_server"
STATUS_WORDS = {"off": "Off", "starting": "Starting…", "on": "On", "stopping": "Stopping…", "failed": "Off"}


def restore_local_server(server: LocalServer, storage: Storage | None) -> None:
    """Start the server if it was on when the app last closed."""
    saved = _load(storage)
    if saved.get("enabled"):
        server.start(_port(saved), str(saved.get("api_key") or "") or None)


def _port(saved: dict[str, object]) -> int:
    port = saved.get("port", DEFAULT_PORT)
    return port if isinstance(port, int) else DEFAULT_PORT


def _load(storage: Storage | None) -> dict[str, object]:
    try:
        value = storage.get_setting(SETTING, {}) if storage is not None else {}
    except Exception:  # noqa: BLE001 — a broken settings row must not stop the page
        log.warning("could not read the local server settings", exc_info=True)
        return {}
    return value if isinstance(value, dict) else {}


class LocalServerPanel(QWidget):
    def __init__(
        self, server: LocalServer, storage: Storage | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("localServerPanel")
        self.server = server
        self.storage = storage
        saved = _load(storage)

        self.switch = QCheckBox("Serve this app's models to other programs on this computer")
        self.switch.setObjectName("localServerSwitch")
        self.port = QSpinBox()
        self.port.setObjectName("localServerPort")
        self.port.setRange(1024, 65535)
        self.port.setValue(_port(saved))
        self.key = QLineEdit(str(saved.get("api_key") or ""))
        self.key.setObjectName("localServerKey")
        self.key.setPlaceholderText("optional")
        self.key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.status_label = QLabel()
        self.status_label.setObjectName("localServerStatus")
        self.address = QLineEdit()
        self.address.setObjectName("localServerAddress")
        self.address.setReadOnly(True)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setObjectName("localServerCopy")
        self.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.address.text()))
        self.hint = QLabel()
        self.hint.setObjectName("caption")
        self.hint.setWordWrap(True)
        self.hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.live_model = RequestTableModel()
        self.log_model = RequestTableModel()
        self.live_view = _table(self.live_model, "localServerLive")
        self.log_view = _table(self.log_model, "localServerLog")
        for record in server.activity.recent():
            self.log_model.upsert(record)
        for record in server.activity.live():
            self.live_model.upsert(record)

        form = QHBoxLayout()
        form.addWidget(QLabel("Port"))
        form.addWidget(self.port)
        form.addSpacing(12)
        form.addWidget(QLabel("API key"))
        form.addWidget(self.key, 1)
        addr = QHBoxLayout()
        addr.addWidget(self.status_label)
        addr.addWidget(self.address, 1)
        addr.addWidget(self.copy_button)
        v = QVBoxLayout(self)
        v.addWidget(section("LOCAL SERVER"))
        v.addWidget(self.switch)
        v.addLayout(form)
        v.addLayout(addr)
        v.addWidget(self.hint)
        v.addWidget(section("LIVE REQUESTS"))
        v.addWidget(self.live_view, 1)
        v.addWidget(section("REQUEST LOG"))
        v.addWidget(self.log_view, 2)

        self._show(server.status)
        server.status_changed.connect(self._show)
        server.request_changed.connect(self._on_request)
        self.switch.toggled.connect(self._on_switch)
        self.log_model.rowsInserted.connect(lambda *_: QTimer.singleShot(0, self.fit_window))

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        QTimer.singleShot(0, self.fit_window)  # once the tab is laid out

    def fit_window(self) -> None:
        """Widen the window (the Settings dialog opens 460 px wide) until the tables' columns
        fit whole, within the screen: at 460 px the log's nine columns were cut."""
        if not self.isVisible():
            return
        window = self.window()
        extra = max(_missing_width(view) for view in (self.live_view, self.log_view))
        if extra <= 0 or window is self:
            return
        screen = window.screen()
        room = screen.availableGeometry().width() if screen is not None else window.width() + extra
        window.resize(min(window.width() + extra, room), window.height())

    def _on_switch(self, on: bool) -> None:
        if on == (self.server.status.state in ("starting", "on")):
            return
        if on:
            self.server.start(self.port.value(), self.key.text().strip() or None)
        else:
            self.server.stop()
        self._save(on)

    def _save(self, enabled: bool) -> None:
        if self.storage is None:
            return
        value = {"enabled": enabled, "port": self.port.value(), "api_key": self.key.text().strip()}
        try:
            self.storage.set_setting(SETTING, value)
        except Exception:  # noqa: BLE001 — the server still runs; only remembering failed
            log.warning("could not save the local server settings", exc_info=True)

    def _show(self, status: ServerStatus) -> None:
        on = status.state in ("starting", "on")
        self.switch.blockSignals(True)
        self.switch.setChecked(on)
        self.switch.blockSignals(False)
        self.port.setEnabled(status.state in ("off", "failed"))
        self.key.setEnabled(status.state in ("off", "failed"))
        self.status_label.setText(f"● {STATUS_WORDS[status.state]}")
        if status.port is not None:
            self.port.setValue(status.port)
        self.address.setText(status.url or "")
        self.address.setVisible(status.url is not None)
        self.copy_button.setVisible(status.url is not None)
        if status.state == "failed":
            self.hint.setText(status.message)
        elif status.url:
            self.hint.setText(
                f"Point any OpenAI client at it: OPENAI_BASE_URL={status.url}. It serves the models "
                "this window has loaded, with the same KV cache as your chats: a conversation a "
                "client re-sends is read from the cache, not again. Only programs on this computer "
                "can reach it" + (", and they need the API key." if self.key.text().strip() else ".")
            )
        else:
            self.hint.setText("Off: nothing listens. When on, it listens on 127.0.0.1 only.")

    def _on_request(self, record: RequestRecord) -> None:
        if record.state == "running":
            self.live_model.upsert(record)
        else:
            self.live_model.remove(record.id)
            self.log_model.upsert(record)


def _missing_width(view: QTableView) -> int:
    """Pixels ``view`` lacks to show every column whole (its header and its cells)."""
    header = view.horizontalHeader()
    sizes = [max(header.sectionSizeHint(i), view.sizeHintForColumn(i)) for i in range(header.count())]
    if sizes and header.stretchLastSection():  # a stretched last section keeps its default size
        sizes[-1] = max(sizes[-1], header.defaultSectionSize())
    return sum(sizes) - view.viewport().width()


def _table(model: RequestTableModel, name: str) -> QTableView:
    view = QTableView()
    view.setObjectName(name)
    view.setModel(model)
    view.verticalHeader().setVisible(False)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    view.horizontalHeader().setStretchLastSection(True)
    return view
