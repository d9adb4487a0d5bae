"""Speculative decoding in the app: Settings › New chats (and each chat's settings) hold the
switch and the draft length, the engine follows them, and the line under a reply says how many
tokens were drafted and accepted."""

from __future__ import annotations

import pytest

from app.storage import SamplingSettings
from app.ui.chat.params import infer_params
from tests.helpers.forced_drafts import ReplyOracle, always_draft
from tests.ui.helpers import chat_view, current_id, type_and_send, wait_idle
from tests.ui.screens import screenshot


@pytest.fixture(autouse=True)
def forced(monkeypatch: pytest.MonkeyPatch) -> None:
    always_draft(monkeypatch)  # the tiny model's replies would rarely pay for a draft


def test_the_reply_line_shows_drafted_and_accepted_tokens(make_window, qtbot, monkeypatch):
    oracle = ReplyOracle(monkeypatch)
    window = make_window()
    type_and_send(qtbot, window, "say it again and again and again")
    wait_idle(qtbot, window, current_id(window))
    first = window.controller.branch(current_id(window))[-1]
    assert first.role == "assistant" and first.stats is not None and first.stats.drafted_tokens > 0
    # The same message in a new chat, drafted by the first reply: accepted drafts must show.
    oracle.known = True
    cid = window.chat_page.new_conversation()
    type_and_send(qtbot, window, "say it again and again and again")
    wait_idle(qtbot, window, cid)
    reply = window.controller.branch(cid)[-1]
    assert reply.role == "assistant" and reply.stats is not None
    assert reply.content == first.content  # greedy: the drafts change no token
    stats = reply.stats
    assert 0 < stats.accepted_tokens <= stats.drafted_tokens
    line = chat_view(window).message_widgets()[-1].meta.text()
    assert f"drafted {stats.drafted_tokens:,}, accepted {stats.accepted_tokens:,}" in line
    screenshot(window, "chat-speculation-line")


def test_settings_switch_and_draft_length_reach_the_engine(make_window, qtbot):
    window = make_window()
    dialog = window.app_actions.open_settings()
    qtbot.waitExposed(dialog)
    dialog.tabs.setCurrentIndex(1)
    form = dialog.defaults_form
    assert form.speculative.isChecked() and form.draft_max.isEnabled()  # on by default
    form.draft_max.setValue(5)
    form.speculative.setChecked(False)
    assert not form.draft_max.isEnabled()
    screenshot(dialog, "settings-speculation")
    dialog.close()  # saves the pending edit
    cid = window.chat_page.new_conversation()
    sampling = window.controller.conversation(cid).sampling
    assert (sampling.speculative, sampling.draft_max) == (False, 5)
    assert {"speculative": False, "draft_max": 5}.items() <= dict(infer_params(sampling)).items()
    type_and_send(qtbot, window, "say it again and again and again")
    wait_idle(qtbot, window, cid)
    reply = window.controller.branch(cid)[-1]
    assert reply.stats is not None and reply.stats.drafted_tokens == 0
    assert "drafted" not in chat_view(window).message_widgets()[-1].meta.text()
    # The chat's own settings panel turns it back on, with the draft length it shows.
    panel = window.chat_page.settings_panel
    panel.form.speculative.setChecked(True)
    panel.form.draft_max.setValue(3)
    panel.flush()
    sampling = window.controller.conversation(cid).sampling
    assert (sampling.speculative, sampling.draft_max) == (True, 3)


def test_a_chat_picks_another_loaded_model_as_its_draft_model(make_window, qtbot, data_dir, tiny_model_path):
    from tests.ui.test_models_in_chat import click_library, library_model

    first = library_model(data_dir, tiny_model_path, "tiny-a")
    second = library_model(data_dir, tiny_model_path, "tiny-b")
    # Plain greedy (no grammar, no repetition penalty): the draft model's argmax is then what
    # the same weights choose, so nearly every draft is accepted.
    greedy = SamplingSettings(temperature=0.0, max_tokens=24, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0)
    window = make_window(model_path=first, model_id=None, work_areas=True, sampling=greedy)
    click_library(qtbot, window, second, "load")
    cid = window.chat_page.new_conversation()
    window.chat_page.pick_model("tiny-a")
    panel = window.chat_page.settings_panel
    picker = panel.form.draft_model
    items = [picker.itemText(i) for i in range(picker.count())]
    assert items == ["None — draft from the conversation", "tiny-b"]  # not the chat's own model
    window.chat_page.settings_button.setChecked(True)
    picker.setCurrentIndex(1)
    panel.flush()
    sampling = window.controller.conversation(cid).sampling
    assert sampling.draft_model == "tiny-b"
    assert dict(infer_params(sampling, ["tiny-a", "tiny-b"]))["draft_model"] == "tiny-b"
    assert "draft_model" not in dict(infer_params(sampling, ["tiny-a"]))  # not loaded: lookup
    panel.ensureWidgetVisible(picker)
    panel.horizontalScrollBar().setValue(0)
    screenshot(window, "chat-settings-draft-model")
    type_and_send(qtbot, window, "say it again and again and again")
    wait_idle(qtbot, window, cid)
    reply = window.controller.branch(cid)[-1]
    assert reply.role == "assistant" and reply.stats is not None, window.controller.failed.get(cid)
    assert reply.stats.drafted_tokens > 0
    target = window.engine.get_model("tiny-a")
    assert target.draft_id == "tiny-b" and target.snapshot().draft_model == "tiny-b"
    assert reply.stats.accepted_tokens >= 0.9 * reply.stats.drafted_tokens
