"""Switching between recently open chats keeps their message widgets (issue 27, item 8):
a switch back, a reply finishing in the open chat or in a hidden one builds only what is
new, and what a hidden chat streamed meanwhile is on screen when it is shown again, with no
text of one chat in another."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt

from app.storage import SamplingSettings
from app.ui.main_window import MainWindow
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import (
    REPLY_TIMEOUT_MS,
    chat_view,
    current_id,
    select_conversation,
    type_and_send,
    wait_idle,
)

LONG = SamplingSettings(temperature=0.0, max_tokens=160, grammar=ASCII_GRAMMAR)


def _stored_transcript(window: MainWindow, cid: str) -> str:
    return "\n\n".join(m.content for m in window.controller.branch(cid) if m.role != "system")


def _new_chat(qtbot, window: MainWindow) -> str:
    qtbot.mouseClick(window.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)
    return current_id(window)


def _shot(window: MainWindow, name: str) -> None:
    folder = os.environ.get("HEARTH_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        window.grab().save(str(Path(folder) / f"{name}.png"))


def test_a_switch_back_reuses_the_widgets_and_shows_what_streamed_while_hidden(
    make_window, qtbot
):
    window = make_window(sampling=LONG)
    controller = window.controller
    view = chat_view(window)

    type_and_send(qtbot, window, "tell me about the sea")
    a = current_id(window)
    wait_idle(qtbot, window, a)
    first_a = view.message_widgets()
    assert [w.role for w in first_a] == ["user", "assistant"]
    assert view.transcript() == _stored_transcript(window, a)

    b = _new_chat(qtbot, window)
    type_and_send(qtbot, window, "and now about the mountains")
    wait_idle(qtbot, window, b)
    first_b = view.message_widgets()

    # A switch back to a chat that did not change shows the very same widgets.
    select_conversation(qtbot, window, a)
    assert all(x is y for x, y in zip(view.message_widgets(), first_a, strict=True))
    select_conversation(qtbot, window, b)
    assert all(x is y for x, y in zip(view.message_widgets(), first_b, strict=True))

    # A's second reply streams while B is shown.
    select_conversation(qtbot, window, a)
    type_and_send(qtbot, window, "go on please")
    qtbot.waitUntil(
        lambda: (controller.live_reply(a) is None or controller.live_reply(a).num_tokens > 0),
        timeout=REPLY_TIMEOUT_MS,
    )
    select_conversation(qtbot, window, b)
    assert view.transcript() == _stored_transcript(window, b)
    if controller.is_busy(a):
        # Shown again mid-stream: the reply so far is on screen at once.
        qtbot.waitUntil(
            lambda: controller.live_reply(a) is None or controller.live_reply(a).num_tokens > 8,
            timeout=REPLY_TIMEOUT_MS,
        )
        select_conversation(qtbot, window, a)
        live = controller.live_reply(a)
        if live is not None:
            shown = view.live_widget()
            assert shown is not None and shown.text() == live.text
            assert all(x is y for x, y in zip(view.message_widgets()[:2], first_a, strict=True))
        select_conversation(qtbot, window, b)
    wait_idle(qtbot, window, a)  # it finishes while hidden
    assert view.transcript() == _stored_transcript(window, b)
    select_conversation(qtbot, window, a)
    _shot(window, "switch-back-after-hidden-reply")
    widgets = view.message_widgets()
    stored = [m for m in controller.branch(a) if m.role != "system"]
    assert [w.role for w in widgets] == ["user", "assistant", "user", "assistant"]
    assert [w.message_id for w in widgets] == [m.id for m in stored]
    assert view.transcript() == _stored_transcript(window, a)
    assert widgets[3].meta is not None and widgets[3].meta.text()  # the reply's line
    # The first exchange was not built again; only the new turn was.
    assert widgets[0] is first_a[0] and widgets[1] is first_a[1]
    # B's text never reached A's page, nor A's B's.
    b_reply = controller.branch(b)[-1].content
    assert b_reply not in view.transcript() or b_reply in _stored_transcript(window, a)


def test_a_reply_finishing_in_the_open_chat_keeps_the_earlier_widgets(make_window, qtbot):
    window = make_window()
    view = chat_view(window)
    type_and_send(qtbot, window, "hello there")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    before = view.message_widgets()
    type_and_send(qtbot, window, "and again")
    wait_idle(qtbot, window, cid)
    after = view.message_widgets()
    assert len(after) == 4
    assert after[0] is before[0] and after[1] is before[1]
    assert view.transcript() == _stored_transcript(window, cid)
    # The reply's Regenerate is enabled again once it is stored (set on the kept widgets too).
    assert all(btn.isEnabled() for w in after for btn in w.action_buttons.values())


def test_a_theme_change_builds_every_widget_anew(make_window, qtbot):
    window = make_window()
    view = chat_view(window)
    type_and_send(qtbot, window, "hello there")
    wait_idle(qtbot, window)
    before = view.message_widgets()
    window.chat_page.refresh_icons()  # what a theme change calls
    after = view.message_widgets()
    assert len(after) == len(before) and not any(x is y for x, y in zip(after, before, strict=True))
    assert view.transcript() == _stored_transcript(window, current_id(window))


def _looks(widget) -> tuple[object, ...]:
    """What a person sees of a finished reply (and what its buttons do)."""
    return (
        widget.role,
        widget.message_id,
        widget.text(),
        widget.meta.text() if widget.meta is not None else None,
        widget.meta.toolTip() if widget.meta is not None else None,
        sorted(widget.action_buttons),
        widget._actions_row.isVisibleTo(widget),
        widget.progress_text(),
        widget.switcher.label.text() if widget.switcher is not None else None,
        widget.streaming,
    )


def test_the_streaming_widget_becomes_the_finished_reply(make_window, qtbot):
    """A reply that finishes keeps the widget it streamed into (open chat, hidden chat, a
    regenerated reply with its ‹ 2/2 ›); it shows and does what a widget built from the stored
    message does. Seen failing before the change: the finished reply was a new widget."""
    window = make_window(sampling=LONG)
    controller = window.controller
    view = chat_view(window)

    type_and_send(qtbot, window, "tell me about the sea")
    a = current_id(window)
    qtbot.waitUntil(lambda: view.live_widget() is not None, timeout=REPLY_TIMEOUT_MS)
    streaming = view.live_widget()
    wait_idle(qtbot, window, a)
    reply = view.message_widgets()[-1]
    assert reply is streaming
    assert reply.message_id == controller.branch(a)[-1].id
    kept = _looks(reply)
    window.chat_page.refresh_icons()  # every widget built anew from the stored messages
    assert _looks(view.message_widgets()[-1]) == kept

    # Regenerate on it: the new reply streams into a widget that ends with ‹ 2/2 ›.
    reply = view.message_widgets()[-1]
    qtbot.mouseClick(reply.action_buttons["regenerate"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.live_widget() is not None, timeout=REPLY_TIMEOUT_MS)
    streaming = view.live_widget()
    wait_idle(qtbot, window, a)
    reply = view.message_widgets()[-1]
    assert reply is streaming
    assert reply.switcher is not None and reply.switcher.label.text() == "2/2"
    kept = _looks(reply)
    window.chat_page.refresh_icons()
    assert _looks(view.message_widgets()[-1]) == kept
    _shot(window, "finished-reply-kept-widget")

    # Finishing while hidden: the page shows the same widget, finished, when opened again.
    type_and_send(qtbot, window, "go on please")
    qtbot.waitUntil(lambda: view.live_widget() is not None, timeout=REPLY_TIMEOUT_MS)
    streaming = view.live_widget()
    b = _new_chat(qtbot, window)
    assert b != a
    wait_idle(qtbot, window, a)
    select_conversation(qtbot, window, a)
    reply = view.message_widgets()[-1]
    assert reply is streaming and not reply.streaming
    assert reply.message_id == controller.branch(a)[-1].id
    assert view.transcript() == _stored_transcript(window, a)
    kept = _looks(reply)
    window.chat_page.refresh_icons()
    assert _looks(view.message_widgets()[-1]) == kept
