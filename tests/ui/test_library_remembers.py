"""Issue 50, item 2: nothing the user added to the Library is forgotten on restart, and a chat
whose model is not loaded offers to load it again — or, when its file is gone, says where it
was and offers to locate it."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QLabel, QPushButton

from tests.ui.helpers import (
    REPLY_TIMEOUT_MS,
    chat_view,
    current_id,
    select_conversation,
    type_and_send,
    wait_idle,
)
from tests.ui.screens import screenshot
from tests.ui.test_models_in_chat import manager_idle
from tests.ui.test_templateless_models import choose

LEFT = Qt.MouseButton.LeftButton


def listed(window) -> set[str]:
    return {row.entry.name for row in window.model_manager.catalog.rows()}


def card_button(qtbot, window, name: str) -> QPushButton:
    """The button ``name`` of the card under the chat's last message, once it is shown."""

    def shown() -> list[QPushButton]:
        return [b for b in chat_view(window).findChildren(QPushButton, name) if b.isVisible()]

    qtbot.waitUntil(lambda: len(shown()) == 1, timeout=10_000)
    return shown()[0]


def retry_once_loaded(qtbot, window, cid: str) -> None:
    """The model is loaded: "not loaded" goes, the card offers Retry; the reply comes."""
    qtbot.waitUntil(lambda: cid not in window.controller.failed, timeout=REPLY_TIMEOUT_MS)
    qtbot.mouseClick(card_button(qtbot, window, "retryButton"), LEFT)
    qtbot.waitUntil(lambda: window.controller.branch(cid)[-1].role == "assistant", timeout=REPLY_TIMEOUT_MS)
    wait_idle(qtbot, window, cid)


def failed_on_a_model_not_loaded(qtbot, window, cid: str) -> None:
    select_conversation(qtbot, window, cid)
    type_and_send(qtbot, window, "are you back?")
    qtbot.waitUntil(lambda: cid in window.controller.failed, timeout=10_000)
    assert "not loaded" in window.controller.failed[cid]


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_added_folders_and_files_stay_and_a_chat_reloads_or_locates_its_model(
    make_window, qtbot, data_dir, tiny_model_path, tmp_path, monkeypatch
):
    elsewhere, single, moved = tmp_path / "elsewhere", tmp_path / "single", tmp_path / "moved"
    for folder in (elsewhere, single, moved):
        folder.mkdir()
    shutil.copyfile(tiny_model_path, elsewhere / "tiny-b.gguf")
    shutil.copyfile(tiny_model_path, single / "tiny-c.gguf")
    window = make_window(work_areas=True)
    window.show_library()
    manager_idle(qtbot, window)
    page = window.model_manager.library_page

    # Models › Add folder… and Add file…, as a person picks them in the file dialogs.
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(elsewhere))
    qtbot.mouseClick(page.add_folder_button, LEFT)
    qtbot.waitUntil(lambda: "tiny-b" in listed(window), timeout=10_000)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(single / "tiny-c.gguf"), ""))
    qtbot.mouseClick(page.add_file_button, LEFT)
    qtbot.waitUntil(lambda: "tiny-c" in listed(window), timeout=10_000)
    assert page.selected_row() is not None and page.selected_row().entry.name == "tiny-c"
    assert page.select_path(elsewhere / "tiny-b.gguf")
    qtbot.mouseClick(page.load_button, LEFT)
    manager_idle(qtbot, window)
    assert "tiny-b" in window.models.ids()
    qtbot.mouseClick(window.nav_buttons["chat"], LEFT)
    window.chat_page.new_conversation()
    cid = current_id(window)
    window.chat_page.pick_model("tiny-b")
    type_and_send(qtbot, window, "a question for model b")
    wait_idle(qtbot, window, cid)
    window.close()

    # Quit, start: the Library still lists both; the chat on tiny-b offers to load it.
    window = make_window(work_areas=True)
    window.show_library()
    manager_idle(qtbot, window)
    assert {"tiny-b", "tiny-c"} <= listed(window)
    qtbot.mouseClick(window.nav_buttons["chat"], LEFT)
    failed_on_a_model_not_loaded(qtbot, window, cid)
    load = card_button(qtbot, window, "loadModelButton")
    assert load.text() == "Load tiny-b"
    screenshot(window, "chat-model-not-loaded-load-it")
    qtbot.mouseClick(load, LEFT)
    qtbot.waitUntil(lambda: "tiny-b" in window.models.ids(), timeout=REPLY_TIMEOUT_MS)
    retry_once_loaded(qtbot, window, cid)
    window.close()

    # Its file moves away: the chat says where it was, and Locate… finds it under a new name.
    shutil.move(elsewhere / "tiny-b.gguf", moved / "tiny-b-moved.gguf")
    window = make_window(work_areas=True)
    failed_on_a_model_not_loaded(qtbot, window, cid)
    locate = card_button(qtbot, window, "locateModelButton")
    (card_text,) = [w for w in chat_view(window).findChildren(QLabel, "errorCardText") if w.isVisible()]
    assert card_text.text().endswith(f"Its file was at {elsewhere / 'tiny-b.gguf'}, which is gone.")
    screenshot(window, "chat-model-file-gone-locate")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(moved / "tiny-b-moved.gguf"), ""))
    qtbot.mouseClick(locate, LEFT)
    qtbot.waitUntil(lambda: window.controller.model_of(cid) == "tiny-b-moved", timeout=REPLY_TIMEOUT_MS)
    assert "tiny-b-moved" in window.models.ids()
    retry_once_loaded(qtbot, window, cid)
    window.close()
    # The located file is in the Library from now on.
    window = make_window(work_areas=True)
    window.show_library()
    manager_idle(qtbot, window)
    assert "tiny-b-moved" in listed(window)


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_picking_a_chats_model_that_is_not_loaded_loads_it(
    make_window, qtbot, data_dir, tiny_model_path, tmp_path, monkeypatch
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copyfile(tiny_model_path, elsewhere / "tiny-b.gguf")
    window = make_window(work_areas=True)
    window.show_library()
    manager_idle(qtbot, window)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(elsewhere))
    qtbot.mouseClick(window.model_manager.library_page.add_folder_button, LEFT)
    qtbot.waitUntil(lambda: "tiny-b" in listed(window), timeout=10_000)
    window.model_manager.load_model(elsewhere / "tiny-b.gguf")
    manager_idle(qtbot, window)
    qtbot.mouseClick(window.nav_buttons["chat"], LEFT)
    window.chat_page.new_conversation()
    cid = current_id(window)
    window.chat_page.pick_model("tiny-b")
    window.close()

    window = make_window(work_areas=True)
    select_conversation(qtbot, window, cid)
    picker = window.chat_page.model_picker
    assert picker.currentText() == "tiny-b (not loaded)"
    tip = picker.itemData(picker.currentIndex(), Qt.ItemDataRole.ToolTipRole)
    assert tip == f"Pick it to load it from {elsewhere / 'tiny-b.gguf'}"
    choose(qtbot, picker, "tiny-b (not loaded)")
    qtbot.waitUntil(lambda: "tiny-b" in window.models.ids(), timeout=REPLY_TIMEOUT_MS)
    qtbot.waitUntil(lambda: picker.currentText() == "tiny-b", timeout=10_000)
    type_and_send(qtbot, window, "back on model b")
    wait_idle(qtbot, window, cid)
    assert window.controller.branch(cid)[-1].role == "assistant"
