"""The chat header's LoRA indicator: which adapters shape this chat's replies, at what scale.

``adapter_summary`` (no Qt) turns ``Model.list_adapters()`` into the chip's text and
tooltip; ``AdapterChip`` shows it, hidden while the model has no adapter. The list is a
plain read of the model's published adapter set, safe from the GUI thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QWidget

from app.engine.errors import EngineError
from app.engine.lora import AdapterListing
from app.ui.engine_api import EngineApi

log = logging.getLogger(__name__)


def adapter_summary(adapters: Sequence[AdapterListing]) -> tuple[str, str] | None:
    """``(chip text, tooltip)`` for a model's adapters, or None when it has none."""
    if not adapters:
        return None
    names = [(Path(a["path"]).stem, a["scale"]) for a in adapters]
    first, scale = names[0]
    text = f"LoRA · {first} ×{scale:.2f}" + (f" +{len(names) - 1}" if len(names) > 1 else "")
    lines = [f"{name}: scale {s:.2f}" + (" (off)" if s == 0 else "") for name, s in names]
    tip = (
        "Replies in this chat come from the model with these LoRA adapters:\n"
        + "\n".join(lines)
        + "\nIts saved conversations are kept apart from the plain model's (another "
        "fingerprint). Change them under Models › Adapters."
    )
    return text, tip


class AdapterChip(QLabel):
    """``adapterChip``: hidden unless the chat's model has adapters attached."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("adapterChip")
        self.hide()

    def show_adapters(self, adapters: Sequence[AdapterListing]) -> None:
        summary = adapter_summary(adapters)
        self.setVisible(summary is not None)
        if summary is not None:
            self.setText(summary[0])
            self.setToolTip(summary[1])


class AdapterIndicator(QObject):
    """Keeps an :class:`AdapterChip` in step with the adapters of the chat's model.

    ``model_of()`` names the model the open chat talks to ("" for none); call
    :meth:`refresh` whenever that model or its adapters may have changed.
    """

    def __init__(
        self, chip: AdapterChip, engine: EngineApi | None, model_of: Callable[[], str]
    ) -> None:
        super().__init__(chip)
        self.chip = chip
        self._engine = engine
        self._model_of = model_of

    def refresh(self, *_args: object) -> None:
        model_id = self._model_of()
        adapters: list[AdapterListing] = []
        if model_id and self._engine is not None:
            try:
                adapters = self._engine.get_model(model_id).list_adapters()
            except EngineError as exc:  # unloaded meanwhile: nothing is attached any more
                log.debug("no adapters for %s: %s", model_id, exc)
        self.chip.show_adapters(adapters)
