"""Settings › Memory: the cap on Hearth's memory (``app.engine.memory.memory_budget``), kept in the
app database and applied to the engine at start and on every change."""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QDoubleSpinBox, QFormLayout, QLabel, QVBoxLayout, QWidget

from app.storage import Storage, StorageError
from app.units import human_bytes

log = logging.getLogger(__name__)

MEMORY_CAP_KEY = "memory_cap_bytes"
GiB = 1 << 30


def stored_cap(storage: Storage) -> int | None:
    """The cap kept in the database (None: automatic)."""
    try:
        value = storage.get_setting(MEMORY_CAP_KEY, None)
    except StorageError:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def apply_stored_cap(engine: Any, storage: Storage) -> None:
    """At start: the engine's budget gets the kept cap (an engine without a budget: nothing)."""
    setter = getattr(engine, "set_memory_cap", None)
    if callable(setter):
        setter(stored_cap(storage))


class MemoryNotices(QObject):
    """The budget's notices ("memory short: … let go …"), made on the engine's watch thread,
    said on the GUI thread (``said``: the window's banner shows them)."""

    said = Signal(str)

    def __init__(self, engine: Any, parent: QObject | None = None) -> None:
        super().__init__(parent)
        budget = getattr(engine, "memory", None)
        listeners = getattr(budget, "listeners", None)
        self._unsubscribe = listeners.subscribe(self.said.emit) if listeners is not None else None

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()


class MemorySettings(QWidget):
    """A spin box in GiB, 0 for automatic; each change is kept and applied at once."""

    def __init__(self, engine: Any, storage: Storage, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("memorySettings")
        self.engine, self.storage = engine, storage
        v = QVBoxLayout(self)
        note = QLabel(
            "The most memory Hearth may take: the loaded models, their KV caches and buffers, the "
            "conversations kept in RAM and Hearth itself. Automatic: what this machine has "
            "available, less a fifth of it left to the rest of the desktop. Loads that would go "
            "past it are refused with the numbers; the conversations kept in RAM move to disk first.")
        note.setObjectName("caption")
        note.setWordWrap(True)
        v.addWidget(note)
        form = QFormLayout()
        self.cap = QDoubleSpinBox()
        self.cap.setObjectName("memoryCapSpin")
        self.cap.setRange(0, 4096)
        self.cap.setDecimals(1)
        self.cap.setSingleStep(0.5)
        self.cap.setSuffix(" GiB")
        self.cap.setSpecialValueText("Automatic")
        self.cap.setValue((stored_cap(storage) or 0) / GiB)
        form.addRow("Memory cap", self.cap)
        v.addLayout(form)
        self.now = QLabel("")
        self.now.setObjectName("memoryCapNow")
        self.now.setWordWrap(True)
        v.addWidget(self.now)
        v.addStretch(1)
        self.cap.valueChanged.connect(self._on_changed)
        self._show()

    def _on_changed(self, value: float) -> None:
        cap = int(value * GiB) or None
        try:
            self.storage.set_setting(MEMORY_CAP_KEY, cap or 0)
        except StorageError as exc:
            log.warning("could not keep the memory cap: %s", exc)
        setter = getattr(self.engine, "set_memory_cap", None)
        if callable(setter):
            setter(cap)
        self._show()

    def _show(self) -> None:
        status = getattr(self.engine, "memory_status", None)
        if callable(status):
            s = status()
            self.now.setText(f"Now: {human_bytes(s['cap'])} cap, {human_bytes(s['rss'])} in use.")
