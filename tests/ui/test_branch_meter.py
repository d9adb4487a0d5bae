"""The composer's context meter follows the branch shown (issue 27, item 5).

Editing the first message of a long chat starts a short branch; switching back to the long
branch with the ‹ n/m › switcher must show the long branch's count again. The meter used to
keep the count of the last request (the short branch's), hiding how close the long branch is
to the limit."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from tests.ui.helpers import chat_view, current_id, type_and_send, wait_idle
from tests.ui.screens import screenshot

LEFT = Qt.MouseButton.LeftButton


def _meter_for(window, cid: str) -> str:
    """What the meter should say for the shown branch: its last reply's prompt + reply."""
    last = window.controller.branch(cid)[-1]
    assert last.role == "assistant" and last.stats is not None
    n_ctx = window.models.get(window.controller.model_of(cid)).n_ctx
    return f"{last.stats.prompt_tokens + last.stats.completion_tokens:,} / {n_ctx:,} tokens"


def test_the_context_meter_follows_a_branch_switch(make_window, qtbot):
    window = make_window()
    meter = window.chat_page.composer.meter
    for text in ("the first question about harbours and boats",
                 "a second question about the tides of the northern coast",
                 "a third question about lighthouses, ropes and nets"):
        type_and_send(qtbot, window, text)
        wait_idle(qtbot, window)
    cid = current_id(window)
    long_text = meter.text()
    assert long_text == _meter_for(window, cid), long_text

    # Edit the first message (a click on its edit button, new text, "Send as new branch").
    view = chat_view(window)
    first = view.message_widgets()[0]
    qtbot.mouseClick(first.action_buttons["edit"], LEFT)
    assert first.editor is not None
    first.editor.selectAll()
    qtbot.keyClicks(first.editor, "short")
    save = next(b for b in first.findChildren(QPushButton) if b.text() == "Send as new branch")
    qtbot.mouseClick(save, LEFT)
    qtbot.waitUntil(lambda: len(window.controller.branch(cid)) == 2
                    and not window.controller.is_busy(cid), timeout=120_000)
    short_text = meter.text()
    assert short_text == _meter_for(window, cid) and short_text != long_text
    screenshot(window, "meter-short-branch")

    # Back to the long branch with the switcher's ‹ button.
    switcher = view.message_widgets()[0].switcher
    assert switcher is not None and switcher.label.text() == "2/2"
    qtbot.mouseClick(switcher.prev_button, LEFT)
    qtbot.waitUntil(lambda: len(window.controller.branch(cid)) == 6, timeout=5_000)
    qtbot.waitUntil(lambda: "third question" in view.transcript(), timeout=5_000)
    screenshot(window, "meter-long-branch-again")
    assert meter.text() == long_text, (meter.text(), long_text)

    # And forward again to the short one.
    switcher = view.message_widgets()[0].switcher
    assert switcher is not None and switcher.label.text() == "1/2"
    qtbot.mouseClick(switcher.next_button, LEFT)
    qtbot.waitUntil(lambda: len(window.controller.branch(cid)) == 2, timeout=5_000)
    assert meter.text() == short_text
