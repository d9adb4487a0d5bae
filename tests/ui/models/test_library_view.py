"""The Library page: the table (broken files, adapters, the loaded model), load settings
remembered per model, the memory estimate, load errors, "Add folder…"."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from app.models.library import estimate_memory
from app.ui.models.settings import SETTINGS_FILE, settings_key
from app.ui.qt_models.model_library import (
    COL_ARCH,
    COL_CTX,
    COL_NAME,
    COL_STATUS,
    COL_TEMPLATE,
    ROW_ROLE,
)
from app.ui.state.format import human_bytes
from tests.helpers.hub_server import make_gguf_bytes
from tests.ui.models.conftest import snap, wait_idle

LEFT = Qt.MouseButton.LeftButton


def _link(src: Path, dest: Path) -> Path:
    os.symlink(src, dest)
    return dest


def _cell(mm, path: Path, col: int, role=Qt.ItemDataRole.DisplayRole):
    model = mm.library_page.table_model
    return model.index(model.row_of(str(path)), col).data(role)


def test_table_lists_models_adapters_and_broken_files(
    qtbot, qtmodeltester, make_manager, models_dir, tiny_model_path, tiny_lora_path, engine
):
    tiny = _link(tiny_model_path, models_dir / "tiny-chat-Q8_0.gguf")
    lora = _link(tiny_lora_path, models_dir / "tiny-lora-F32.gguf")
    broken = models_dir / "half-Q4_K_M.gguf"
    broken.write_bytes(tiny_model_path.read_bytes()[:100_000])
    mm = make_manager(include_default=True)
    qtmodeltester.check(mm.library_page.table_model)

    assert _cell(mm, tiny, COL_NAME) == "tiny-chat-Q8_0"
    assert _cell(mm, tiny, COL_ARCH) == "llama"
    assert _cell(mm, tiny, COL_TEMPLATE) == "From the file"
    assert _cell(mm, tiny, COL_CTX) not in ("", "–")
    assert _cell(mm, tiny, COL_STATUS) == "Available"
    assert _cell(mm, lora, COL_STATUS) == "Adapter"
    assert _cell(mm, broken, COL_STATUS) == "Broken"
    tip = _cell(mm, broken, COL_STATUS, Qt.ItemDataRole.ToolTipRole)
    assert tip.startswith("This file cannot be used: truncated"), tip

    lib = mm.library_page
    assert lib.select_path(broken)
    assert not lib.load_button.isEnabled()
    assert "Broken" in lib.details_sub.text()
    assert lib.select_path(lora)
    assert not lib.load_button.isEnabled()

    # The estimate follows the settings: weights + q8_0 K / f16 V KV for n_ctx × n_seq_max.
    assert lib.select_path(tiny)
    entry = _cell(mm, tiny, COL_NAME, ROW_ROLE).entry
    lib.n_ctx.setValue(1024)
    lib.n_seq_max.setValue(2)
    assert human_bytes(estimate_memory(entry, 1024, 2)) in lib.memory_label.text()
    lib.n_ctx.setValue(512)
    lib.n_seq_max.setValue(1)
    lib.n_batch.setValue(64)
    lib.n_threads.setValue(2)
    assert human_bytes(estimate_memory(entry, 512, 1)) in lib.memory_label.text()

    with qtbot.waitSignal(mm.model_loaded, timeout=60_000):
        qtbot.mouseClick(lib.load_button, LEFT)
    assert _cell(mm, tiny, COL_STATUS) == "Loaded"
    assert not lib.n_ctx.isEnabled()  # settings apply at load time
    qtmodeltester.check(mm.library_page.table_model)
    snap(mm, "models-library")


def test_load_settings_are_remembered_per_model(qtbot, make_manager, models_dir,
                                                tiny_model_path, engine):
    a = _link(tiny_model_path, models_dir / "a-Q8_0.gguf")
    b = models_dir / "b-Q8_0.gguf"
    shutil.copyfile(tiny_model_path, b)  # a second file (links to one file are one entry)
    mm = make_manager()
    lib = mm.library_page
    assert lib.select_path(a)
    lib.n_ctx.setValue(768)
    lib.n_batch.setValue(128)
    lib.n_threads.setValue(2)
    lib.n_threads_background.setValue(3)
    assert lib.attention.currentData() is True and lib.attention_note.isHidden()  # exact by default
    lib.attention.setCurrentIndex(lib.attention.findData(False))
    assert "not bit-identical" in lib.attention.currentText()
    assert not lib.attention_note.isHidden() and "not bit-identical" in lib.attention_note.text().lower()
    assert lib.select_path(b)
    assert lib.n_ctx.value() != 768 and lib.n_threads_background.value() == 0  # auto
    assert lib.attention.currentData() is True and lib.attention_note.isHidden()
    lib.n_seq_max.setValue(3)
    assert lib.select_path(a)
    assert (lib.n_ctx.value(), lib.n_batch.value(), lib.n_threads.value()) == (768, 128, 2)
    assert lib.n_threads_background.value() == 3
    assert lib.attention.currentData() is False and not lib.attention_note.isHidden()

    # Persisted in the data dir's JSON file (no store passed in) and read by a new view.
    stored = json.loads((engine.data_dir / SETTINGS_FILE).read_text())
    assert stored[settings_key(a)]["n_ctx"] == 768
    assert stored[settings_key(b)]["n_seq_max"] == 3
    assert stored[settings_key(a)]["flash_attn"] is False and stored[settings_key(b)]["flash_attn"] is True
    mm2 = make_manager()
    assert mm2.library_page.select_path(a)
    assert mm2.library_page.n_ctx.value() == 768
    assert mm2.library_page.attention.currentData() is False


def test_settings_go_to_the_store_passed_in(qtbot, make_manager, models_dir, tiny_model_path,
                                            engine):
    a = _link(tiny_model_path, models_dir / "a-Q8_0.gguf")
    store: dict = {settings_key(a): {"n_ctx": 640, "n_seq_max": 2}}
    mm = make_manager(settings=store)
    assert mm.library_page.select_path(a)
    assert mm.library_page.n_ctx.value() == 640
    assert mm.library_page.n_seq_max.value() == 2
    mm.library_page.n_gpu_layers.setValue(3)
    assert store[settings_key(a)]["n_gpu_layers"] == 3
    assert not (engine.data_dir / SETTINGS_FILE).exists()


def test_load_failure_is_shown(qtbot, make_manager, models_dir, engine):
    bad = models_dir / "not-a-model-Q4_K_M.gguf"
    bad.write_bytes(make_gguf_bytes(seed=9))  # a valid header, but no real llama tensors
    mm = make_manager()
    lib = mm.library_page
    assert lib.select_path(bad)
    lib.n_ctx.setValue(512)
    lib.n_seq_max.setValue(1)
    lib.n_batch.setValue(64)
    with qtbot.waitSignal(mm.error_raised, timeout=60_000) as raised:
        qtbot.mouseClick(lib.load_button, LEFT)
    wait_idle(qtbot, mm)
    text = raised.args[0]
    assert text.startswith("Could not load not-a-model-Q4_K_M: ")
    assert lib.error_card.label.text() == text and not lib.error_card.isHidden()
    assert _cell(mm, bad, COL_STATUS) == "Load failed"
    assert _cell(mm, bad, COL_STATUS, Qt.ItemDataRole.ToolTipRole) == text
    assert engine.list_models() == []
    assert lib.load_button.isEnabled()  # it can be retried


def test_batch_smaller_than_parallel_is_refused_in_the_form(qtbot, make_manager, models_dir,
                                                            tiny_model_path):
    a = _link(tiny_model_path, models_dir / "a-Q8_0.gguf")
    mm = make_manager()
    lib = mm.library_page
    assert lib.select_path(a)
    lib.n_batch.setValue(16)
    lib.n_seq_max.setValue(32)
    qtbot.mouseClick(lib.load_button, LEFT)
    assert "Batch" in lib.error_card.label.text()
    assert mm.engine_runner.num_pending == 0


def test_add_folder(qtbot, make_manager, tmp_path, tiny_model_path, monkeypatch):
    extra = tmp_path / "more-models"
    extra.mkdir()
    _link(tiny_model_path, extra / "extra-Q8_0.gguf")
    mm = make_manager()
    assert mm.catalog.rows() == ()
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(extra))
    with qtbot.waitSignal(mm.library_refreshed, timeout=20_000):
        qtbot.mouseClick(mm.library_page.add_folder_button, LEFT)
    assert [e.name for e in mm.entries()] == ["extra-Q8_0"]
    assert extra in mm.library.dirs


def test_follows_a_theme_switch(qtbot, make_manager):
    from PySide6.QtWidgets import QApplication

    from app.ui.theme import DARK, LIGHT, apply_theme

    mm = make_manager(theme="light")
    assert LIGHT.sidebar in mm.styleSheet()
    apply_theme(QApplication.instance(), "dark")
    qtbot.waitUntil(lambda: DARK.sidebar in mm.styleSheet())
    apply_theme(QApplication.instance(), "light")
    qtbot.waitUntil(lambda: LIGHT.sidebar in mm.styleSheet())


def test_an_unload_racing_a_library_scan_leaves_the_model_loadable(
    qtbot, make_manager, models_dir, tiny_model_path, engine
):
    """The scan landed while the engine was still unloading (so it listed the model as
    loaded), and the unload began before the scan had listed the file: the row was left
    'loaded', with Load disabled for good (seen once in a full run of the chat journeys)."""
    import threading

    a = _link(tiny_model_path, models_dir / "a-Q8_0.gguf")
    mm = make_manager()
    qtbot.waitUntil(lambda: mm.library_page.select_path(a), timeout=10_000)
    lib = mm.library_page
    lib.n_ctx.setValue(512)
    with qtbot.waitSignal(mm.model_loaded, timeout=60_000):
        qtbot.mouseClick(lib.load_button, LEFT)
    entries = list(mm.library.scan())
    mm.catalog.reset([], {})  # the start-up scan has not landed yet
    gate = threading.Event()
    unload = engine.unload

    def slow_unload(model_id):
        gate.wait(30)
        return unload(model_id)

    engine.unload = slow_unload
    (model_id,) = [m.id for m in engine.list_models()]
    with qtbot.waitSignal(mm.model_unloaded, timeout=60_000):
        mm.unload_model(model_id)  # its row is unknown: the catalog is empty
        mm._on_scanned(entries)  # the scan lands while the engine still holds the model
        gate.set()
    assert engine.list_models() == []
    assert lib.select_path(a)
    qtbot.waitUntil(lib.load_button.isEnabled, timeout=10_000)
