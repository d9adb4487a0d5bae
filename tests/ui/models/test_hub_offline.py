"""Issue 50, item 9: with no network the Hub page says so as it opens, in words — not a raw
"[Errno -2] Name or service not known", and not only after a search failed."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.ui.models.conftest import snap, wait_idle

LEFT = Qt.MouseButton.LeftButton
OFFLINE = "http://hub.invalid"  # .invalid never resolves: what a machine without network sees


def test_the_hub_page_says_no_network_up_front(qtbot, make_manager):
    mm = make_manager(endpoint=OFFLINE)
    page = mm.hub_page
    qtbot.mouseClick(mm.page_buttons["download"], LEFT)
    qtbot.waitUntil(lambda: not page.error_card.isHidden(), timeout=20_000)
    text = page.error_card.text()
    assert text.startswith("No network: hub.invalid cannot be found"), text
    snap(mm, "models-hub-no-network")

    page.search_field.setText("qwen")
    with qtbot.waitSignal(page.search_finished, timeout=30_000):
        qtbot.keyClick(page.search_field, Qt.Key.Key_Return)
    wait_idle(qtbot, mm)
    text = page.error_card.text()
    assert text.startswith("No network: hub.invalid cannot be found"), text
    assert "Errno" not in text and page.search_button.isEnabled()


def test_a_reachable_hub_shows_nothing_up_front(qtbot, make_manager, hub_server):
    mm = make_manager(endpoint=hub_server.endpoint)
    qtbot.mouseClick(mm.page_buttons["download"], LEFT)
    wait_idle(qtbot, mm)
    assert mm.hub_page.error_card.isHidden()
