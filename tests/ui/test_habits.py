"""Habits people bring from other chat apps (issue #14 item 5), on the real window: Esc stops
a reply, Ctrl+Enter sends an edit, Ctrl+N / Ctrl+K, the shortcuts list under Help, the theme
switch, new-chat defaults and presets — the last three kept across a restart."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication

from app.storage import SamplingSettings
from app.ui.shortcuts import SHORTCUTS, key_text
from app.ui.theme import colors
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import chat_view, current_id, message_input, type_and_send, wait_idle
from tests.ui.screens import screenshot

LONG = SamplingSettings(temperature=0.0, max_tokens=400, grammar=ASCII_GRAMMAR)


def activate(qtbot, window) -> None:
    """Window shortcuts need the window to be the active one, as it is for a person."""
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=5_000)


def test_esc_stops_the_reply_being_written(make_window, qtbot):
    window = make_window(sampling=LONG)
    activate(qtbot, window)
    stop = window.app_actions.actions["stop"]
    assert not stop.isEnabled()  # nothing streams: Esc keeps its usual meaning
    type_and_send(qtbot, window, "tell me a long story")
    cid = current_id(window)
    controller = window.controller
    assert stop.isEnabled()
    qtbot.waitUntil(lambda: (controller.live_reply(cid) is None)
                    or controller.live_reply(cid).num_tokens > 2, timeout=60_000)
    qtbot.keyClick(message_input(window), Qt.Key.Key_Escape)
    wait_idle(qtbot, window, cid)
    reply = controller.branch(cid)[-1]
    assert reply.role == "assistant" and reply.stats is not None
    assert reply.stats.finish_reason == "cancelled"
    assert reply.stats.completion_tokens < 400
    assert "stopped" in chat_view(window).message_widgets()[-1].meta.text()
    assert not stop.isEnabled()


def test_ctrl_enter_sends_an_edit_and_esc_cancels_one(make_window, qtbot):
    window = make_window()
    activate(qtbot, window)
    type_and_send(qtbot, window, "first words")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    user = chat_view(window).message_widgets()[0]
    user.begin_edit()
    assert user.editor is not None
    qtbot.keyClick(user.editor, Qt.Key.Key_Escape)
    assert user.editor is None  # cancelled, nothing sent
    assert len(window.controller.branch(cid)) == 2

    user.begin_edit()
    editor = user.editor
    editor.selectAll()
    qtbot.keyClicks(editor, "second words")
    qtbot.keyClick(editor, Qt.Key.Key_Return)  # plain Enter: a new line in the edit box
    assert user.editor is editor
    qtbot.keyClick(editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.controller.is_busy(cid), timeout=5_000)
    wait_idle(qtbot, window, cid)
    branch = window.controller.branch(cid)
    assert branch[0].content == "second words"
    assert window.controller.siblings(branch[0].id) == (2, 2)


def test_ctrl_n_starts_a_chat_and_ctrl_k_searches(make_window, qtbot):
    window = make_window()
    activate(qtbot, window)
    before = len(window.controller.catalog)
    window.nav_buttons["models"].click()
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert window.stack.currentWidget() is window.chat_page
    assert len(window.controller.catalog) == before + 1
    assert window.chat_page.current_id == window.controller.catalog.entry(0).id
    search = window.chat_page.sidebar.search
    search.setText("old query")
    message_input(window).setFocus()
    qtbot.keyClick(window, Qt.Key.Key_K, Qt.KeyboardModifier.ControlModifier)
    assert search.hasFocus() and search.selectedText() == "old query"


def test_the_shortcuts_list_under_help_shows_every_shortcut(make_window, qtbot):
    window = make_window()
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    entry = next(a for a in help_menu.actions() if a.text() == "Keyboard shortcuts")
    assert entry.shortcut().toString() == "Ctrl+/"
    entry.trigger()
    dialog = window.app_actions.shortcuts_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.rows == [(key_text(s.keys), s.label) for s in SHORTCUTS]
    # Every window-level row is bound to an action with exactly that key.
    for s in SHORTCUTS:
        if not s.in_text:
            assert window.app_actions.actions[s.name].shortcut().toString() == s.keys, s.name
    screenshot(dialog, "help-shortcuts")


def test_theme_defaults_and_presets_persist_across_a_restart(make_window, qtbot, data_dir):
    window = make_window()
    actions = window.app_actions
    dialog = actions.open_settings()
    qtbot.waitExposed(dialog)
    dark = dialog.theme_buttons["dark"]
    qtbot.mouseClick(dark, Qt.MouseButton.LeftButton, pos=QPoint(8, dark.height() // 2))
    assert colors().name == "dark"
    assert actions.actions["theme_dark"].isChecked()
    # New chats: a system prompt and sampling of our own.
    dialog.tabs.setCurrentIndex(1)
    form = dialog.defaults_form
    form.system_prompt.setPlainText("Answer like a pirate.")
    form.temperature.setValue(0.0)
    form.max_tokens.setValue(16)
    form.grammar.setPlainText(ASCII_GRAMMAR)
    screenshot(dialog, "settings-new-chats")
    dialog.close()  # saves the pending edit
    fresh = window.chat_page.new_conversation()
    conv = window.controller.conversation(fresh)
    assert conv.system_prompt == "Answer like a pirate."
    assert (conv.sampling.temperature, conv.sampling.max_tokens) == (0.0, 16)
    # A preset saved from a chat's settings panel.
    panel = window.chat_page.settings_panel
    panel.temperature.setValue(0.0)
    panel.system_prompt.setPlainText("Review this code.")
    assert panel.save_as_preset("Code review") is not None
    assert panel.preset_picker.currentText() == "Code review"
    window.close()

    again = make_window(data_dir, sampling=None)
    assert colors().name == "dark"
    assert again.app_actions.actions["theme_dark"].isChecked()
    cid = again.chat_page.new_conversation()
    conv = again.controller.conversation(cid)
    assert conv.system_prompt == "Answer like a pirate."
    assert conv.sampling.max_tokens == 16
    panel = again.chat_page.settings_panel
    picker = panel.preset_picker
    assert [picker.itemText(i) for i in range(picker.count())] == ["Custom", "Code review"]
    assert picker.currentText() == "Custom"
    picker.setCurrentIndex(1)
    picker.activated.emit(1)
    conv = again.controller.conversation(cid)
    assert conv.system_prompt == "Review this code." and conv.sampling.temperature == 0.0
    qtbot.mouseClick(again.chat_page.settings_button, Qt.MouseButton.LeftButton)
    again.resize(1280, 800)
    screenshot(again, "chat-presets-dark")
    # Light again, through the View menu, and back to the built-in new-chat settings.
    again.app_actions.actions["theme_light"].trigger()
    assert colors().name == "light"
    assert again.app_actions.prefs.theme() == "light"
    dialog = again.app_actions.open_settings()
    dialog.reset_defaults()
    conv = again.controller.conversation(again.chat_page.new_conversation())
    assert conv.system_prompt != "Answer like a pirate."
    dialog.delete_preset("Code review")
    assert [picker.itemText(i) for i in range(picker.count())] == ["Custom"]
    dialog.close()

