"""Documents, read once (issue 52), in the real window on the tiny model: files attached by a
drop on the chat and by the attach button, read at once, asked about, asked again, carried
into a new chat, kept across a restart and named in an export; each bad file refused in words
with the chat still usable. Every reply is compared with a cold run of the same prompt (a
fresh data directory, type-ahead off: nothing read ahead, nothing in the cache).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QInputDialog,
    QLabel,
    QPushButton,
    QToolButton,
)

from app.storage import SamplingSettings
from app.ui.main_window import MainWindow
from tests.helpers.documents import TALE, encrypted_pdf, scanned_pdf, text_pdf
from tests.helpers.tiny_model import smollm2_gguf_path
from tests.ui.helpers import (
    REPLY_TIMEOUT_MS,
    answer_confirmation,
    chat_view,
    current_id,
    message_input,
    select_conversation,
    type_and_send,
    wait_idle,
)
from tests.ui.screens import screenshot
from tests.ui.test_small_things import context_menu_action

LEFT = Qt.MouseButton.LeftButton
NOTES = "\n".join(f"- Harbour rule {i}: boats of the {w} guild moor at berth {i * 3}." for i, w in
                  enumerate(["salt", "wine", "stone", "coal", "wool", "iron"]))  # fmt: skip
FIRST = "which guild moors at berth six"
SECOND = "and who moors at berth nine"


def files(tmp_path: Path) -> tuple[Path, Path]:
    notes = tmp_path / "harbour-notes.md"
    notes.write_text("# Harbour notes\n\n" + NOTES + "\n", encoding="utf-8")
    pdf = text_pdf(tmp_path / "tale.pdf", [TALE, "The second page. " + TALE[:160]])
    return notes, pdf


def drop(window: MainWindow, paths: list[Path]) -> None:
    """Drop ``paths`` on the chat, as from a file manager."""
    view = chat_view(window)
    target = view.childAt(view.rect().center()) or view  # the widget under the pointer
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    pos = target.mapFrom(view, view.rect().center())
    enter = QDragEnterEvent(pos, Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    event = QDropEvent(QPointF(pos), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                       Qt.KeyboardModifier.NoModifier)  # fmt: skip
    QApplication.sendEvent(target, event)


def attach_with_button(qtbot: Any, window: MainWindow, monkeypatch: Any, paths: list[Path]) -> None:
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(lambda *_a, **_k: ([str(p) for p in paths], "")))
    qtbot.mouseClick(window.findChild(QToolButton, "attachButton"), LEFT)


def rows(window: MainWindow) -> list[str]:
    bar = window.chat_page.documents_bar
    return [w.text() for w in bar.findChildren(QLabel, "documentRow") if w.isVisibleTo(bar)]


def note(window: MainWindow) -> str:
    label = window.chat_page.documents_bar.note
    return label.text() if label.isVisibleTo(window.chat_page.documents_bar) else ""


def documents_read(qtbot: Any, window: MainWindow) -> None:
    """Wait until the open chat's documents are read ahead (and counted)."""
    page = window.chat_page
    cid = current_id(window)

    def done() -> bool:
        view = page.type_ahead.view(cid)
        return view is not None and not view.reading and view.held >= view.target > 0 and page.type_ahead.idle()

    qtbot.waitUntil(done, timeout=REPLY_TIMEOUT_MS)


def ask(qtbot: Any, window: MainWindow, text: str) -> Any:
    cid = current_id(window)
    type_and_send(qtbot, window, text)
    wait_idle(qtbot, window, cid)
    reply = window.controller.branch(cid)[-1]
    assert reply.role == "assistant", window.controller.failed.get(cid)
    return reply


def cold_reply(qtbot: Any, make_window: Any, tmp_path: Path, paths: list[Path], question: str) -> str:
    """The reply in a fresh data directory with type-ahead off: every token read cold."""
    window = make_window(tmp_path / f"cold-{len(list(tmp_path.glob('cold-*')))}")
    page = window.chat_page
    cid = page.new_conversation()
    page.settings_button.setChecked(True)
    page.settings_panel.type_ahead.setChecked(False)
    page.settings_button.setChecked(False)
    drop(window, paths)
    qtbot.waitUntil(lambda: len(rows(window)) == len(paths), timeout=REPLY_TIMEOUT_MS)
    reads = page.type_ahead.sent_reads
    reply = ask(qtbot, window, question)
    assert page.type_ahead.sent_reads == reads and reply.stats.tokens_reused == 0, reply.stats
    assert current_id(window) == cid
    window.close()
    return reply.content


@pytest.mark.qt_log_ignore("This plugin does not support")  # the context menu
def test_attach_ask_again_new_chat_restart_export(make_window, qtbot, tmp_path, data_dir, monkeypatch):
    notes, pdf = files(tmp_path)
    window = make_window()
    page = window.chat_page
    cid = page.new_conversation()
    drop(window, [notes])
    qtbot.waitUntil(lambda: len(rows(window)) == 1, timeout=REPLY_TIMEOUT_MS)
    attach_with_button(qtbot, window, monkeypatch, [pdf])
    qtbot.waitUntil(lambda: len(rows(window)) == 2, timeout=REPLY_TIMEOUT_MS)
    assert [d.name for d in window.controller.storage.documents(cid)] == ["harbour-notes.md", "tale.pdf"]
    qtbot.waitUntil(lambda: all(" tokens" in r for r in rows(window)), timeout=REPLY_TIMEOUT_MS)
    documents_read(qtbot, window)
    qtbot.waitUntil(lambda: "read: in this chat's memory" in rows(window)[1], timeout=REPLY_TIMEOUT_MS)
    line = rows(window)[1]
    assert line.startswith("tale.pdf · 2 pages · ") and "read: in this chat's memory" in line, line
    held = page.type_ahead.view(cid).held
    doc_tokens = sum(int(r.split(" · ")[-2].split()[0].replace(",", "")) for r in rows(window))
    used = int(page.composer.meter.text().split(" / ")[0].replace(",", ""))
    assert used >= doc_tokens, (used, doc_tokens)  # the meter counts the documents before any reply
    screenshot(window, "documents-attached")

    first = ask(qtbot, window, FIRST)
    assert first.stats.tokens_reused >= held - 2, first.stats  # only the question was left
    qtbot.waitUntil(lambda: "kept: the last reply reused " in rows(window)[0], timeout=REPLY_TIMEOUT_MS)
    second = ask(qtbot, window, SECOND)
    assert second.stats.tokens_reused >= first.stats.prompt_tokens, second.stats  # the first turn whole
    screenshot(window, "documents-asked")

    qtbot.mouseClick(window.findChild(QPushButton, "newChatWithDocumentsButton"), LEFT)
    other = current_id(window)
    assert other != cid and [d.name for d in window.controller.storage.documents(other)] == [
        "harbour-notes.md", "tale.pdf"]
    again = ask(qtbot, window, FIRST)
    assert again.content == first.content
    assert again.stats.tokens_reused >= held - 2, again.stats  # the documents came from the cache

    out = tmp_path / "chat.md"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *_a: (str(out), "")))
    context_menu_action(qtbot, window, cid, "Export as Markdown…")
    qtbot.waitUntil(out.exists, timeout=5_000)
    exported = out.read_text(encoding="utf-8")
    assert "- harbour-notes.md" in exported and "- tale.pdf (2 pages)" in exported
    select_conversation(qtbot, window, cid)
    window.close()

    restarted = make_window(data_dir)
    assert current_id(restarted) == cid
    qtbot.waitUntil(lambda: len(rows(restarted)) == 2, timeout=10_000)
    after = ask(qtbot, restarted, "what is on the second page")
    assert after.stats.cache_hit_kind in ("partial", "exact") and after.stats.cache_read >= held, after.stats
    screenshot(restarted, "documents-after-restart")
    restarted.close()

    assert cold_reply(qtbot, make_window, tmp_path, [notes, pdf], FIRST) == first.content


@pytest.mark.qt_log_ignore("This plugin does not support")  # the question before attaching
def test_bad_files_say_why_and_the_chat_works(make_window, qtbot, tmp_path, monkeypatch):
    window = make_window()
    page = window.chat_page
    cid = page.new_conversation()
    binary = tmp_path / "photo.jpg"
    binary.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + os.urandom(30_000))
    huge = tmp_path / "huge.log"
    with huge.open("wb") as f:
        f.truncate(500 * 10**6)  # sparse: 500 MB, nothing to read
    bad_text = tmp_path / "broken.txt"
    bad_text.write_bytes(b"\xff\xfe" + "half a UTF-16 file".encode("utf-16-le") + b"\x00\xd8")
    cases = [
        (scanned_pdf(tmp_path / "scan.pdf"), "scan.pdf has no text layer"),
        (encrypted_pdf(tmp_path / "locked.pdf"), "locked.pdf is encrypted"),
        (binary, "photo.jpg looks like a binary file"),
        (huge, "huge.log is too large to attach (476.8 MiB; the limit is 64.0 MiB)"),
        (bad_text, "broken.txt starts as UTF-16 text but is not"),
    ]
    for path, words in cases:
        drop(window, [path])
        qtbot.waitUntil(lambda w=words: note(window).startswith(w), timeout=REPLY_TIMEOUT_MS)
        assert window.controller.storage.documents(cid) == [] and rows(window) == []
        if path.name == "scan.pdf":
            screenshot(window, "documents-refused-scan")
    reply = ask(qtbot, window, "still there")
    assert reply.content

    # Attaching to a chat with messages reads it again after the document: asked first.
    notes, _pdf = files(tmp_path)
    asked: list[str] = []
    answer_confirmation("cancelButton", asked)
    drop(window, [notes])
    qtbot.waitUntil(lambda: bool(asked), timeout=REPLY_TIMEOUT_MS)
    assert "reads this chat's conversation again after it" in asked[0]
    assert window.controller.storage.documents(cid) == []
    answer_confirmation("confirmButton", asked)
    drop(window, [notes])
    qtbot.waitUntil(lambda: len(rows(window)) == 1, timeout=REPLY_TIMEOUT_MS)
    documents_read(qtbot, window)
    reply = ask(qtbot, window, FIRST)
    assert reply.content

    # Removing it: the next message is read without it.
    qtbot.mouseClick(window.findChild(QToolButton, "removeDocumentButton"), LEFT)
    qtbot.waitUntil(lambda: rows(window) == [], timeout=10_000)
    assert window.controller.storage.documents(cid) == []
    assert ask(qtbot, window, "and now").content


def test_too_big_for_the_context_is_said_before_sending(make_window, qtbot, tmp_path):
    window = make_window()
    page = window.chat_page
    cid = page.new_conversation()
    big = tmp_path / "long-notes.txt"
    big.write_text("\n".join(f"Line {i}: " + TALE for i in range(40)), encoding="utf-8")
    drop(window, [big])
    qtbot.waitUntil(lambda: note(window).startswith("Too big for the context"), timeout=REPLY_TIMEOUT_MS)
    text = note(window)
    assert "holds 1,024" in text and "Models › Library" in text and "remove a document" in text
    box = message_input(window)
    box.setFocus()
    qtbot.keyClicks(box, "summarise it")
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert window.controller.branch(cid) == []  # not sent, nothing cut
    assert page.composer.note.text().startswith("Too big for the context")
    screenshot(window, "documents-too-big")
    qtbot.mouseClick(window.findChild(QToolButton, "removeDocumentButton"), LEFT)
    qtbot.waitUntil(lambda: rows(window) == [], timeout=10_000)
    qtbot.keyClick(box, Qt.Key.Key_Return)
    wait_idle(qtbot, window, cid)
    assert window.controller.branch(cid)[-1].role == "assistant"


READING = re.compile(r"Reading tale\.pdf… ([\d,]+) / ([\d,]+) tokens")


def test_reading_on_attach_shows_its_progress(make_window, qtbot, tmp_path):
    """On SmolLM2, slow enough on a CPU for the read to be seen mid-way."""
    window = make_window(
        model_path=smollm2_gguf_path(), model_id="SmolLM2",
        model_options={"n_ctx": 4096, "n_seq_max": 2, "n_batch": 256},
        sampling=SamplingSettings(temperature=0.0, max_tokens=24),
    )  # fmt: skip
    page = window.chat_page
    page.new_conversation()
    pdf = text_pdf(tmp_path / "tale.pdf", [f"Chapter {i}. " + TALE * 3 for i in range(1, 5)])
    seen: list[tuple[int, int]] = []

    def note(_cid: str) -> None:
        m = READING.match(page.composer.reading.text())
        if m and page.composer.reading.isVisibleTo(page):
            seen.append((int(m[1].replace(",", "")), int(m[2].replace(",", ""))))
            if len(seen) == 2:
                screenshot(window, "documents-reading-on-attach")

    page.type_ahead.changed.connect(note)
    drop(window, [pdf])
    qtbot.waitUntil(lambda: any(0 < done < total for done, total in seen), timeout=REPLY_TIMEOUT_MS)
    documents_read(qtbot, window)
    assert seen[-1][1] > 1200, seen  # the whole document, not a part
    assert not page.composer.reading.isVisibleTo(page)
    reply = ask(qtbot, window, "How does chapter three begin?")
    assert reply.stats.tokens_reused >= seen[-1][1] - 2, reply.stats  # only the question was left
    screenshot(window, "documents-smollm2-reply")


@pytest.mark.qt_log_ignore("This plugin does not support")  # the page range's question
def test_too_big_pdf_keeps_a_page_range(make_window, qtbot, tmp_path, monkeypatch):
    window = make_window()
    page = window.chat_page
    cid = page.new_conversation()
    pdf = text_pdf(tmp_path / "long.pdf", [f"Page {i}. " + TALE for i in range(1, 13)])
    drop(window, [pdf])
    qtbot.waitUntil(lambda: note(window).startswith("Too big for the context"), timeout=REPLY_TIMEOUT_MS)
    keep = window.findChild(QPushButton, "documentPagesButton")
    assert keep.isVisibleTo(page)
    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *_a, **_k: ("2-3", True)))
    qtbot.mouseClick(keep, LEFT)
    qtbot.waitUntil(lambda: [d.name for d in window.controller.storage.documents(cid)] == ["long.pdf (pages 2-3)"],
                    timeout=REPLY_TIMEOUT_MS)
    qtbot.waitUntil(lambda: note(window) == "", timeout=10_000)
    text = window.controller.storage.documents(cid)[0].text
    assert text.startswith("Page 2.") and "Page 3." in text and "Page 4." not in text
    assert not keep.isVisibleTo(page)
    documents_read(qtbot, window)
    assert ask(qtbot, window, FIRST).content


def test_a_pasted_file_is_attached_not_typed(make_window, qtbot, tmp_path):
    notes, _pdf = files(tmp_path)
    window = make_window()
    window.chat_page.new_conversation()
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(notes))])  # as a file manager's Copy puts it
    QApplication.clipboard().setMimeData(mime)
    box = message_input(window)
    box.setFocus()
    qtbot.keyClick(box, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: len(rows(window)) == 1, timeout=REPLY_TIMEOUT_MS)
    assert box.toPlainText() == ""  # the path is not the message
    assert rows(window)[0].startswith("harbour-notes.md · ")


def test_files_dropped_together_are_attached_in_their_order(make_window, qtbot, tmp_path):
    """Each file is read on a thread of its own; a long PDF dropped before a short note is
    still the first document (the order is the prompt's: a cold run of the same drop, and
    every chat with the same files, must get the same tokens). Until this was fixed, the
    note, read first, came first."""
    long_pdf = text_pdf(tmp_path / "long.pdf", [f"Page {i}. " + TALE for i in range(80)])
    short = tmp_path / "short.md"
    short.write_text("# Short\n\nOne line.\n", encoding="utf-8")
    window = make_window()
    cid = window.chat_page.new_conversation()
    drop(window, [long_pdf, short])
    qtbot.waitUntil(lambda: len(window.controller.storage.documents(cid)) == 2, timeout=REPLY_TIMEOUT_MS)
    assert [d.name for d in window.controller.storage.documents(cid)] == ["long.pdf", "short.md"]
