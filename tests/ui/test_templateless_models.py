"""Issue 50, item 1: a model whose GGUF has no chat template chats in its own family's format.

The generated models (``tests.helpers.templateless``) have no ``tokenizer.chat_template``, the
Gemma or Llama-3 turn tokens in their vocabulary (or none of any format's), and answer their own
format's generation prompt with "Hello!" and their end-of-turn token. Fed another family's
format (ChatML, what Hearth used to send every template-less model), the Llama-3 one writes until
its token limit, as Gemma 3 270M did."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.chat_formats import NO_FORMAT
from app.storage import SamplingSettings
from app.ui.qt_models.model_library import COL_TEMPLATE
from tests.helpers.templateless import ensure_templateless
from tests.ui.helpers import REPLY_TIMEOUT_MS, current_id, type_and_send, wait_idle
from tests.ui.screens import screenshot
from tests.ui.test_models_in_chat import click_library, manager_idle

LEFT = Qt.MouseButton.LeftButton
# No grammar: the reply is whatever the model writes, its end-of-turn token included or not.
FREE = SamplingSettings(temperature=0.0, max_tokens=40)
FOREIGN_MARKERS = ("<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<|start_header_id|>",
                   "<|eot_id|>", "[INST]", "<|user|>", "<|end|>", "im_start", "im_end")


@pytest.fixture
def library_files(data_dir: Path) -> dict[str, Path]:
    folder = data_dir / "models"
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for family in ("gemma", "llama3", "plain"):
        out[family] = folder / f"tiny-{family}-no-template.gguf"
        shutil.copyfile(ensure_templateless(family), out[family])
    return out


def cell(window, path: Path, role=Qt.ItemDataRole.DisplayRole) -> str:
    model = window.model_manager.library_page.table_model
    return str(model.index(model.row_of(str(path)), COL_TEMPLATE).data(role))


def paste(qtbot, edit, text: str) -> None:
    """Replace ``edit``'s text with ``text`` through the clipboard: select all, Ctrl+V."""
    QApplication.clipboard().setText(text)
    edit.setFocus()
    qtbot.keyClick(edit, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(edit, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert edit.toPlainText() == text


def choose(qtbot, combo, text: str) -> None:
    """Click the combo box open and click ``text`` in its list."""
    qtbot.mouseClick(combo, LEFT)
    view = combo.view()
    qtbot.waitUntil(view.isVisible, timeout=5_000)
    row = combo.findText(text)
    assert row >= 0, [combo.itemText(i) for i in range(combo.count())]
    rect = view.visualRect(view.model().index(row, 0))
    qtbot.wait(QApplication.doubleClickInterval() + 50)  # a popup ignores a release right after it opens
    qtbot.mouseMove(view.viewport(), rect.center())
    qtbot.mouseClick(view.viewport(), LEFT, pos=rect.center())
    qtbot.waitUntil(lambda: not view.isVisible(), timeout=5_000)
    assert combo.currentText() == text


def ask(qtbot, window, model_id: str, text: str) -> str:
    """A new chat on ``model_id`` (picked in the chat header), ``text`` typed and sent."""
    window.chat_page.new_conversation()
    cid = current_id(window)
    picker = window.chat_page.model_picker
    picker.setCurrentIndex(picker.findData(model_id))
    picker.activated.emit(picker.currentIndex())  # what a pick in the list emits
    assert window.controller.model_of(cid) == model_id
    type_and_send(qtbot, window, text)
    return cid


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_models_without_a_template_reply_in_their_own_format_and_stop(make_window, qtbot, library_files):
    gemma, llama3, plain = library_files["gemma"], library_files["llama3"], library_files["plain"]
    window = make_window(model_path=gemma, model_id=None, work_areas=True, sampling=FREE)
    window.show_library()
    manager_idle(qtbot, window)
    # The Library says which format each file gets, and why.
    assert cell(window, gemma) == "Gemma (no template)"
    assert cell(window, llama3) == "Llama 3 (no template)"
    assert cell(window, plain) == "None: choose one"
    assert "architecture (gemma3) and vocabulary" in cell(window, gemma, Qt.ItemDataRole.ToolTipRole)
    page = window.model_manager.library_page
    assert page.select_path(gemma)
    assert page.chat_format.currentText() == "Automatic: Gemma"
    screenshot(window, "models-library-chat-format")
    qtbot.mouseClick(window.nav_buttons["chat"], LEFT)

    # Gemma: "<start_of_turn>user … <start_of_turn>model", the reply ends at <end_of_turn>.
    cid = ask(qtbot, window, "tiny-gemma-no-template", "Hi there")
    wait_idle(qtbot, window, cid)
    reply = window.controller.branch(cid)[-1]
    assert reply.role == "assistant" and reply.content == "Hello!"
    assert reply.stats is not None and reply.stats.finish_reason == "stop"
    model = window.engine.get_model("tiny-gemma-no-template")
    sent = model.backend.detokenize(model.apply_chat_template({"messages": [{"role": "user", "content": "Hi there"}]}))
    assert sent == "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n"

    # Llama 3, loaded from the Library: a ChatML prompt would never end; its own format does.
    click_library(qtbot, window, llama3, "load")
    cid = ask(qtbot, window, "tiny-llama3-no-template", "Hi there")
    wait_idle(qtbot, window, cid)
    reply = window.controller.branch(cid)[-1]
    assert reply.content == "Hello!" and reply.stats is not None and reply.stats.finish_reason == "stop"
    assert not any(marker in reply.content for marker in FOREIGN_MARKERS)
    screenshot(window, "chat-templateless-llama3")

    # A vocabulary of no known format: refused with words, the message kept, nothing sent.
    click_library(qtbot, window, plain, "load")
    cid = ask(qtbot, window, "tiny-plain-no-template", "Hi there")
    qtbot.waitUntil(lambda: cid in window.controller.failed, timeout=REPLY_TIMEOUT_MS)
    assert NO_FORMAT in window.controller.failed[cid]
    assert window.controller.branch(cid)[-1].content == "Hi there"
    screenshot(window, "chat-templateless-refused")

    # As the words say: a format is chosen in the Library, the model loaded again, and Retry.
    window.show_library()
    manager_idle(qtbot, window)
    page = window.model_manager.library_page
    assert page.select_path(plain)
    choose(qtbot, page.chat_format, "Llama 3")  # while it is loaded: the box is open to a choice
    assert page.chat_format_note.text() == "It applies from the model's next load: Unload, then Load."
    assert cell(window, plain) == "Llama 3 (your choice)"


# The offscreen platform cannot raise a popup or grab the keyboard for it; the list works.
@pytest.mark.qt_log_ignore("This plugin does not support")
def test_a_format_chosen_or_pasted_in_the_library(make_window, qtbot, library_files, data_dir):
    plain = library_files["plain"]
    window = make_window(model_path=library_files["gemma"], model_id=None, work_areas=True, sampling=FREE)
    window.show_library()
    manager_idle(qtbot, window)
    page = window.model_manager.library_page
    assert page.select_path(plain)
    assert page.chat_format_note.isVisible() and "cannot chat" in page.chat_format_note.text()
    assert page.chat_format_note.toolTip() == NO_FORMAT

    # Paste a template: a broken one is not kept, and says why.
    combo = page.chat_format
    choose(qtbot, combo, "Paste a template…")
    dialog = page.template_dialog
    assert dialog is not None and dialog.isVisible()
    paste(qtbot, dialog.edit, "{% for m in messages %}{{ m['content'] }")
    qtbot.mouseClick(dialog.use_button, LEFT)
    assert dialog.note.text().startswith("Not used: chat template failed")
    # One that drops the messages' words is not kept either.
    paste(qtbot, dialog.edit, "Hello")
    qtbot.mouseClick(dialog.use_button, LEFT)
    assert dialog.note.text().startswith("Not used: a sample chat rendered without")
    screenshot(dialog, "models-library-template-refused")
    assert cell(window, plain) == "None: choose one"

    # A working one is checked in the sandbox and used from the model's next load.
    paste(qtbot, dialog.edit,
          "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant{{ '\\n' }}")
    qtbot.mouseClick(dialog.use_button, LEFT)
    assert not dialog.isVisible() and page.template_dialog is None
    assert cell(window, plain) == "Your template"
    assert combo.currentText() == "Your template (edit…)"  # picked again, it opens the template
    screenshot(window, "models-library-pasted-template")
    click_library(qtbot, window, plain, "load")
    model = window.engine.get_model("tiny-plain-no-template")
    assert model.backend.info.extra["chat_format"] == "custom"
    cid = ask(qtbot, window, "tiny-plain-no-template", "Hi there")
    wait_idle(qtbot, window, cid)
    reply = window.controller.branch(cid)[-1]
    assert reply.content == "Hello!" and reply.stats is not None and reply.stats.finish_reason == "stop"

    # A built-in format chosen for the Gemma file wins over the automatic choice.
    window.show_library()
    assert page.select_path(library_files["llama3"])
    choose(qtbot, combo, "ChatML")
    assert cell(window, library_files["llama3"]) == "ChatML (your choice)"
    window.close()
    # Remembered across a restart.
    again = make_window(data_dir, model_path=library_files["gemma"], model_id=None, work_areas=True, sampling=FREE)
    again.show_library()
    manager_idle(qtbot, again)
    assert cell(again, library_files["llama3"]) == "ChatML (your choice)"
    assert cell(again, plain) == "Your template"
