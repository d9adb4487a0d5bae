"""The Adapters page: LoRA adapters on a loaded model, a scale slider each, and the effective
fingerprint (docs/design.md §4) recomputed on every slider move.

The fingerprint shown is computed here from the same inputs the engine uses
(``app.cache.keys.effective_fingerprint`` of the base fingerprint and each adapter's
(sha256, scale)), so it updates while the slider moves; the engine is told the new scale after
the slider rests for ``SCALE_DEBOUNCE_MS`` (each change releases the model's idle sessions).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from app.cache.keys import effective_fingerprint
from app.engine.errors import NotFound
from app.models.adapters import AdapterError, check_adapter_matches
from app.ui.engine_api import EngineApi, ModelApi
from app.ui.models.widgets import MessageCard, button, caption, section
from app.ui.state.format import short_hex
from app.ui.tasks import TaskRunner

log = logging.getLogger(__name__)

T = TypeVar("T")

SCALE_DEBOUNCE_MS = 80
SLIDER_STEPS = 200  # 0.00 … 2.00 in steps of 0.01


@dataclass(frozen=True, slots=True)
class AttachedAdapter:
    handle: int
    path: str
    sha256: bytes
    scale: float

    @property
    def name(self) -> str:
        return Path(self.path).stem


def fingerprint_of(base: bytes, adapters: list[AttachedAdapter]) -> bytes:
    return effective_fingerprint(base, [(a.sha256, a.scale) for a in adapters])


class AdapterRow(QFrame):
    """One attached adapter: name, sha, scale slider with its value, detach."""

    scale_moved = Signal(int, float)  # handle, scale
    detach_clicked = Signal(int)

    def __init__(self, adapter: AttachedAdapter, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("adapterRow")
        self.handle = adapter.handle
        name = QLabel(adapter.name)
        name.setObjectName("adapterName")
        name.setToolTip(adapter.path)
        sha = QLabel(f"sha256 {adapter.sha256.hex()[:12]}")
        sha.setObjectName("adapterSha")
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setObjectName("adapterScaleSlider")
        self.slider.setRange(0, SLIDER_STEPS)
        self.slider.setPageStep(10)
        self.slider.setValue(round(adapter.scale * 100))
        self.slider.setToolTip("Scale 0 turns the adapter off; 1 is its trained strength.")
        self.value_label = QLabel(f"{adapter.scale:.2f}")
        self.value_label.setObjectName("scaleValue")
        self.value_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.detach_button = button("Detach", "detachButton")
        top = QHBoxLayout()
        top.addWidget(name)
        top.addWidget(sha)
        top.addStretch(1)
        top.addWidget(self.detach_button)
        bottom = QHBoxLayout()
        scale_label = QLabel("Scale")
        scale_label.setObjectName("caption")
        bottom.addWidget(scale_label)
        bottom.addWidget(self.slider, 1)
        bottom.addWidget(self.value_label)
        v = QVBoxLayout(self)
        v.setContentsMargins(12, 10, 12, 10)
        v.setSpacing(6)
        v.addLayout(top)
        v.addLayout(bottom)
        self.slider.valueChanged.connect(self._on_slider_value_changed)
        self.detach_button.clicked.connect(lambda: self.detach_clicked.emit(self.handle))

    @property
    def scale(self) -> float:
        return self.slider.value() / 100

    def _on_slider_value_changed(self, value: int) -> None:
        self.value_label.setText(f"{value / 100:.2f}")
        self.scale_moved.emit(self.handle, value / 100)


class AdaptersPage(QWidget):
    """Attach/detach/re-scale on the chosen loaded model through the engine runner."""

    adapters_changed = Signal(str)  # model id, after the engine applied a change
    fingerprint_changed = Signal(str)  # full hex of the displayed effective fingerprint

    def __init__(
        self, engine: EngineApi | None, runner: TaskRunner, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("adaptersPage")
        self.engine = engine
        self.runner = runner
        self._model_id: str | None = None
        self._base: bytes | None = None
        self._adapters: list[AttachedAdapter] = []
        self._rows: dict[int, AdapterRow] = {}
        self._pending_scales: dict[int, float] = {}
        self._num_in_flight = 0
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(SCALE_DEBOUNCE_MS)
        self._debounce.timeout.connect(self._flush_scales)

        self.model_picker = QComboBox()
        self.model_picker.setObjectName("adapterModelPicker")
        self.model_picker.setMinimumWidth(220)
        self.attach_button = button("Attach LoRA…", "attachLoraButton", primary=True)
        head = QHBoxLayout()
        head.addWidget(QLabel("Model"))
        head.addWidget(self.model_picker)
        head.addStretch(1)
        head.addWidget(self.attach_button)

        self.error_card = MessageCard("adapterError")

        fp_card = QFrame()
        fp_card.setObjectName("card")
        fv = QVBoxLayout(fp_card)
        fv.setContentsMargins(16, 14, 16, 14)
        fv.setSpacing(4)
        fv.addWidget(section("Effective fingerprint"))
        fp_row = QHBoxLayout()
        self.fingerprint_label = QLabel("–")
        self.fingerprint_label.setObjectName("fingerprintLabel")
        self.fingerprint_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse)
        self.apply_state = QLabel("")
        self.apply_state.setObjectName("caption")
        fp_row.addWidget(self.fingerprint_label)
        fp_row.addStretch(1)
        fp_row.addWidget(self.apply_state)
        fv.addLayout(fp_row)
        self.base_label = QLabel("")
        self.base_label.setObjectName("baseFingerprint")
        fv.addWidget(self.base_label)
        fv.addWidget(caption(
            "The KV cache files every saved conversation under this fingerprint: the model "
            "file's hash combined with each adapter's hash and scale. Any attach, detach or "
            "scale change gives a new one, so a row saved under one adapter set is never "
            "restored under another. Scale 0 is still an adapter set of its own."))

        self.rows_box = QWidget()
        self.rows_box.setObjectName("adapterRows")
        self.rows_layout = QVBoxLayout(self.rows_box)
        self.rows_layout.setContentsMargins(0, 0, 0, 0)
        self.rows_layout.setSpacing(8)
        self.empty_label = caption("No adapters attached. Attach a LoRA GGUF made for this "
                                   "model; it is checked against the model's tensor shapes "
                                   "first.")
        self.rows_layout.addWidget(self.empty_label)
        self.rows_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(self.rows_box)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(12)
        layout.addLayout(head)
        layout.addWidget(self.error_card)
        layout.addWidget(fp_card)
        layout.addWidget(section("Attached adapters"))
        layout.addWidget(scroll, 1)

        self.attach_button.clicked.connect(self._on_attach_clicked)
        self.model_picker.currentIndexChanged.connect(self._on_model_picked)
        self.refresh_models()

    # -- public -------------------------------------------------------------------------------

    @property
    def model_id(self) -> str | None:
        return self._model_id

    @property
    def adapters(self) -> list[AttachedAdapter]:
        return list(self._adapters)

    @property
    def is_applying(self) -> bool:
        return self._num_in_flight > 0 or self._debounce.isActive()

    def displayed_fingerprint(self) -> str:
        return self.fingerprint_label.text()

    def adapter_rows(self) -> list[AdapterRow]:
        return [self._rows[a.handle] for a in self._adapters if a.handle in self._rows]

    def refresh_models(self, select: str | None = None) -> None:
        """Re-list the loaded models; keep the current one unless ``select`` names another."""
        ids = [m.id for m in self.engine.list_models()] if self.engine is not None else []
        current = select if select in ids else (self._model_id if self._model_id in ids else None)
        if current is None and ids:
            current = ids[-1]
        self.model_picker.blockSignals(True)
        self.model_picker.clear()
        self.model_picker.addItems(ids)
        if current is not None:
            self.model_picker.setCurrentIndex(ids.index(current))
        self.model_picker.blockSignals(False)
        self.model_picker.setEnabled(bool(ids))
        self.attach_button.setEnabled(current is not None)
        if current != self._model_id or select is not None:
            self._show_model(current)

    def attach_adapter(self, path: str | Path) -> None:
        """Validate ``path`` against the model (``check_adapter_matches``), then attach it."""
        model = self._model()
        if model is None:
            self.error_card.show_text("Load a model first: adapters attach to a loaded model.")
            return
        path = str(path)
        base_path = model.config.path
        model_id = model.id
        self.error_card.clear()
        self.attach_button.setEnabled(False)

        def attach() -> int:
            check_adapter_matches(path, base_path)
            handle: int = model.load_adapter(path)
            return handle

        self._submit(attach, lambda _h: self._after_change(model_id, reload=True),
                     lambda e: self._on_failed(e, f"Could not attach {Path(path).name}"))

    def detach_adapter(self, handle: int) -> None:
        model = self._model()
        if model is None:
            return
        model_id = model.id
        self._pending_scales.pop(handle, None)
        self._submit(lambda: model.unload_adapter(handle),
                     lambda _r: self._after_change(model_id, reload=True),
                     lambda e: self._on_failed(e, "Could not detach the adapter"))

    # -- slots --------------------------------------------------------------------------------

    def _on_attach_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Attach a LoRA adapter", "",
                                              "GGUF files (*.gguf);;All files (*)")
        if path:
            self.attach_adapter(path)

    def _on_model_picked(self, index: int) -> None:
        self._show_model(self.model_picker.itemText(index) if index >= 0 else None)

    def _on_scale_moved(self, handle: int, scale: float) -> None:
        self._adapters = [replace(a, scale=scale) if a.handle == handle else a
                          for a in self._adapters]
        self._pending_scales[handle] = scale
        self._refresh_fingerprint()
        self._debounce.start()

    def _flush_scales(self) -> None:
        model = self._model()
        pending, self._pending_scales = self._pending_scales, {}
        if model is None or not pending:
            return
        model_id = model.id

        def rescale() -> None:
            for handle, scale in pending.items():
                model.set_adapter_scale(handle, scale)

        self._submit(rescale, lambda _r: self._after_change(model_id, reload=False),
                     lambda e: self._on_failed(e, "Could not change the scale"))

    # -- helpers ------------------------------------------------------------------------------

    def _model(self) -> ModelApi | None:
        if self._model_id is None or self.engine is None:
            return None
        try:
            return self.engine.get_model(self._model_id)
        except NotFound:  # unloaded meanwhile (on the loader's thread)
            return None
        except Exception:
            log.exception("reading the loaded model %r failed (a bug)", self._model_id)
            return None

    def _submit(
        self,
        fn: Callable[[], T],
        on_done: Callable[[T], None],
        on_error: Callable[[Exception], None],
    ) -> None:
        self._num_in_flight += 1
        self._refresh_apply_state()

        def done(result: T) -> None:
            self._num_in_flight -= 1
            self._refresh_apply_state()
            on_done(result)

        def failed(err: Exception) -> None:
            self._num_in_flight -= 1
            self._refresh_apply_state()
            on_error(err)

        self.runner.run(fn, done, failed)

    def _after_change(self, model_id: str, *, reload: bool) -> None:
        self.attach_button.setEnabled(self._model_id is not None)
        if reload and model_id == self._model_id:
            self._load_adapters()
        self.adapters_changed.emit(model_id)

    def _on_failed(self, err: Exception, what: str) -> None:
        self.attach_button.setEnabled(self._model_id is not None)
        if isinstance(err, AdapterError):
            text = f"Refused: {err}"
        else:
            text = f"{what}: {getattr(err, 'message', None) or err}"
        log.info("adapter operation failed: %s", text)
        self.error_card.show_text(text)
        if self._model_id is not None:  # show the engine's state, not our guess
            self._load_adapters()

    def _show_model(self, model_id: str | None) -> None:
        self._model_id = model_id
        self._pending_scales.clear()
        self._debounce.stop()
        self.error_card.clear()
        self.attach_button.setEnabled(model_id is not None)
        model = self._model()
        if model is None:
            self._base = None
            self._adapters = []
            self._rebuild_rows()
            return
        self._base = bytes.fromhex(model.model_info().fingerprint)
        self._load_adapters()

    def _load_adapters(self) -> None:
        model = self._model()
        if model is None:
            return
        self._adapters = [
            AttachedAdapter(a["handle"], a["path"], bytes.fromhex(a["sha256"]), a["scale"])
            for a in model.list_adapters()
        ]
        self._rebuild_rows()

    def _rebuild_rows(self) -> None:
        for row in self._rows.values():
            self.rows_layout.removeWidget(row)
            row.deleteLater()
        self._rows.clear()
        for i, a in enumerate(self._adapters):
            row = AdapterRow(a)
            row.scale_moved.connect(self._on_scale_moved)
            row.detach_clicked.connect(self.detach_adapter)
            self.rows_layout.insertWidget(i, row)
            self._rows[a.handle] = row
        self.empty_label.setVisible(not self._adapters)
        self._refresh_fingerprint()

    def _refresh_fingerprint(self) -> None:
        if self._base is None:
            self.fingerprint_label.setText("–")
            self.fingerprint_label.setToolTip("")
            self.base_label.setText("No model loaded.")
            return
        fp = fingerprint_of(self._base, self._adapters)
        self.fingerprint_label.setText(short_hex(fp))
        self.fingerprint_label.setToolTip(fp.hex())
        same = "  (no adapters: the same as the base)" if not self._adapters else ""
        self.base_label.setText(f"base model {short_hex(self._base)}{same}")
        self.fingerprint_changed.emit(fp.hex())

    def _refresh_apply_state(self) -> None:
        self.apply_state.setText("Applying…" if self._num_in_flight else "")
