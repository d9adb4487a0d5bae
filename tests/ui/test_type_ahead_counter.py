"""Issue 50, item 9: while a paste is read ahead, typing the question after it does not drop
"Reading the prompt…" back to 0: what was read stays read, and the counter goes on from it.
On SmolLM2 (the bundled model), slow enough on a CPU for a read to be caught mid-way."""

from __future__ import annotations

import re

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.storage import SamplingSettings
from tests.helpers.tiny_model import smollm2_gguf_path
from tests.ui.helpers import message_input
from tests.ui.screens import screenshot
from tests.ui.test_type_ahead import PASTE, new_chat, settle

DONE = re.compile(r"Reading the prompt… ([\d,]+) / ([\d,]+) tokens")


def test_typing_after_a_paste_keeps_the_counter(make_window, qtbot):
    window = make_window(
        model_path=smollm2_gguf_path(), model_id="SmolLM2",
        model_options={"n_ctx": 2048, "n_seq_max": 2, "n_batch": 256},
        sampling=SamplingSettings(temperature=0.0, max_tokens=8),
    )  # fmt: skip
    new_chat(qtbot, window, type_ahead=True)
    box = message_input(window)
    box.setFocus()
    reading = window.chat_page.composer.reading
    shown: list[tuple[int, int]] = []

    def note(_cid: str) -> None:
        m = DONE.match(reading.text())
        if m:
            shown.append((int(m[1].replace(",", "")), int(m[2].replace(",", ""))))

    window.chat_page.type_ahead.changed.connect(note)
    QApplication.clipboard().setText(PASTE)
    qtbot.keyClick(box, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)  # read at once
    qtbot.waitUntil(lambda: any(done > 0 for done, _t in shown), timeout=30_000)
    for _ in range(2):
        qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    for word in ("What", " do", " the", " barges", " carry?"):
        qtbot.keyClicks(box, word)
        qtbot.wait(150)  # word ends: each is read ahead, a new read of the grown draft
    screenshot(window, "chat-type-ahead-counter-goes-on")
    settle(qtbot, window)
    assert len({target for _d, target in shown}) > 1, shown  # the question started new reads
    dones = [done for done, _t in shown]
    assert all(b >= a for a, b in zip(dones, dones[1:], strict=False)), shown  # never back to 0
