"""The whole window: restart with the same data dir, GUI-thread stalls, Qt models, screenshots."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.storage import SamplingSettings
from app.ui.qt_models.conversation_list import ConversationListModel
from app.ui.state.conversation_catalog import ConversationCatalog, ConversationEntry
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import chat_view, current_id, type_and_send, wait_idle


def test_restart_restores_conversations_layout_and_resumes_from_disk_cache(
    make_window, qtbot, data_dir
):
    window = make_window()
    type_and_send(qtbot, window, "remember the word lantern")
    first = current_id(window)
    wait_idle(qtbot, window, first)
    type_and_send(qtbot, window, "and the word harbour")
    wait_idle(qtbot, window, first)
    qtbot.mouseClick(window.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)
    type_and_send(qtbot, window, "a second chat")
    second = current_id(window)
    wait_idle(qtbot, window, second)
    # Leave the first conversation open, with a non-default layout.
    window.chat_page.open_conversation(first)
    window.resize(777, 555)  # fits the offscreen screen (800x600), so no clamping
    window.chat_page.splitter.setSizes([233, 472, 0])
    sizes = window.chat_page.splitter.sizes()
    before = [(m.role, m.content) for m in window.controller.branch(first)]
    window.close()

    again = make_window(data_dir, size=None)
    assert (again.size().width(), again.size().height()) == (777, 555)
    assert again.chat_page.splitter.sizes()[0] == sizes[0]
    assert again.chat_page.current_id == first  # the last conversation is reopened
    assert {e.id for e in again.controller.catalog.entries()} == {first, second}
    assert [(m.role, m.content) for m in again.controller.branch(first)] == before
    assert "lantern" in chat_view(again).transcript()

    type_and_send(qtbot, again, "which words did I say?")
    wait_idle(qtbot, again, first)
    stats = again.controller.branch(first)[-1].stats
    assert stats is not None
    # The engine restored the conversation's KV from the on-disk cache instead of prefilling
    # the whole history again.
    assert stats.cache_hit_kind in ("partial", "exact"), stats
    assert stats.cache_read > 0
    assert stats.cache_read >= stats.prompt_tokens - 32
    meta = chat_view(again).message_widgets()[-1].meta
    assert f"restored {stats.cache_read:,} of {stats.prompt_tokens:,} prompt tokens" in meta.text()


def test_switching_between_four_streaming_conversations(make_window, qtbot):
    """Four conversations stream while the user hops between them; each gets its reply.

    NOTE: how long the GUI thread stalls meanwhile is B6, measured by ``hearth bench``; a
    test asserting it (once ``<= 50 ms``) failed on another 2-core machine (64 ms), and tests
    must pass on any x86-64 machine (issue 15, item 13).
    """
    window = make_window(
        sampling=SamplingSettings(temperature=0.0, max_tokens=96, grammar=ASCII_GRAMMAR)
    )
    page = window.chat_page
    ids = []
    for i in range(4):
        page.new_conversation()
        type_and_send(qtbot, window, f"conversation number {i}, tell me something long")
        ids.append(current_id(window))
    assert all(window.controller.is_busy(c) for c in ids)
    # Switch between the streaming conversations while they run, as a person would.
    deadline = time.monotonic() + 240  # a hang guard inside pytest's 600 s, not a timing check
    turn = 0
    while any(window.controller.is_busy(c) for c in ids) and time.monotonic() < deadline:
        page.open_conversation(ids[turn % 4])
        turn += 1
        qtbot.wait(150)
    assert not any(window.controller.is_busy(c) for c in ids)
    assert all(window.controller.branch(c)[-1].role == "assistant" for c in ids)
    assert all(window.controller.branch(c)[-1].content for c in ids)


def test_conversation_list_model_passes_qtmodeltester(qtmodeltester):
    catalog = ConversationCatalog()
    renamed: list[tuple[str, str]] = []
    model = ConversationListModel(catalog, rename=lambda cid, title: renamed.append((cid, title)))
    catalog.reset([ConversationEntry(f"id{i}", f"chat {i}", 100.0 - i) for i in range(5)])
    qtmodeltester.check(model)
    catalog.set_busy("id2", True)
    catalog.upsert(ConversationEntry("id3", "chat 3 again", 200.0))  # moves to the top
    catalog.upsert(ConversationEntry("new", "new chat", 150.0))
    catalog.remove("id0")
    qtmodeltester.check(model)
    assert [catalog.entry(r).id for r in range(len(catalog))] == ["id3", "new", "id1", "id2", "id4"]
    assert model.data(model.index(3, 0), Qt.ItemDataRole.UserRole + 2) is True
    assert model.setData(model.index(0, 0), "Renamed")
    assert renamed == [("id3", "Renamed")]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots_of_the_main_window(make_window, qtbot, tmp_path, scheme, smollm2_or_tiny):
    """Writes ``chat-<scheme>.png`` into ``HEARTH_SCREENSHOT_DIR`` (or a temp dir)."""
    out = Path(os.environ.get("HEARTH_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    path, model_id, sampling = smollm2_or_tiny
    window = make_window(model_path=path, model_id=model_id, sampling=sampling)
    window.apply_scheme(scheme)
    window.resize(1280, 800)
    page = window.chat_page
    page.new_conversation()
    page.controller.rename(current_id(window), "Reverse a string in Python")
    type_and_send(qtbot, window, "How do I reverse a string in Python? Show a short example.")
    wait_idle(qtbot, window)
    qtbot.wait(50)
    image = window.grab()
    target = out / f"chat-{scheme}.png"
    assert image.save(str(target))
    assert target.stat().st_size > 10_000
