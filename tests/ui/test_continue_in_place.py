"""Issue 50, item 4: Continue extends the cut reply where it is — no second copy of it streams
below it — and once it ends, the reply's whole text shows above its line under it."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt

from app.storage import SamplingSettings
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import REPLY_TIMEOUT_MS, chat_view, current_id, type_and_send, wait_idle
from tests.ui.screens import screenshot
from tests.ui.test_overflow import SMALL, message

LEFT = Qt.MouseButton.LeftButton


def copies(window, text: str) -> int:
    """How many message widgets show ``text``'s opening words."""
    return sum(1 for w in chat_view(window).message_widgets() if w.text().startswith(text[:60]))


def fully_shown(widget) -> bool:
    """The reply's text is all above its line (nothing of it under the stats line)."""
    body, meta = widget.body, widget.meta
    needed = body.heightForWidth(body.width()) if body.hasHeightForWidth() else body.sizeHint().height()
    return body.height() >= needed and meta.mapTo(widget, QPoint(0, 0)).y() >= body.mapTo(widget, QPoint(0, body.height())).y()


def test_continue_extends_the_reply_in_place(make_window, qtbot):
    short = SamplingSettings(temperature=0.0, max_tokens=8, grammar=ASCII_GRAMMAR)
    window = make_window(model_options={**SMALL, "n_ctx": 256}, sampling=short)
    controller = window.controller
    type_and_send(qtbot, window, message(0) + " " + message(1) + " " + message(2))
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    controller.update_settings(cid, sampling=SamplingSettings(temperature=0.0, max_tokens=4000, grammar=ASCII_GRAMMAR))
    type_and_send(qtbot, window, "Now write as much as you can about the sea.")
    wait_idle(qtbot, window, cid)
    cut = controller.branch(cid)[-1]
    assert cut.role == "assistant" and cut.stats.context_full, controller.failed.get(cid)
    widgets = chat_view(window).message_widgets()
    n, cut_widget = len(widgets), widgets[-1]
    qtbot.waitUntil(cut_widget.continue_button.isVisible, timeout=5_000)

    qtbot.mouseClick(cut_widget.continue_button, LEFT)
    qtbot.waitUntil(lambda: controller.is_busy(cid), timeout=10_000)
    live = controller.live_reply(cid)
    qtbot.waitUntil(lambda: live.num_tokens >= 5, timeout=REPLY_TIMEOUT_MS)
    chat_view(window).page().sync_live()
    streaming = chat_view(window).message_widgets()
    assert len(streaming) == n, [w.text()[:40] for w in streaming]  # no second reply below it
    assert copies(window, cut.content) == 1
    assert streaming[-2].text() == "Now write as much as you can about the sea."  # in its place
    assert streaming[-1].text().startswith(cut.content) and len(streaming[-1].text()) > len(cut.content)
    screenshot(window, "chat-continue-in-place")
    wait_idle(qtbot, window, cid)  # until the context is full again

    continued = controller.branch(cid)[-1]
    assert continued.content.startswith(cut.content) and continued.id != cut.id
    done = chat_view(window).message_widgets()
    assert len(done) == n and copies(window, cut.content) == 1
    last = done[-1]
    assert last.text() == continued.content
    assert continued.stats.context_full and last.continue_button is not None  # cut again
    # Its end comes above its line as the page is laid out: no other layout change is needed.
    qtbot.waitUntil(lambda: fully_shown(last), timeout=2_000)
    screenshot(window, "chat-continued")
