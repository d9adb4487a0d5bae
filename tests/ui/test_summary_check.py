"""“Summarise the oldest turns” with a model that cannot write a summary: the app checks what
the model wrote, says under the divider that there is no summary and why, drops the oldest
turns instead, and shows the same after a restart."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

from app.conversation.window import OverflowPolicy, WindowState
from app.storage import SamplingSettings
from tests.ui.helpers import chat_view, current_id, select_conversation, type_and_send, wait_idle
from tests.ui.screens import screenshot
from tests.ui.test_overflow import SMALL, message, push_until_cut, show_divider

# Every reply, the summary included, goes on with the transcript, as SmolLM2's summaries did
# (the app's opening words "In this conversation, the user" + ":\nUser: Note 1, again").
GOES_ON = SamplingSettings(temperature=0.0, max_tokens=24, grammar='root ::= ":\\nUser: Note 1, again"')
WHY = "went on with the conversation instead of summarising it"


def divider_texts(window) -> tuple[str, str | None]:
    page = chat_view(window).page()
    assert page.divider is not None
    head = page.divider.findChild(QLabel, "dividerText").text()
    note = page.divider.findChild(QLabel, "dividerNoSummary")
    assert page.divider.findChild(QLabel, "dividerSummary") is None
    return head, note.text() if note is not None else None


def test_an_unusable_summary_is_refused_and_the_oldest_turns_dropped_visibly(
    make_window, qtbot, data_dir
):
    window = make_window(model_options=dict(SMALL), sampling=GOES_ON)
    window.chat_page.new_conversation()
    cid = current_id(window)
    window.chat_page.settings_panel.overflow.choose(OverflowPolicy.SUMMARISE)
    turn, view = push_until_cut(qtbot, window, cid)
    assert view.start_id is not None
    assert view == WindowState(view.start_id, "", no_summary=WHY)
    head, note = divider_texts(window)
    assert "no longer sees" in head
    assert note is not None and "No summary" in note and WHY in note
    assert "dropped" in note
    page = chat_view(window).page()
    qtbot.waitUntil(lambda: page.divider.y() > 0, timeout=5_000)
    show_divider(qtbot, page)
    screenshot(window, "chat-overflow-no-summary")

    # The next turn fits the same view: it still says why there is no summary.
    type_and_send(qtbot, window, message(turn + 1))
    wait_idle(qtbot, window, cid)
    assert window.controller.window(cid) == view
    assert divider_texts(window)[1] == note

    # After a restart the chat shows the same divider and note.
    window.close()
    again = make_window(data_dir, model_options=dict(SMALL), sampling=GOES_ON)
    if again.chat_page.current_id != cid:
        select_conversation(qtbot, again, cid)
    assert again.controller.window(cid) == view
    assert divider_texts(again) == ("The model no longer sees the messages above this line", note)
