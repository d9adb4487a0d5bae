"""The Library says whether each model fits this machine with its settings before anything
loads, refuses a load that does not fit in words, and fits the settings on a click (issue 54).
This machine's MemAvailable is a fake (``HEARTH_MEMINFO``); the loads are real."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt

from app.engine.memory.memory_budget import DESKTOP_ROOM
from app.engine.memory.memory_fit import MEMINFO_ENV, read_shape
from app.ui.qt_models.model_library import COL_FITS, COL_STATUS
from app.units import human_bytes
from tests.ui.models.conftest import snap

LEFT = Qt.MouseButton.LeftButton
MiB = 1 << 20


def _cell(mm, path: Path, col: int, role=Qt.ItemDataRole.DisplayRole):
    model = mm.library_page.table_model
    return model.index(model.row_of(str(path)), col).data(role)


def test_fits_or_not_per_model_and_setting_and_a_refusal_in_words(
    qtbot, make_manager, models_dir, tiny_model_path, smollm2_path, engine, tmp_path, monkeypatch
):
    tiny = models_dir / "tiny-chat-Q8_0.gguf"
    os.symlink(tiny_model_path, tiny)
    smol = models_dir / "SmolLM2-135M-Instruct-Q4_1.gguf"
    os.symlink(smollm2_path, smol)
    meminfo = tmp_path / "meminfo"
    room = 260 * MiB  # what this machine leaves a load: the tiny model fits, SmolLM2 at 4,096 × 4 does not
    meminfo.write_text(f"MemTotal: {4 << 20} kB\nMemAvailable: {(room + DESKTOP_ROOM) // 1024} kB\n")
    monkeypatch.setenv(MEMINFO_ENV, str(meminfo))
    mm = make_manager()
    lib = mm.library_page
    qtbot.waitUntil(lambda: lib.select_path(smol) and lib.select_path(tiny), timeout=10_000)

    # Per model, before anything loads: the Memory column, with the numbers in its tooltip.
    assert _cell(mm, tiny, COL_FITS) == "Fits"
    assert _cell(mm, smol, COL_FITS) == "Does not fit"
    tip = _cell(mm, smol, COL_FITS, Qt.ItemDataRole.ToolTipRole)
    assert tip.startswith("Does not fit on this machine: 4,096 tokens × 4 chats needs "), tip
    assert f"this machine has {human_bytes(room)}" in tip, tip
    assert lib.fit_label.text().startswith("Fits on this machine: needs ")  # tiny is selected
    assert lib.fit_label.toolTip().startswith("Fits on this machine: 2,048 tokens × 4 chats needs ")

    # Per setting: SmolLM2 selected, its settings do not fit; Load is refused in words.
    table = lib.table
    rect = table.visualRect(table.model().index(table.model().row_of(str(smol)), 0))
    qtbot.mouseClick(table.viewport(), LEFT, pos=rect.center())
    assert lib.selected_row() is not None and lib.selected_row().path == smol
    assert (lib.n_ctx.value(), lib.n_seq_max.value()) == (4096, 4)
    shape = read_shape(smol)
    assert shape is not None
    need = shape.need(4096, 4, n_batch=lib.n_batch.value()).total
    assert lib.fit_label.toolTip() == tip
    assert lib.fit_label.text() == f"Does not fit on this machine: needs {human_bytes(need)}, has {human_bytes(room)}."
    assert lib.fit_button.isVisible()
    qtbot.mouseClick(lib.load_button, LEFT)
    qtbot.waitUntil(lambda: lib.error_card.isVisible() and "does not fit" in lib.error_card.text(), timeout=30_000)
    text = lib.error_card.text()
    assert text == (f"Could not load SmolLM2-135M-Instruct-Q4_1: does not fit: 4,096 tokens × 4 chats needs "
                    f"{human_bytes(need)}; this machine has {human_bytes(room)}. Choose a smaller context or "
                    "fewer chats (or press Fit)"), text
    assert _cell(mm, smol, COL_STATUS) != "Loaded" and engine.list_models() == []
    snap(mm, "models-library-does-not-fit")

    # "Fit" sets the context × chats that fit now; then it loads.
    qtbot.mouseClick(lib.fit_button, LEFT)
    ctx, seqs = lib.n_ctx.value(), lib.n_seq_max.value()
    assert ctx * seqs < 4096 * 4
    assert shape.need(ctx, seqs, n_batch=lib.n_batch.value()).total <= room
    assert lib.fit_label.text().startswith("Fits on this machine: needs "), lib.fit_label.text()
    assert not lib.fit_button.isVisible() and not lib.error_card.isVisible()
    assert _cell(mm, smol, COL_FITS) == "Fits"  # the column follows the remembered settings
    snap(mm, "models-library-fits")
    with qtbot.waitSignal(mm.model_loaded, timeout=60_000):
        qtbot.mouseClick(lib.load_button, LEFT)
    loaded = engine.get_model(engine.list_models()[0].id)
    assert (loaded.config.n_ctx, loaded.config.n_seq_max) == (ctx, seqs)
    assert _cell(mm, smol, COL_STATUS) == "Loaded"
