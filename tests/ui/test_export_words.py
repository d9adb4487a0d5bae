"""Issue 50, item 9: an export carries the chat's whole title (the sidebar's is cut), in its
heading and its suggested file name, and says where the file went and what it leaves out."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from tests.ui.helpers import chat_view, current_id, type_and_send, wait_idle
from tests.ui.screens import screenshot
from tests.ui.test_small_things import context_menu_action

LEFT = Qt.MouseButton.LeftButton
FIRST = ("Note 0: please keep in mind that the lanterns of the northern coast were counted twice "
         "this year, once in spring and once in late autumn, by two teams.")


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_export_keeps_the_whole_title_and_says_where_and_what(make_window, qtbot, tmp_path, monkeypatch):
    window = make_window()
    type_and_send(qtbot, window, FIRST)
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    title = window.controller.conversation(cid).title
    assert title.endswith("…") and len(title) < len(FIRST)  # the sidebar's is cut
    regenerate = chat_view(window).message_widgets()[-1].action_buttons["regenerate"]
    qtbot.mouseClick(regenerate, LEFT)  # a second version of the reply
    qtbot.waitUntil(lambda: window.controller.siblings(window.controller.branch(cid)[-1].id) == (2, 2),
                    timeout=60_000)
    wait_idle(qtbot, window, cid)

    out = tmp_path / "exported.md"
    suggested: list[str] = []

    def save(_parent, _caption, name, _filter):
        suggested.append(name)
        return str(out), ""

    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(save))
    context_menu_action(qtbot, window, cid, "Export as Markdown…")
    qtbot.waitUntil(out.exists, timeout=5_000)
    assert suggested == ["Note 0_ please keep in mind that the lanterns of the northern coast were counted.md"]
    assert out.read_text().splitlines()[0] == f"# {FIRST}"
    banner = window.banner.text()
    assert banner == (f"Exported “{FIRST}” to {out}. It holds the branch on screen; 1 other version of "
                      "its messages is not in it (Export as JSON keeps every branch).")
    screenshot(window, "chat-export-said")
