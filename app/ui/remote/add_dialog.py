""""Add remote model…": an OpenAI-compatible address, its key, and which of its models.

"Fetch models" asks the server for ``GET /v1/models`` on a worker thread (the dialog stays
responsive while a slow or unreachable host times out) and fills the model list; the user can
also type a model id the server did not list.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.remote.client import RemoteClient, RemoteError
from app.remote.endpoint import EndpointError, RemoteEndpoint


class _Fetcher(QObject):
    finished = Signal(int, object, str)  # request number, model ids, error text

    def fetch(self, number: int, base_url: str, api_key: str | None) -> None:
        def run() -> None:
            try:
                probe = RemoteEndpoint(base_url, "-", api_key=api_key)
                self.finished.emit(number, RemoteClient(probe).models(), "")
            except (EndpointError, RemoteError) as exc:
                self.finished.emit(number, [], str(exc))

        threading.Thread(target=run, name="remote-models", daemon=True).start()


class AddRemoteDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("addRemoteDialog")
        self.setWindowTitle("Add remote model")
        self.endpoint: RemoteEndpoint | None = None
        self.address = QLineEdit()
        self.address.setObjectName("remoteAddress")
        self.address.setPlaceholderText("http://192.168.1.20:8642/v1")
        self.key = QLineEdit()
        self.key.setObjectName("remoteKey")
        self.key.setPlaceholderText("if the server needs one")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.fetch_button = QPushButton("Fetch models")
        self.fetch_button.setObjectName("remoteFetch")
        self.model = QComboBox()
        self.model.setObjectName("remoteModel")
        self.model.setEditable(True)
        self.context = QSpinBox()
        self.context.setObjectName("remoteContext")
        self.context.setRange(256, 10_000_000)
        self.context.setSingleStep(1024)
        self.context.setValue(8192)
        self.name = QLineEdit()
        self.name.setObjectName("remoteName")
        self.name.setPlaceholderText("shown in the Library and the chat's model picker")
        self.message = QLabel()
        self.message.setObjectName("remoteMessage")
        self.message.setWordWrap(True)

        row = QHBoxLayout()
        row.addWidget(self.model, 1)
        row.addWidget(self.fetch_button)
        form = QFormLayout()
        form.addRow("Address", self.address)
        form.addRow("API key", self.key)
        form.addRow("Model", row)
        form.addRow("Context (tokens)", self.context)
        form.addRow("Name", self.name)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self._on_ok)
        self.buttons.rejected.connect(self.reject)
        note = QLabel(
            "A llama-server, vLLM, another Hearth or any OpenAI-compatible server. Chats use it "
            "like a local model; its KV cache is the remote server's, not Hearth's."
        )
        note.setObjectName("caption")
        note.setWordWrap(True)
        v = QVBoxLayout(self)
        # NOTE: no layout-driven minimum pushed to the platform window (offscreen warns).
        v.setSizeConstraint(QVBoxLayout.SizeConstraint.SetNoConstraint)
        v.addWidget(note)
        v.addLayout(form)
        v.addWidget(self.message)
        v.addWidget(self.buttons)
        self.resize(560, 300)

        self._fetcher = _Fetcher(self)
        self._fetcher.finished.connect(self._on_fetched)
        self._fetches = 0
        self.fetch_button.clicked.connect(self.fetch)

    def fetch(self) -> None:
        self._fetches += 1
        self.fetch_button.setEnabled(False)
        self.message.setText("Asking the server for its models…")
        self._fetcher.fetch(self._fetches, self.address.text().strip(), self.key.text().strip() or None)

    def _on_fetched(self, number: int, models: list[str], error: str) -> None:
        if number != self._fetches:
            return  # an older answer
        self.fetch_button.setEnabled(True)
        if error:
            self.message.setText(f"Could not list the models: {error}")
            return
        current = self.model.currentText()
        self.model.clear()
        self.model.addItems(models)
        if current in models:
            self.model.setCurrentText(current)
        self.message.setText(f"{len(models)} model(s) offered." if models else "The server lists no models.")

    def _on_ok(self) -> None:
        try:
            self.endpoint = RemoteEndpoint(
                self.address.text().strip(), self.model.currentText().strip(), name=self.name.text().strip(),
                api_key=self.key.text().strip() or None, context_size=self.context.value(),
            )
        except EndpointError as exc:
            self.message.setText(str(exc))
            return
        self.accept()
