"""Switching branches keeps the ‹ n/m › switcher where it was on screen (issue #14 item 5).

The page is rebuilt for the other branch. Scrolled to the end of a short branch, switching to
a long one used to follow the new end (the view sticks to the bottom while replies stream),
so the switcher just clicked left the screen."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt

from tests.ui.helpers import chat_view
from tests.ui.screens import screenshot

REPLY = "\n\n".join(f"Paragraph {i} of a long reply, long enough to wrap." for i in range(4))


def _conversation_with_a_fork(storage) -> tuple[str, str, str]:
    """Turn 4's user message has two versions: "a" goes on to turn 7, "b" ends at turn 4."""
    conv = storage.create_conversation("Forked")
    parent = None
    for turn in range(1, 4):
        parent = storage.add_message(conv.id, parent, "user", f"question {turn}").id
        parent = storage.add_message(conv.id, parent, "assistant", REPLY).id
    fork_parent = parent
    firsts = []
    for branch in ("a", "b"):
        node = storage.add_message(conv.id, fork_parent, "user", f"question 4{branch}").id
        firsts.append(node)
        for turn in range(4, 8 if branch == "a" else 5):
            if turn > 4:
                node = storage.add_message(conv.id, node, "user", f"question {turn}{branch}").id
            text = f"a: {REPLY}" if branch == "a" else "b: a short answer."
            node = storage.add_message(conv.id, node, "assistant", text).id
    return conv.id, firsts[0], firsts[1]


def test_switching_branches_keeps_the_switcher_in_view(make_window, qtbot):
    window = make_window(size=(800, 600))
    cid, first_a, first_b = _conversation_with_a_fork(window.storage)
    window.controller.refresh()
    window.chat_page.open_conversation(cid)
    page = chat_view(window).page()
    widgets = page.message_widgets()
    fork = next(i for i, w in enumerate(widgets) if w.message_id == first_b)
    switcher = widgets[fork].switcher
    assert switcher is not None and switcher.label.text() == "2/2"
    bar = page.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum())
    before = switcher.mapTo(page.viewport(), QPoint(0, 0)).y()
    assert 0 < before < page.viewport().height() - switcher.height()  # at the end of branch b

    qtbot.mouseClick(switcher.prev_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.message_widgets()[fork].message_id == first_a, timeout=5_000)
    new_switcher = page.message_widgets()[fork].switcher
    assert new_switcher is not None and new_switcher.label.text() == "1/2"

    def after() -> int:
        return new_switcher.mapTo(page.viewport(), QPoint(0, 0)).y()

    # The scroll is restored once the rebuilt page is laid out: wait for it (however long
    # a loaded machine takes), not a fixed 50 ms.
    qtbot.waitUntil(lambda: abs(after() - before) <= 2, timeout=5_000)
    qtbot.wait(50)
    assert abs(after() - before) <= 2, (before, after())  # and it stays there
    assert 0 <= after() <= page.viewport().height() - new_switcher.height()
    screenshot(window, "chat-branch-switched")
