"""A file the Hub lists without any checksum is installed on its size alone: the Downloads
list says so instead of "verified" (issue 26)."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.ui.qt_models.download_list import STATUS_ROLE
from tests.ui.models.conftest import Q4_FILE, REPO
from tests.ui.models.test_downloads import _search_and_pick

LEFT = Qt.MouseButton.LeftButton


def test_a_file_without_a_listed_checksum_is_marked_not_verified(qtbot, make_manager, hub_server):
    hub_server.set_fault(REPO, Q4_FILE, listed_checksum=False)
    mm = make_manager(endpoint=hub_server.endpoint)
    page = mm.hub_page
    _search_and_pick(qtbot, mm, "q4_k_m")
    assert "cannot be verified" in page.file_info.text()
    with qtbot.waitSignal(mm.downloads.download_finished, timeout=30_000) as finished:
        qtbot.mouseClick(page.download_button, LEFT)
    assert finished.args[0].verified is False
    status = page.download_model.index(0, 0).data(STATUS_ROLE)
    assert "NOT verified" in status and "no checksum" in status, status
