"""Reading a long prompt shows its progress and can be stopped; the hit figures of the reply
lines, the status bar and the Cache dashboard agree, and survive a restart."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt, QTimer

from app.storage import SamplingSettings
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import (
    REPLY_TIMEOUT_MS,
    chat_view,
    current_id,
    message_input,
    stop_button,
    type_and_send,
    wait_idle,
)
from tests.ui.screens import screenshot

LEFT = Qt.MouseButton.LeftButton
PARAGRAPH = (
    "The harbour master kept a ledger of every boat that came in at dawn: its name, its "
    "catch, the weather it met and the nets it lost. "
)


def paste_and_send(qtbot, window, text: str) -> None:
    box = message_input(window)
    box.setFocus()
    box.setPlainText(text)  # a paste
    qtbot.keyClick(box, Qt.Key.Key_Return)


def test_prefill_progress_reaches_the_total(make_window, qtbot):
    window = make_window(model_options={"n_ctx": 2048, "n_seq_max": 2, "n_batch": 32})
    updates = []
    window.models.update_received.connect(updates.append)
    shown: list[str] = []

    def on_progress(cid: str) -> None:
        live = chat_view(window).live_widget()
        if live is not None and live.progress_text():
            shown.append(live.progress_text())
            if len(shown) == 1:  # not inside this slot: the shot runs the event loop
                QTimer.singleShot(0, lambda: screenshot(window, "chat-prefill-progress"))

    window.controller.reply_progressed.connect(on_progress)
    paste_and_send(qtbot, window, PARAGRAPH * 40)
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    reply = window.controller.branch(cid)[-1]
    assert reply.role == "assistant"
    progress = [u.prefill for u in updates if u.prefill is not None]
    assert progress, "no prefill progress arrived"
    assert [d for d, _t in progress] == sorted(d for d, _t in progress)
    total = reply.stats.prompt_tokens
    assert total > 1000 and {t for _d, t in progress} == {total}
    assert progress[-1] == (total, total)  # it reaches the total
    assert shown and all(s.startswith("Reading the prompt… ") for s in shown)
    assert any(f"/ {total:,} tokens" in s for s in shown)


@pytest.mark.smollm2
def test_stop_cancels_the_prefill(make_window, qtbot, smollm2_path):
    window = make_window(
        model_path=smollm2_path,
        model_id="SmolLM2",
        model_options={"n_ctx": 4096, "n_seq_max": 2, "n_batch": 64},
        sampling=SamplingSettings(temperature=0.0, max_tokens=32),
    )
    updates = []
    window.models.update_received.connect(updates.append)
    paste_and_send(qtbot, window, PARAGRAPH * 90)
    cid = current_id(window)
    qtbot.waitUntil(
        lambda: any(u.prefill and 0 < u.prefill[0] < u.prefill[1] for u in updates),
        timeout=REPLY_TIMEOUT_MS,
    )
    assert stop_button(window).isVisible()
    qtbot.mouseClick(stop_button(window), LEFT)
    wait_idle(qtbot, window, cid)
    done = next(u.done for u in updates if u.done is not None)
    assert done.finish_reason == "cancelled" and done.completion_tokens == 0
    read = max(u.prefill[0] for u in updates if u.prefill)
    assert read < done.prompt_tokens  # stopped while the prompt was being read
    assert window.controller.branch(cid)[-1].role == "user"  # the message stays; no reply
    window.chat_page.new_conversation()  # and the model goes on serving
    type_and_send(qtbot, window, "Hi")
    wait_idle(qtbot, window)
    assert window.controller.branch(current_id(window))[-1].role == "assistant"


def _hits_shown(window) -> tuple[str, str, str]:
    dash = window.cache_dashboard
    dash.sample()
    return (
        window.status_hits.text(),
        dash.stats_panel.headline.text(),
        dash.stats_panel.subline.text(),
    )


def test_hit_figures_agree_everywhere_and_survive_a_restart(make_window, qtbot, data_dir):
    sampling = SamplingSettings(temperature=0.0, max_tokens=24, grammar=ASCII_GRAMMAR)
    window = make_window(work_areas=True, sampling=sampling)
    type_and_send(qtbot, window, "first question about the harbour")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    type_and_send(qtbot, window, "second question about the boats")
    wait_idle(qtbot, window, cid)
    lines = [w.meta.text() for w in chat_view(window).message_widgets() if w.meta is not None]
    assert "read all" in lines[0]
    assert "still held for this chat" in lines[1]  # a continuation is a hit
    qtbot.waitUntil(lambda: _hits_shown(window)[0].startswith("Cache: hits 50 %"), timeout=10_000)
    status, headline, subline = _hits_shown(window)
    assert "1 of 2 requests" in window.status_hits.toolTip()
    assert headline.startswith("Hits 50 % of 2 requests · tokens reused: ")
    assert subline.startswith("1 of 2 requests")
    window.close()

    again = make_window(data_dir, work_areas=True, sampling=sampling)
    status, headline, subline = _hits_shown(again)
    assert status.startswith("Cache: hits 50 %") and subline.startswith("1 of 2 requests")
    type_and_send(qtbot, again, "third question, after the restart")
    wait_idle(qtbot, again, cid)
    line = chat_view(again).message_widgets()[-1].meta.text()
    assert "from the cache" in line  # restored from disk: a hit
    qtbot.waitUntil(lambda: _hits_shown(again)[0].startswith("Cache: hits 67 %"), timeout=10_000)
    status, headline, subline = _hits_shown(again)
    assert headline.startswith("Hits 67 % of 3 requests · tokens reused: ")
    assert subline.startswith("2 of 3 requests")
    replies = [m for m in again.controller.branch(cid) if m.role == "assistant"]
    reused = [m for m in replies if m.stats.cache_hit_kind != "cold"]
    assert (len(reused), len(replies)) == (2, 3)  # the reply lines count the same
