"""Issue 50, item 6: under "stop at the limit", a draft the meter already shows in red is not
sent: Enter says why under the message box, with numbers that add up, and the draft stays."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.conversation.window import OverflowPolicy
from tests.ui.helpers import current_id, message_input, type_and_send, wait_idle
from tests.ui.screens import screenshot
from tests.ui.test_overflow import SMALL, message

DRAFT = " ".join(message(i) for i in range(40, 44))  # ~150 tokens


def test_a_draft_past_the_limit_is_not_sent_and_the_note_adds_up(make_window, qtbot):
    window = make_window(model_options=dict(SMALL))
    page, controller = window.chat_page, window.controller
    page.new_conversation()
    cid = current_id(window)
    page.settings_panel.overflow.choose(OverflowPolicy.STOP)
    use = None
    for i in range(12):  # fill the chat to within a long message of its prompt limit
        type_and_send(qtbot, window, message(i))
        wait_idle(qtbot, window, cid)
        assert cid not in controller.failed, controller.failed[cid]
        use = controller.context_use(cid)
        if use is not None and use.used > use.limit - 120:
            break
    assert use is not None and use.used <= use.limit
    before = [m.id for m in controller.branch(cid)]

    box = message_input(window)
    box.setFocus()
    qtbot.keyClicks(box, DRAFT)
    meter = page.composer.meter
    qtbot.waitUntil(lambda: meter.level == "over", timeout=10_000)  # red: the count is in
    shown_total = int(meter.text().split(" / ")[0].replace(",", ""))
    qtbot.keyClick(box, Qt.Key.Key_Return)

    note = page.composer.note
    assert note.isVisible()
    text = note.text()
    assert text.startswith("Not sent: with this message the chat needs about ")
    # The numbers add up: what it needs (the meter's), the prompt's share, the context, the rest.
    assert f"about {shown_total:,} tokens, more than the {use.limit:,} a prompt may use of the model's " \
           f"{use.n_ctx:,}-token context ({use.n_ctx - use.limit:,} are kept for the reply)" in text
    assert shown_total > use.limit
    assert box.toPlainText() == DRAFT  # the draft stays
    assert [m.id for m in controller.branch(cid)] == before  # nothing sent
    assert cid not in controller.failed and not controller.is_busy(cid)
    screenshot(window, "chat-stop-at-the-limit-before-sending")

    # Another policy lets the same draft go.
    page.settings_panel.overflow.choose(OverflowPolicy.DROP_OLDEST)
    qtbot.keyClick(box, Qt.Key.Key_Return)
    wait_idle(qtbot, window, cid)
    assert controller.branch(cid)[-1].role == "assistant"
    assert box.toPlainText() == ""
