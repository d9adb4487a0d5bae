"""Previews read as words, never as template markup (issue #13 item 6): the common chat
template families, and a real row of the tiny model (SmolLM2's ChatML template) in the
dashboard's table, tree and detail pane."""

from __future__ import annotations

from typing import Any

import pytest

from app.template_text import readable, transcript, turns
from app.ui.cache.dashboard import TAB_TREE
from app.ui.cache.rows_panel import describe
from app.ui.qt_models.cache_rows import COL_PREVIEW

FAMILIES = {
    "chatml": "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
    "<|im_start|>assistant\nHello!<|im_end|>\n",
    "llama3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe kind."
    "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>",
    "gemma": "<bos><start_of_turn>user\nBe kind.\n\nHi there<end_of_turn>\n"
    "<start_of_turn>model\nHello!<end_of_turn>\n",
    "llama2": "<s>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi there [/INST] Hello! </s>",
    "phi3": "<|system|>\nBe kind.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\nHello!<|end|>",
    "deepseek": "<｜begin▁of▁sentence｜>Be kind.<｜User｜>Hi there<｜Assistant｜>Hello!"
    "<｜end▁of▁sentence｜>",
    "granite": "<|start_of_role|>system<|end_of_role|>Be kind.<|end_of_text|>\n"
    "<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n"
    "<|start_of_role|>assistant<|end_of_role|>Hello!<|end_of_text|>",
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_template_family_reads_as_who_said_what(family):
    text = FAMILIES[family]
    line = readable(text)
    assert "<" not in line and "|" not in line and "[INST]" not in line, line
    assert "User: " in line and "Assistant: Hello!" in line
    assert line.index("Hi there") < line.index("Hello!")
    roles = [role for role, _words in turns(text)]
    assert roles[-2:] == ["User", "Assistant"]
    paragraphs = transcript(text).split("\n\n")
    assert paragraphs[-1] == "Assistant:\nHello!"


def test_plain_text_is_left_alone():
    assert readable("just   words\nand more") == "just words and more"
    assert turns("") == []


def test_a_real_rows_previews_have_no_markup(tiny: Any, engine: Any, make_dashboard: Any, qtbot: Any):
    dash = make_dashboard(engine)
    system = "You answer questions about bread clearly and briefly. " * 12
    tokens = tiny.apply_chat_template(
        {"messages": [{"role": "user", "content": "Why does dough rise?"}], "system": system}
    )
    stats = tiny.infer(tokens, session_id="conv-1", response_tokens=3).result(timeout=120)
    state = dash.state
    qtbot.waitUntil(lambda: state.position(stats.finish_key) is not None, timeout=5_000)
    row = state.position(stats.finish_key)
    shown = dash.rows_panel.proxy.mapFromSource(dash.rows_model.index(row, COL_PREVIEW))
    preview = shown.data()
    assert "User: Why does dough rise?" in preview and "<|" not in preview
    detail = describe(state.row(row), dash.previews)
    assert "User:\nWhy does dough rise?" in detail and "<|" not in detail
    assert "System:\nYou answer questions" in detail
    dash.select_tab(TAB_TREE)
    model = dash.tree_panel.model
    qtbot.waitUntil(lambda: model.rowCount() == 1, timeout=5_000)  # the cold save, then its turn
    for index in (model.index(0, 0), model.index(0, 0, model.index(0, 0))):
        assert index.isValid() and "<|" not in index.data()
    assert model.index(0, 0).data().startswith("System: You answer questions")
