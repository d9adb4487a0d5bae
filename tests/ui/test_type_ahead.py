"""Type-ahead in the real window (issue 25): the draft is read into the chat's sequence while it
is written, and on Enter the reply is the one it would be without.

Every test writes a message the way a person does (key events, pauses, Backspace, the cursor
moved into the middle, Ctrl+Z, a paste from the clipboard, another chat opened, the model
unloaded or changed, the system prompt edited) in a chat with type-ahead on, then writes the
same message in a chat with type-ahead off (its settings' switch) whose history is the same,
and compares the two replies token for token (greedy). The engine's status afterwards shows
no read left running and, once the chats are ended, every sequence free.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.conversation.wording import reuse_words
from app.engine.errors import EngineError
from app.remote.endpoint import RemoteEndpoint
from app.storage import ReplyStats, SamplingSettings
from app.ui.chat import type_ahead as type_ahead_module
from app.ui.main_window import MainWindow
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import REPLY_TIMEOUT_MS, current_id, message_input, wait_idle
from tests.ui.screens import screenshot
from tests.ui.test_models_in_chat import click_library, library_model, manager_idle

TINY = {"n_ctx": 2048, "n_seq_max": 4, "n_batch": 32}
SAMPLING = SamplingSettings(temperature=0.0, max_tokens=16, grammar=ASCII_GRAMMAR)
FIRST = "Tell me about the rivers of Lyon."
QUESTION = "Which bridges cross the river, and which one is the oldest still standing?"
PASTE = " ".join(f"Line {i}: barges of coal, wine and stone pass the quays at dawn." for i in range(40))


@pytest.fixture(autouse=True)
def short_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type_ahead_module, "DEBOUNCE_MS", 120)


def engine_model(window: MainWindow, model_id: str = "tiny") -> Any:
    return window.engine.get_model(model_id)


def settle(qtbot: Any, window: MainWindow) -> None:
    """Wait until the open chat's draft is read (no pause pending, no read under way)."""
    qtbot.waitUntil(window.chat_page.type_ahead.idle, timeout=REPLY_TIMEOUT_MS)


def write(qtbot: Any, window: MainWindow, text: str, *, pause_ms: int = 160) -> None:
    """Type ``text`` word by word, pausing after each word long enough for a read."""
    box = message_input(window)
    box.setFocus()
    for i, word in enumerate(text.split(" ")):
        for j, line in enumerate((("" if i == 0 else " ") + word).split("\n")):
            if j:  # QTest types no "\n": Shift+Enter, as a person makes a new line
                qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
            qtbot.keyClicks(box, line)
        qtbot.wait(pause_ms)


def enter(qtbot: Any, window: MainWindow) -> ReplyStats:
    cid = current_id(window)
    qtbot.keyClick(message_input(window), Qt.Key.Key_Return)
    wait_idle(qtbot, window, cid)
    reply = window.controller.branch(cid)[-1]
    assert reply.role == "assistant", window.controller.failed.get(cid)
    assert reply.stats is not None
    return reply.stats


def reply_text(window: MainWindow, cid: str) -> str:
    return window.controller.branch(cid)[-1].content


def new_chat(qtbot: Any, window: MainWindow, *, type_ahead: bool) -> str:
    page = window.chat_page
    cid = page.new_conversation()
    assert cid is not None
    if not type_ahead:  # the chat's own switch, as a person turns it off
        page.settings_button.setChecked(True)
        page.settings_panel.type_ahead.setChecked(False)
        page.settings_button.setChecked(False)
        assert not page.type_ahead.enabled(cid)
    return cid


def first_turn(qtbot: Any, window: MainWindow) -> None:
    box = message_input(window)
    box.setPlainText(FIRST)
    enter(qtbot, window)
    box.clear()


def off_reply(qtbot: Any, window: MainWindow, message: str, *, first: bool = True, system: str | None = None) -> str:
    """The reply to ``message`` in a new chat with type-ahead off, on the same history."""
    cid = new_chat(qtbot, window, type_ahead=False)
    reads = window.chat_page.type_ahead.sent_reads
    if first:
        first_turn(qtbot, window)
    if system is not None:  # changed after the first turn, as in the chat it is compared with
        window.controller.update_settings(cid, system_prompt=system)
    box = message_input(window)
    box.setFocus()
    QApplication.clipboard().setText(message)  # pasted: how it got there is not what is compared
    qtbot.keyClick(box, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert box.toPlainText() == message
    qtbot.wait(300)  # past the pauses after which type-ahead reads (IDLE_PAUSE_MS, DEBOUNCE_MS), had it been on
    stats = enter(qtbot, window)
    assert stats.tokens_read_ahead == 0 and window.chat_page.type_ahead.sent_reads == reads
    return reply_text(window, cid)


def no_seq_left(qtbot: Any, window: MainWindow, *cids: str, model_id: str = "tiny") -> None:
    """Nothing reads ahead any more, and once the chats end every sequence is free."""
    model = engine_model(window, model_id)
    qtbot.waitUntil(lambda: model.snapshot().phase == "idle", timeout=REPLY_TIMEOUT_MS)
    states = {s.state for s in model.snapshot().slots}
    assert "reading_ahead" not in states and "prefilling" not in states, states
    for cid in {*cids, *(e.id for e in window.controller.catalog.entries())}:
        with contextlib.suppress(EngineError):  # a chat that never ran on this model
            model.end_session(cid)
    info = model.model_info()
    assert info.available_seqs == info.n_seq_max, f"{info.n_seq_max - info.available_seqs} seqs still taken"


def on_window(make_window: Any, **kw: Any) -> MainWindow:
    kw.setdefault("model_options", dict(TINY))
    return make_window(sampling=SAMPLING, **kw)


def test_type_delete_and_edit_in_the_middle(make_window, qtbot):
    window = on_window(make_window)
    cid = new_chat(qtbot, window, type_ahead=True)
    first_turn(qtbot, window)
    box = message_input(window)
    write(qtbot, window, QUESTION + " and more words to delete")
    settle(qtbot, window)
    view = window.chat_page.type_ahead.view(cid)
    assert view is not None and view.read > 10  # the draft is in the chat's sequence
    meter = window.chat_page.composer.meter
    qtbot.waitUntil(lambda: meter.parts[1] > 10, timeout=5000)  # the meter's lighter part
    for _ in range(len(" and more words to delete")):
        qtbot.keyClick(box, Qt.Key.Key_Backspace)
    qtbot.wait(150)
    # an edit in the middle: "river" becomes "old river"
    cursor = box.textCursor()
    cursor.setPosition(QUESTION.index("river"))
    box.setTextCursor(cursor)
    qtbot.keyClicks(box, "old ")
    settle(qtbot, window)
    message = QUESTION.replace("river", "old river")
    assert box.toPlainText() == message
    stats = enter(qtbot, window)
    assert stats.tokens_read_ahead > 10
    assert stats.prompt_tokens - stats.tokens_reused < 12  # the last word, end of turn, header
    on = reply_text(window, cid)
    assert on == off_reply(qtbot, window, message)
    no_seq_left(qtbot, window, cid)


def template_tail(window: MainWindow) -> int:
    """Tokens the chat template puts after the last user message (end of turn, assistant header)."""
    model = engine_model(window)
    a = model.apply_chat_template({"messages": [{"role": "user", "content": "Zebra"}]})
    b = model.apply_chat_template({"messages": [{"role": "user", "content": "Quokka?"}]})
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def test_the_word_being_typed_is_read_while_the_engine_is_idle(make_window, qtbot, monkeypatch):
    """No pause is long enough for ``DEBOUNCE_MS``, but the engine has nothing else to do: a
    short pause reads the draft whole, the word being typed included, so Enter reads only the
    end of turn and the assistant header — and the reply is the one without type-ahead."""
    monkeypatch.setattr(type_ahead_module, "DEBOUNCE_MS", 60_000)
    window = on_window(make_window)
    page = window.chat_page
    cid = new_chat(qtbot, window, type_ahead=True)
    first_turn(qtbot, window)
    asks: list[Any] = []
    window.models.get("tiny")._read_ahead_requested.connect(asks.append)
    write(qtbot, window, QUESTION[:-1])  # "… still standing": its last word has no space after it
    qtbot.waitUntil(page.type_ahead.idle, timeout=10_000)
    assert asks[-1].whole and asks[-1].draft == QUESTION[:-1]
    stats = enter(qtbot, window)
    assert stats.prompt_tokens - stats.tokens_reused == template_tail(window)
    assert reply_text(window, cid) == off_reply(qtbot, window, QUESTION[:-1])
    no_seq_left(qtbot, window, cid)


def test_no_whole_read_while_another_chat_streams(make_window, qtbot):
    """A reply streaming in another chat keeps the reads to word ends (its tokens go first);
    once it ends, the draft is read whole."""
    window = on_window(make_window)
    other = new_chat(qtbot, window, type_ahead=False)
    window.controller.update_settings(other, sampling=SamplingSettings(temperature=0.0, max_tokens=4000, grammar=ASCII_GRAMMAR))
    window.controller.send(other, "Tell me a very long story.")
    cid = new_chat(qtbot, window, type_ahead=True)
    asks: list[Any] = []
    window.models.get("tiny")._read_ahead_requested.connect(asks.append)
    write(qtbot, window, "Which bridges cross the river")
    qtbot.wait(300)
    assert window.controller.is_busy(other), "the other chat's reply ended too soon for this test"
    assert asks and not any(a.whole for a in asks)
    window.controller.stop(other)
    wait_idle(qtbot, window, other)
    qtbot.waitUntil(lambda: asks[-1].whole, timeout=10_000)
    settle(qtbot, window)
    stats = enter(qtbot, window)
    assert stats.prompt_tokens - stats.tokens_reused == template_tail(window)
    no_seq_left(qtbot, window, cid, other)


def test_paste_then_a_question_while_it_is_read(make_window, qtbot):
    window = on_window(make_window)
    cid = new_chat(qtbot, window, type_ahead=True)
    box = message_input(window)
    box.setFocus()
    shown: list[str] = []
    reading = window.chat_page.composer.reading
    window.chat_page.type_ahead.changed.connect(lambda _c: shown.append(reading.text()))
    QApplication.clipboard().setText(PASTE)
    qtbot.keyClick(box, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)  # read at once
    assert window.chat_page.type_ahead.sent_reads == 1
    for _ in range(2):  # Shift+Enter: new lines, then a question typed while the paste is read
        qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(box, "What do the barges carry?")
    settle(qtbot, window)
    assert any(s.startswith("Reading the prompt… ") for s in shown), shown
    assert not reading.isVisible()  # gone once read
    stats = enter(qtbot, window)
    assert stats.tokens_read_ahead > 400
    on = reply_text(window, cid)
    assert on == off_reply(qtbot, window, PASTE + "\n\nWhat do the barges carry?", first=False)
    no_seq_left(qtbot, window, cid)


def test_undo_to_a_shorter_draft(make_window, qtbot):
    window = on_window(make_window)
    cid = new_chat(qtbot, window, type_ahead=True)
    first_turn(qtbot, window)
    box = message_input(window)
    write(qtbot, window, "Which bridges cross the river")
    settle(qtbot, window)
    before = window.chat_page.type_ahead.view(cid).read
    QApplication.clipboard().setText(" and why were so many of them rebuilt after the war")
    qtbot.keyClick(box, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    settle(qtbot, window)
    assert window.chat_page.type_ahead.view(cid).read > before + 5
    qtbot.keyClick(box, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)  # undo the paste
    assert box.toPlainText() == "Which bridges cross the river"
    settle(qtbot, window)
    stats = enter(qtbot, window)
    assert stats.tokens_read_ahead > 0
    assert reply_text(window, cid) == off_reply(qtbot, window, "Which bridges cross the river")
    no_seq_left(qtbot, window, cid)


def test_switch_chats_mid_draft(make_window, qtbot):
    """Each chat keeps its own draft: the one left stops reading (what it read stays in its
    sequence); opened again, its draft is back in the box and goes on being read."""
    window = on_window(make_window)
    page = window.chat_page
    box = message_input(window)
    a = new_chat(qtbot, window, type_ahead=True)
    first_turn(qtbot, window)
    b = new_chat(qtbot, window, type_ahead=True)
    page.open_conversation(a)
    write(qtbot, window, QUESTION[:40])  # read into a's sequence
    page.open_conversation(b)  # mid-draft: a stops, the box shows b's draft (none)
    assert page.type_ahead.view(a) is None
    assert box.toPlainText() == ""
    write(qtbot, window, "Something else entirely.")
    settle(qtbot, window)
    page.open_conversation(a)  # a's draft is back; b's waits for b
    assert box.toPlainText() == QUESTION[:40]
    assert box.textCursor().atEnd()
    write(qtbot, window, " bridges?")
    settle(qtbot, window)
    message = QUESTION[:40] + " bridges?"
    stats = enter(qtbot, window)
    assert stats.tokens_read_ahead > len(QUESTION[:40].split())  # what was read before the switch counts
    on_a = reply_text(window, a)
    page.open_conversation(b)
    assert box.toPlainText() == "Something else entirely."
    settle(qtbot, window)
    assert enter(qtbot, window).tokens_read_ahead > 0
    on_b = reply_text(window, b)
    assert on_a == off_reply(qtbot, window, message)
    assert on_b == off_reply(qtbot, window, "Something else entirely.", first=False)
    no_seq_left(qtbot, window, a, b)


def test_a_deleted_chats_draft_goes_with_it(make_window, qtbot):
    window = on_window(make_window)
    page = window.chat_page
    box = message_input(window)
    a = new_chat(qtbot, window, type_ahead=True)
    b = new_chat(qtbot, window, type_ahead=True)
    write(qtbot, window, "A draft for b")
    page.open_conversation(a)
    write(qtbot, window, "A draft for a")
    window.controller.delete(a)
    qtbot.waitUntil(lambda: current_id(window) == b, timeout=REPLY_TIMEOUT_MS)
    assert box.toPlainText() == "A draft for b"
    settle(qtbot, window)
    no_seq_left(qtbot, window, b)


def test_enter_while_a_read_ahead_chunk_runs(make_window, qtbot):
    window = on_window(make_window)
    cid = new_chat(qtbot, window, type_ahead=True)
    box = message_input(window)
    box.setFocus()
    updates = []
    window.models.read_ahead_received.connect(updates.append)
    QApplication.clipboard().setText(PASTE)
    qtbot.keyClick(box, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: any(0 < u.held < u.target for u in updates), timeout=REPLY_TIMEOUT_MS)
    stats = enter(qtbot, window)  # the read is still going: the request takes its sequence
    assert 0 < stats.tokens_read_ahead < stats.prompt_tokens
    assert reply_text(window, cid) == off_reply(qtbot, window, PASTE, first=False)
    no_seq_left(qtbot, window, cid)


def test_unload_the_model_mid_draft(make_window, qtbot, data_dir, tiny_model_path):
    path = library_model(data_dir, tiny_model_path)
    window = on_window(make_window, model_path=path, model_id=None, work_areas=True)
    cid = new_chat(qtbot, window, type_ahead=True)
    first_turn(qtbot, window)
    box = message_input(window)
    box.setFocus()
    QApplication.clipboard().setText(PASTE)
    qtbot.keyClick(box, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    window.model_manager.unload_model("tiny-chat")  # while the paste is read
    manager_idle(qtbot, window)
    assert window.engine.list_models() == []
    settle(qtbot, window)  # a pause may still be pending (the model list changed): nothing to read on
    assert window.chat_page.type_ahead.view(cid) is None
    click_library(qtbot, window, path, "load")
    window.chat_page.open_conversation(cid)
    write(qtbot, window, " What do they carry?")
    settle(qtbot, window)
    stats = enter(qtbot, window)
    assert stats.tokens_read_ahead > 0
    assert reply_text(window, cid) == off_reply(qtbot, window, PASTE + " What do they carry?")
    no_seq_left(qtbot, window, cid, model_id="tiny-chat")


def test_change_the_system_prompt_mid_draft(make_window, qtbot):
    window = on_window(make_window)
    page = window.chat_page
    cid = new_chat(qtbot, window, type_ahead=True)
    first_turn(qtbot, window)
    write(qtbot, window, QUESTION)
    settle(qtbot, window)
    page.settings_button.setChecked(True)
    page.settings_panel.system_prompt.setPlainText("You answer like a ferryman.")
    page.settings_panel.flush()  # saved, as after the panel's pause: the draft is read again
    settle(qtbot, window)
    stats = enter(qtbot, window)
    assert stats.tokens_read_ahead > 0
    assert reply_text(window, cid) == off_reply(qtbot, window, QUESTION, system="You answer like a ferryman.")
    no_seq_left(qtbot, window, cid)


def test_change_the_model_mid_draft(make_window, qtbot, data_dir, tiny_model_path):
    first = library_model(data_dir, tiny_model_path, "tiny-a")
    second = library_model(data_dir, tiny_model_path, "tiny-b")
    window = on_window(make_window, model_path=first, model_id=None, work_areas=True)
    click_library(qtbot, window, second, "load")
    page = window.chat_page
    cid = new_chat(qtbot, window, type_ahead=True)
    page.pick_model("tiny-a")
    first_turn(qtbot, window)
    write(qtbot, window, QUESTION)
    settle(qtbot, window)
    page.pick_model("tiny-b")  # mid-draft: tiny-a ends the chat's session, tiny-b reads
    settle(qtbot, window)
    stats = enter(qtbot, window)
    assert stats.tokens_read_ahead > 0
    on = reply_text(window, cid)
    off = new_chat(qtbot, window, type_ahead=False)
    page.pick_model("tiny-a")
    first_turn(qtbot, window)
    page.pick_model("tiny-b")
    write(qtbot, window, QUESTION, pause_ms=20)
    enter(qtbot, window)
    assert on == reply_text(window, off)
    no_seq_left(qtbot, window, off, model_id="tiny-a")
    no_seq_left(qtbot, window, cid, off, model_id="tiny-b")


def test_off_in_settings_and_never_for_a_cleared_draft(make_window, qtbot):
    window = on_window(make_window)
    page = window.chat_page
    cid = new_chat(qtbot, window, type_ahead=True)
    window.app_actions.open_settings().type_ahead.setChecked(False)  # Settings › New chats
    assert not page.type_ahead.enabled(cid)
    write(qtbot, window, "Not read at all", pause_ms=20)
    settle(qtbot, window)
    assert page.type_ahead.sent_reads == 0
    window.app_actions.dialog.type_ahead.setChecked(True)
    settle(qtbot, window)
    assert page.type_ahead.sent_reads == 1 and page.type_ahead.view(cid) is not None
    message_input(window).clear()  # a cleared draft stops and is never read
    assert page.type_ahead.view(cid) is None
    qtbot.wait(300)
    assert page.type_ahead.sent_reads == 1
    no_seq_left(qtbot, window, cid)


def test_the_meter_reads_ahead_a_paste(make_window, qtbot, smollm2_or_tiny):
    """The screenshot of the README (SmolLM2 when screenshots are taken): a long paste read
    while the question is typed, the meter's lighter part growing, then the reply line's words."""
    path, model_id, sampling = smollm2_or_tiny
    window = make_window(model_path=path, model_id=model_id, sampling=sampling,
                         model_options={"n_ctx": 4096, "n_seq_max": 2, "n_batch": 64})  # fmt: skip
    page = window.chat_page
    cid = new_chat(qtbot, window, type_ahead=True)
    box = message_input(window)
    box.setFocus()
    QApplication.clipboard().setText(PASTE * 3)
    qtbot.keyClick(box, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    for _ in range(2):
        qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(box, "What do the barges carry")
    meter = page.composer.meter

    def halfway() -> bool:
        view = page.type_ahead.view(cid)
        return view is not None and (not view.reading or view.held > view.target // 3)

    qtbot.waitUntil(halfway, timeout=REPLY_TIMEOUT_MS)
    view = page.type_ahead.view(cid)
    if view is not None and view.reading:  # SmolLM2 on a CPU: still reading, as a person sees it
        assert page.composer.reading.text().startswith("Reading the prompt… ")
        screenshot(window, "chat-type-ahead-reading")
    settle(qtbot, window)
    qtbot.waitUntil(lambda: meter.parts[1] > 0.9 * meter.parts[2] > 0, timeout=10_000)
    assert "Read ahead while you type" in meter.toolTip()
    screenshot(window, "chat-type-ahead")
    screenshot(page.composer, "chat-type-ahead-composer")
    stats = enter(qtbot, window)
    assert stats.tokens_read_ahead > 0.9 * stats.prompt_tokens
    line = reuse_words(stats)
    assert line.startswith(f"read ahead while you typed: {stats.tokens_read_ahead:,} of {stats.prompt_tokens:,}")
    no_seq_left(qtbot, window, cid, model_id=model_id)


def test_an_overflowing_draft_reads_what_the_policy_sends(make_window, qtbot):
    """A 512-token context, drop the oldest turns: the draft pushes the chat past its limit, so
    the view type-ahead reads starts later (the same planner as the request)."""
    window = on_window(make_window, model_options={"n_ctx": 512, "n_seq_max": 4, "n_batch": 32})
    long_turn = " ".join(f"Line {i}: barges of coal pass the quays." for i in range(14))

    def history() -> None:
        box = message_input(window)
        for n in range(2):
            box.setPlainText(f"Turn {n}. {long_turn}")
            enter(qtbot, window)

    cid = new_chat(qtbot, window, type_ahead=True)
    history()
    start = window.controller.window(cid).start_id
    message = f"And now? {long_turn} {long_turn}"
    QApplication.clipboard().setText(message)
    qtbot.keyClick(message_input(window), Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    settle(qtbot, window)
    assert window.chat_page.type_ahead.view(cid).read > 50
    stats = enter(qtbot, window)
    assert window.controller.window(cid).start_id != start  # this message cut the view again
    assert stats.tokens_read_ahead > 50  # what was read is the view the request sent
    on = reply_text(window, cid)
    off = new_chat(qtbot, window, type_ahead=False)
    history()
    message_input(window).setPlainText(message)
    enter(qtbot, window)
    assert on == reply_text(window, off)
    no_seq_left(qtbot, window, cid, off)


def test_never_for_a_remote_model(make_window, qtbot):
    window = on_window(make_window)
    page = window.chat_page
    endpoint = RemoteEndpoint("http://127.0.0.1:9/v1", "nobody", name="remote box")  # never asked
    window.models.open_remote(endpoint)
    cid = new_chat(qtbot, window, type_ahead=True)
    page.pick_model(endpoint.model_id)
    assert window.controller.model_of(cid) == endpoint.model_id
    write(qtbot, window, "A question for the remote model")
    settle(qtbot, window)
    assert page.type_ahead.sent_reads == 0 and page.type_ahead.view(cid) is None
    page.pick_model("tiny")  # the same draft on the local model is read
    settle(qtbot, window)
    assert page.type_ahead.sent_reads == 1 and page.type_ahead.view(cid) is not None
    no_seq_left(qtbot, window, cid)
