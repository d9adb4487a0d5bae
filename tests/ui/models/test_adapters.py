"""LoRA adapters through the view: attach changes greedy output, scale 0 restores it, the
shown fingerprint is the effective fingerprint of docs/design.md §4 and follows the slider, a LoRA for
another model is refused with its reason shown."""

from __future__ import annotations

import hashlib
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from app.cache.keys import effective_fingerprint
from tests.ui.models.conftest import snap, wait_idle

LEFT = Qt.MouseButton.LeftButton
PROMPT = "The quick brown fox"


def _greedy(model) -> tuple[int, ...]:
    return model.complete(PROMPT, response_tokens=12).generated


def _expected(base: bytes, lora: Path, scale: float) -> str:
    sha = hashlib.sha256(lora.read_bytes()).digest()
    return effective_fingerprint(base, [(sha, scale)]).hex()[:12]


def _load_tiny(qtbot, mm, tiny_model_path: Path) -> str:
    lib = mm.library_page
    assert lib.select_path(tiny_model_path)
    lib.n_ctx.setValue(512)
    lib.n_seq_max.setValue(1)
    lib.n_batch.setValue(64)
    lib.n_threads.setValue(2)
    with qtbot.waitSignal(mm.model_loaded, timeout=60_000) as loaded:
        qtbot.mouseClick(lib.load_button, LEFT)
    return loaded.args[0]


def test_attach_scale_and_fingerprint(qtbot, make_manager, engine, tiny_model_path,
                                      tiny_lora_path, foreign_lora_path):
    mm = make_manager(extra_dirs=(tiny_model_path.parent,))
    model_id = _load_tiny(qtbot, mm, tiny_model_path)
    model = engine.get_model(model_id)
    base_fp = bytes.fromhex(model.model_info().fingerprint)
    base_out = _greedy(model)

    mm.show_page("adapters")
    page = mm.adapters_page
    assert page.model_id == model_id
    assert page.displayed_fingerprint() == base_fp.hex()[:12]

    # A LoRA made for another model is refused before it reaches llama.cpp.
    page.attach_adapter(foreign_lora_path)
    wait_idle(qtbot, mm)
    error = page.error_card.label.text()
    assert not page.error_card.isHidden()
    assert error.startswith("Refused:") and foreign_lora_path.name in error, error
    assert model.list_adapters() == [] and page.adapter_rows() == []

    # Attach the tiny model's LoRA: new fingerprint, different greedy output.
    with qtbot.waitSignal(mm.adapters_changed, timeout=30_000) as changed:
        page.attach_adapter(tiny_lora_path)
    assert changed.args == [model_id]
    assert page.error_card.isHidden()
    [row] = page.adapter_rows()
    assert row.slider.value() == 100 and row.value_label.text() == "1.00"
    assert page.displayed_fingerprint() == _expected(base_fp, tiny_lora_path, 1.0)
    assert model.model_info().effective_fingerprint[:12] == page.displayed_fingerprint()
    adapted_out = _greedy(model)
    assert adapted_out != base_out

    # The fingerprint follows the slider as it moves (before the engine is told).
    seen = []
    for value in (80, 55, 30):
        row.slider.setValue(value)
        seen.append(page.displayed_fingerprint())
        assert seen[-1] == _expected(base_fp, tiny_lora_path, value / 100)
        assert row.value_label.text() == f"{value / 100:.2f}"
    assert len(set(seen)) == 3
    wait_idle(qtbot, mm)
    assert model.list_adapters()[0]["scale"] == 0.30
    snap(mm, "models-adapters")

    # Slider to 0: the base output again, under a fingerprint of its own.
    with qtbot.waitSignal(mm.adapters_changed, timeout=30_000):
        row.slider.setValue(0)
        assert page.displayed_fingerprint() == _expected(base_fp, tiny_lora_path, 0.0)
    wait_idle(qtbot, mm)
    assert model.list_adapters()[0]["scale"] == 0.0
    assert page.displayed_fingerprint() != base_fp.hex()[:12]
    assert model.model_info().effective_fingerprint[:12] == page.displayed_fingerprint()
    assert _greedy(model) == base_out

    row.slider.setValue(100)
    wait_idle(qtbot, mm)
    assert _greedy(model) == adapted_out

    # Detach: back to the base fingerprint.
    with qtbot.waitSignal(mm.adapters_changed, timeout=30_000):
        qtbot.mouseClick(row.detach_button, LEFT)
    wait_idle(qtbot, mm)
    assert model.list_adapters() == [] and page.adapter_rows() == []
    assert page.displayed_fingerprint() == base_fp.hex()[:12]


def test_dark_theme_adapters_and_no_model(qtbot, make_manager, engine, tiny_model_path,
                                          tiny_lora_path, monkeypatch):
    mm = make_manager(extra_dirs=(tiny_model_path.parent,), theme="dark")
    page = mm.adapters_page
    assert page.model_id is None and not page.attach_button.isEnabled()
    page.attach_adapter(tiny_lora_path)
    assert "Load a model first" in page.error_card.label.text()
    _load_tiny(qtbot, mm, tiny_model_path)
    mm.show_page("adapters")
    assert page.error_card.isHidden()  # a newly loaded model starts clean
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        lambda *a, **k: (str(tiny_lora_path), "GGUF files (*.gguf)"))
    with qtbot.waitSignal(mm.adapters_changed, timeout=30_000):
        qtbot.mouseClick(page.attach_button, LEFT)
    page.adapter_rows()[0].slider.setValue(140)
    wait_idle(qtbot, mm)
    snap(mm, "models-adapters-dark")
    mm.show_page("library")
    snap(mm, "models-library-dark")


def test_load_and_unload_with_qthread_schedulers(qtbot, make_manager, tmp_path, tiny_model_path):
    """The app's engine runs schedulers in QThreads; loading from a worker must work too."""
    from app.engine import Engine
    from app.ui.engine_bridge import qthread_starter

    qengine = Engine(tmp_path / "qdata", thread_starter=qthread_starter)
    try:
        mm = make_manager(extra_dirs=(tiny_model_path.parent,), engine=qengine)
        model_id = _load_tiny(qtbot, mm, tiny_model_path)
        model = qengine.get_model(model_id)
        assert len(model.complete("Hi", response_tokens=3).generated) >= 1
        with qtbot.waitSignal(mm.model_unloaded, timeout=60_000):
            qtbot.mouseClick(mm.library_page.unload_button, LEFT)
        assert qengine.list_models() == []
        assert mm.adapters_page.model_id is None
        mm.shutdown()
    finally:
        qengine.close()
