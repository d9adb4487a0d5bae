"""Search the (local) Hub → pick a quant → download with a moving progress bar → the model is
in the library → load it on the real engine → it answers."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.engine.llama.llama_info import ctx_params_hash
from app.ui.qt_models.download_list import PROGRESS_ROLE, STATUS_ROLE
from app.ui.qt_models.model_library import COL_NAME, COL_QUANT, COL_STATUS
from app.ui.state.downloads import DownloadState
from tests.ui.models.conftest import Q8_FILE, REPO, snap, wait_idle

LEFT = Qt.MouseButton.LeftButton


def test_search_download_load_and_chat(qtbot, make_manager, hub_server, engine, models_dir):
    mm = make_manager(endpoint=hub_server.endpoint)
    assert mm.objectName() == "modelManager"
    assert mm.catalog.rows() == ()
    mm.show_page("download")
    page = mm.hub_page

    qtbot.keyClicks(page.search_field, "tiny")
    with qtbot.waitSignal(page.search_finished, timeout=20_000) as found:
        qtbot.mouseClick(page.search_button, LEFT)
    assert found.args == [1]
    assert page.results_model.index(0, 0).data() == REPO
    assert page.results_model.index(0, 1).data() == "12.3k"

    with qtbot.waitSignal(page.files_listed, timeout=20_000) as listed:
        rect = page.results.visualRect(page.results_model.index(0, 0))
        qtbot.mouseClick(page.results.viewport(), LEFT, pos=rect.center())
    assert listed.args == [REPO, 2]
    labels = [page.quant_picker.itemText(i) for i in range(page.quant_picker.count())]
    assert any(label.startswith("Q8_0") and Q8_FILE in label for label in labels), labels
    assert page.pick_quant("q8_0")
    assert page.selected_file().filename == Q8_FILE
    assert page.download_button.isEnabled()

    progress: list[int] = []
    shot = []

    def on_changed(*_):
        model = page.download_model
        if model.rowCount():
            value = model.index(0, 0).data(PROGRESS_ROLE)
            if not progress or value != progress[-1]:
                progress.append(value)
            if not shot and 300 <= value < 900:
                shot.append(snap(mm, "models-download-in-progress"))

    page.download_model.dataChanged.connect(on_changed)
    with qtbot.waitSignal(mm.downloads.download_finished, timeout=60_000) as finished:
        qtbot.mouseClick(page.download_button, LEFT)
        qtbot.waitUntil(lambda: page.download_model.rowCount() == 1)
        # While it runs: a status line with speed and time left.
        qtbot.waitUntil(lambda: "left" in str(page.download_model.index(0, 0).data(STATUS_ROLE)),
                        timeout=20_000)
    item = finished.args[0]
    assert item.state == DownloadState.FINISHED
    installed = models_dir / "acme--Tiny-Chat-GGUF" / Q8_FILE
    assert item.path == installed and installed.is_file()
    # The bar advanced through several increasing values to the end.
    assert len(progress) >= 4, progress
    assert progress == sorted(progress), progress
    assert progress[-1] == 1000 and 0 < progress[1] < 1000
    assert not page.pause_button.isEnabled()

    # The library rescans and shows (and selects) the new model.
    qtbot.waitUntil(lambda: mm.catalog.find(installed) is not None, timeout=20_000)
    wait_idle(qtbot, mm)
    table = mm.library_page.table_model
    row = table.row_of(str(installed))
    assert table.index(row, COL_NAME).data() == "tiny-Q8_0"
    assert table.index(row, COL_STATUS).data() == "Available"
    assert table.index(row, COL_QUANT).data() != "–"
    mm.show_page("library")
    lib = mm.library_page
    assert lib.selected_row().path == installed
    assert "≈" in lib.memory_label.text()

    # Load it with lean settings, off the GUI thread, then chat with it.
    lib.n_ctx.setValue(512)
    lib.n_seq_max.setValue(1)
    lib.n_batch.setValue(64)
    lib.n_threads.setValue(2)
    lib.n_threads_background.setValue(1)
    lib.attention.setCurrentIndex(lib.attention.findData(False))  # "Faster prefill, not bit-identical"
    with qtbot.waitSignal(mm.model_loaded, timeout=60_000) as loaded:
        qtbot.mouseClick(lib.load_button, LEFT)
        assert lib.selected_row().busy == "Loading…"
        assert not lib.busy_bar.isHidden()
    model_id = loaded.args[0]
    assert model_id == "tiny-Q8_0"
    assert table.index(row, COL_STATUS).data() == "Loaded"
    assert lib.busy_bar.isHidden() and lib.unload_button.isEnabled()
    model = engine.get_model(model_id)
    assert model.config.n_ctx == 512 and model.config.n_threads == 2 and model.config.n_threads_background == 1
    assert model.backend.n_threads_background == 1
    assert model.config.flash_attn is False  # its cache rows are keyed apart from the exact setting's:
    assert model.backend.info.ctx_params_hash != ctx_params_hash(model.config.type_k, model.config.type_v, True)
    result = model.complete("Hello, how are you?", response_tokens=6)
    assert len(result.generated) >= 1 and result.reply

    with qtbot.waitSignal(mm.model_unloaded, timeout=60_000):
        qtbot.mouseClick(lib.unload_button, LEFT)
    assert [m.id for m in engine.list_models()] == []
    assert table.index(row, COL_STATUS).data() == "Available"
