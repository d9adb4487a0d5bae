"""Issue 50, item 7: a banner ("Deleted … Undo", an error) lies over the top of the work area;
nothing under the pointer moves when it comes or goes. In the layout it pushed every row
~40 px down, so the next click meant for one chat landed on the one above it."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QToolButton

from tests.ui.helpers import conversation_list, current_id
from tests.ui.screens import screenshot
from tests.ui.test_small_things import context_menu_action

LEFT = Qt.MouseButton.LeftButton


def row_centre(window, cid: str) -> QPoint:
    """Where a chat's row is on the screen."""
    view = conversation_list(window)
    row = window.chat_page.list_model.row_of(cid)
    return view.viewport().mapToGlobal(view.visualRect(view.model().index(row, 0)).center())


def places(window) -> dict[str, QPoint]:
    page = window.chat_page
    return {
        "list": conversation_list(window).viewport().mapToGlobal(QPoint(0, 0)),
        "header": page.settings_button.mapToGlobal(QPoint(0, 0)),
        "work area": window.stack.mapToGlobal(QPoint(0, 0)),
    }


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_a_banner_moves_nothing_under_the_pointer(make_window, qtbot):
    window = make_window()
    page = window.chat_page
    ids = []
    for _ in range(4):
        page.new_conversation()
        ids.append(current_id(window))
    # Newest first: ids[3], ids[2], ids[1], ids[0]. The pointer rests on ids[2]'s row.
    before = places(window)
    aimed = row_centre(window, ids[2])

    # Delete ids[1] from its menu: "Deleted … Undo" comes, over the work area's top.
    context_menu_action(qtbot, window, ids[1], "Delete")
    qtbot.waitUntil(window.banner.isVisible, timeout=5_000)
    assert window.banner.text().startswith("Deleted")
    assert window.banner.geometry().top() == 0 and window.banner.height() > 20
    # It leaves the header's controls at the right free: Settings takes a click.
    settings = page.settings_button
    corner = window.banner.mapToGlobal(QPoint(window.banner.width(), 0))
    assert settings.mapToGlobal(QPoint(0, 0)).x() > corner.x()
    screenshot(window, "banner-over-the-work-area")
    assert places(window) == before  # nothing moved down
    assert row_centre(window, ids[2]) == aimed

    # The click meant for ids[2] opens ids[2].
    view = conversation_list(window)
    qtbot.mouseClick(view.viewport(), LEFT, pos=view.viewport().mapFromGlobal(aimed))
    assert current_id(window) == ids[2]

    # ✕: the banner goes, and nothing moves back up either.
    close = window.banner.findChild(QToolButton, "bannerClose")
    qtbot.mouseClick(close, LEFT)
    assert not window.banner.isVisible()
    assert places(window) == before
