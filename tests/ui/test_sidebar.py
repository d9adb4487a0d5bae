"""The sidebar: a search with no match says so (and clears in one click); rows do not move
under the pointer while replies finish, and settle when it leaves (issue #14 item 5)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QEnterEvent
from PySide6.QtWidgets import QApplication

from tests.ui.helpers import conversation_list, type_and_send, wait_idle
from tests.ui.screens import screenshot


def _ids(window) -> list[str]:
    return [e.id for e in window.controller.catalog.entries()]


def test_a_search_with_no_match_shows_a_no_results_state(make_window, qtbot):
    window = make_window()
    page = window.chat_page
    sidebar = page.sidebar
    for title, text in (("Trip to Lisbon", "pack light"), ("Bread recipe", "knead the dough")):
        cid = page.new_conversation()
        window.controller.rename(cid, title)
        window.storage.add_message(cid, None, "user", text)
    assert not sidebar.is_showing_no_results()
    qtbot.keyClicks(sidebar.search, "zebra")
    assert sidebar.is_showing_no_results() and sidebar.empty.isVisible()
    assert "No chats match “zebra”" in sidebar.empty_label.text()
    screenshot(window, "sidebar-search-no-results")
    sidebar.search.clear()
    qtbot.keyClicks(sidebar.search, "DOUGH")  # message text, any case
    assert not sidebar.is_showing_no_results()
    assert [e.title for e in window.controller.catalog.entries()] == ["Bread recipe"]
    sidebar.search.setText("no such thing")
    assert sidebar.is_showing_no_results()
    qtbot.mouseClick(sidebar.clear_search_button, Qt.MouseButton.LeftButton)
    assert sidebar.search.text() == "" and not sidebar.is_showing_no_results()
    assert len(window.controller.catalog) == 2


def test_rows_do_not_move_under_the_pointer_while_a_reply_finishes(make_window, qtbot):
    window = make_window()
    page = window.chat_page
    older = page.new_conversation()
    newer = page.new_conversation()
    assert _ids(window)[:2] == [newer, older]
    viewport = conversation_list(window).viewport()
    center = QPointF(viewport.rect().center())
    QApplication.sendEvent(viewport, QEnterEvent(center, center, center))
    page.open_conversation(older)
    type_and_send(qtbot, window, "a reply that finishes while the pointer rests on the list")
    wait_idle(qtbot, window, older)
    # The older chat had new activity twice (the message, the reply) and stayed put.
    assert _ids(window)[:2] == [newer, older]
    assert page.sidebar.current_id() == older
    QApplication.sendEvent(viewport, QEvent(QEvent.Type.Leave))
    assert _ids(window)[:2] == [older, newer]  # settled once the pointer left
    assert page.sidebar.current_id() == older  # the selection moved with its row
