"""The Library's "Remote models" section: the endpoints the user added, Add… and Remove.

An adapter over ``RemoteRegistry`` (the registry owns the list and notifies; this widget only
redraws). Remote models have no local KV cache; the section says so.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.remote.registry import RemoteRegistry
from app.storage import StorageError
from app.ui.remote.add_dialog import AddRemoteDialog


class RemoteModelsPanel(QWidget):
    changed = Signal()

    def __init__(self, registry: RemoteRegistry, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("remoteModelsPanel")
        self.registry = registry
        self.dialog: AddRemoteDialog | None = None
        title = QLabel("REMOTE MODELS")
        title.setObjectName("sectionLabel")
        note = QLabel(
            "Models served by another machine over the OpenAI API (a llama-server, vLLM or another "
            "Hearth). Chats use them like a local model; there is no local KV cache for them — the "
            "remote server keeps its own."
        )
        note.setObjectName("caption")
        note.setWordWrap(True)
        self.error = QLabel()
        self.error.setObjectName("errorText")
        self.error.setWordWrap(True)
        self.error.hide()
        self.list = QListWidget()
        self.list.setObjectName("remoteModelList")
        self.list.setMaximumHeight(160)  # under the GGUF table, which keeps the room
        self.add_button = QPushButton("Add remote model…")
        self.add_button.setObjectName("addRemoteButton")
        self.remove_button = QPushButton("Remove")
        self.remove_button.setObjectName("removeRemoteButton")
        self.remove_button.setEnabled(False)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        v = QVBoxLayout(self)
        v.setSizeConstraint(QVBoxLayout.SizeConstraint.SetNoConstraint)  # offscreen warns otherwise
        v.setContentsMargins(0, 0, 0, 0)
        v.addWidget(title)
        v.addWidget(note)
        v.addWidget(self.list, 1)
        v.addWidget(self.error)
        v.addLayout(row)
        self.add_button.clicked.connect(self.open_add_dialog)
        self.remove_button.clicked.connect(self._remove_selected)
        self.list.currentRowChanged.connect(lambda r: self.remove_button.setEnabled(r >= 0))
        self._unsubscribe = registry.subscribe(self.reload)
        self.destroyed.connect(lambda *_: self._unsubscribe())
        self.reload()

    def reload(self) -> None:
        self.list.clear()
        for ep in self.registry.endpoints():
            item = QListWidgetItem(f"{ep.name}    {ep.base_url} · {ep.model} · {ep.context_size:,} tokens")
            item.setData(Qt.ItemDataRole.UserRole, ep.model_id)
            item.setToolTip("No local KV cache: the remote server keeps its own.")
            self.list.addItem(item)
        self.remove_button.setEnabled(self.list.currentRow() >= 0)
        self.changed.emit()

    def open_add_dialog(self) -> AddRemoteDialog:
        self.dialog = AddRemoteDialog(self)
        self.dialog.accepted.connect(self._on_added)
        self.dialog.open()
        return self.dialog

    def _on_added(self) -> None:
        if self.dialog is not None and self.dialog.endpoint is not None:
            endpoint = self.dialog.endpoint
            self._saving(lambda: self.registry.add(endpoint))

    def _remove_selected(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            model_id = str(item.data(Qt.ItemDataRole.UserRole))
            self._saving(lambda: self.registry.remove(model_id))

    def _saving(self, change: Callable[[], None]) -> None:
        """The settings table can fail (locked, full disk): say so; the list stays as it was."""
        try:
            change()
        except StorageError as exc:
            self.error.setText(f"Could not save the remote models: {exc}")
            self.error.show()
        else:
            self.error.hide()
