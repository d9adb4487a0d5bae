"""The downloads list: pause/resume/cancel, paused partials listed after a restart, failures
shown; the Hub search and download list Qt models pass ``qtmodeltester``."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.ui.qt_models.download_list import PROGRESS_ROLE, STATE_ROLE, STATUS_ROLE
from app.ui.state.downloads import DownloadState
from tests.ui.models.conftest import Q4_FILE, Q8_FILE, REPO, wait_idle

LEFT = Qt.MouseButton.LeftButton


def _search_and_pick(qtbot, mm, quant: str) -> None:
    page = mm.hub_page
    mm.show_page("download")
    page.search_field.setText("tiny")
    with qtbot.waitSignal(page.search_finished, timeout=20_000):
        qtbot.mouseClick(page.search_button, LEFT)
    with qtbot.waitSignal(page.files_listed, timeout=20_000):
        assert page.select_repo(REPO)
    assert page.pick_quant(quant)


def _state(page) -> str:
    return page.download_model.index(0, 0).data(STATE_ROLE)


def test_pause_resume_after_restart_and_cancel(qtbot, qtmodeltester, make_manager, hub_server,
                                               models_dir, tmp_path):
    hub_server.set_fault(REPO, Q8_FILE, chunk_size=64 * 1024, chunk_delay=0.05)
    mm = make_manager(endpoint=hub_server.endpoint)
    page = mm.hub_page
    _search_and_pick(qtbot, mm, "q8_0")
    qtmodeltester.check(page.results_model)
    qtbot.mouseClick(page.download_button, LEFT)
    qtbot.waitUntil(lambda: page.download_model.rowCount() == 1
                    and (page.download_model.index(0, 0).data(PROGRESS_ROLE) or 0) > 50,
                    timeout=20_000)
    qtmodeltester.check(page.download_model)

    # Pause: the worker stops, the partial stays.
    assert page.pause_button.isEnabled()
    qtbot.mouseClick(page.pause_button, LEFT)
    qtbot.waitUntil(lambda: _state(page) == "paused", timeout=20_000)
    paused_at = page.download_model.index(0, 0).data(PROGRESS_ROLE)
    assert 0 < paused_at < 1000
    assert "Paused" in page.download_model.index(0, 0).data(STATUS_ROLE)
    assert page.resume_button.isEnabled() and not page.pause_button.isEnabled()
    [partial] = mm.hub.list_partials()
    assert partial.filename == Q8_FILE and partial.num_bytes_done > 0
    mm.shutdown()

    # A new view (an app restart) lists the paused download and resumes it from the partial.
    mm2 = make_manager(endpoint=hub_server.endpoint)
    page2 = mm2.hub_page
    assert page2.download_model.rowCount() == 1
    assert _state(page2) == "paused"
    assert page2.download_model.index(0, 0).data(PROGRESS_ROLE) >= paused_at
    hub_server.set_fault(REPO, Q8_FILE, chunk_delay=0.0)
    mm2.show_page("download")
    page2.download_list.setCurrentIndex(page2.download_model.index(0, 0))
    with qtbot.waitSignal(mm2.downloads.download_finished, timeout=30_000):
        qtbot.mouseClick(page2.resume_button, LEFT)
    ranged = [r for r in hub_server.file_requests(REPO, Q8_FILE, "GET") if r.range]
    assert ranged, "the resume should ask for the rest of the file only"
    assert (models_dir / "acme--Tiny-Chat-GGUF" / Q8_FILE).is_file()
    qtbot.waitUntil(lambda: any(e.name == "tiny-Q8_0" for e in mm2.entries()), timeout=20_000)
    assert page2.clear_button.isEnabled()
    qtbot.mouseClick(page2.clear_button, LEFT)
    assert page2.download_model.rowCount() == 0

    # Cancel while running: the row goes away and so does the partial.
    hub_server.set_fault(REPO, Q4_FILE, chunk_size=4 * 1024, chunk_delay=0.05)
    _search_and_pick(qtbot, mm2, "q4_k_m")
    qtbot.mouseClick(page2.download_button, LEFT)
    qtbot.waitUntil(lambda: page2.download_model.rowCount() == 1
                    and _state(page2) == "downloading", timeout=20_000)
    qtbot.mouseClick(page2.cancel_button, LEFT)
    qtbot.waitUntil(lambda: page2.download_model.rowCount() == 0, timeout=20_000)
    wait_idle(qtbot, mm2)
    assert mm2.hub.list_partials() == []
    assert not (models_dir / "acme--Tiny-Chat-GGUF" / Q4_FILE).exists()


def test_failed_download_is_shown_and_nothing_installed(qtbot, make_manager, hub_server,
                                                         models_dir):
    hub_server.set_fault(REPO, Q4_FILE, corrupt=True)
    mm = make_manager(endpoint=hub_server.endpoint)
    page = mm.hub_page
    _search_and_pick(qtbot, mm, "q4_k_m")
    with qtbot.waitSignal(mm.downloads.download_failed, timeout=30_000) as failed:
        qtbot.mouseClick(page.download_button, LEFT)
    item = failed.args[0]
    assert item.state == DownloadState.FAILED
    assert "failed verification" in item.error
    assert "failed verification" in page.error_card.label.text()
    assert page.download_model.index(0, 0).data(STATUS_ROLE).startswith("Failed · ")
    assert not (models_dir / "acme--Tiny-Chat-GGUF" / Q4_FILE).exists()
    assert page.resume_button.isEnabled()  # retry


def test_hub_errors_are_clear_messages(qtbot, make_manager, hub_server):
    mm = make_manager(endpoint=hub_server.endpoint)
    page = mm.hub_page
    mm.show_page("download")
    page.search_field.setText("GGUF")
    with qtbot.waitSignal(page.search_finished, timeout=20_000) as done:
        qtbot.mouseClick(page.search_button, LEFT)
    assert done.args == [2]
    del hub_server.repos["acme/Other-GGUF"]  # gone between the search and the click
    page.select_repo("acme/Other-GGUF")
    qtbot.waitUntil(lambda: not page.error_card.isHidden(), timeout=20_000)
    text = page.error_card.label.text()
    assert text.startswith("not found: repository acme/Other-GGUF"), text
    assert not page.download_button.isEnabled()
    assert page.search_button.isEnabled()
