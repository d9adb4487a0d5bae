"""A conversation that outgrows a 512-token context, under each overflow policy, on the real
engine and the tiny model: it keeps answering (or says why not), the chat shows where older
messages leave the model's view, and the reply equals a fresh chat's that holds exactly the
turns the model kept."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QLabel

from app.conversation.window import OverflowPolicy, WindowState
from app.storage import SamplingSettings
from tests.ui.conftest import ASCII_GRAMMAR, TEST_SAMPLING
from tests.ui.helpers import (
    REPLY_TIMEOUT_MS,
    chat_view,
    current_id,
    message_input,
    type_and_send,
    wait_idle,
)
from tests.ui.screens import screenshot

LEFT = Qt.MouseButton.LeftButton
SMALL = {"n_ctx": 512, "n_seq_max": 4, "n_batch": 256}
TOPICS = ("lanterns", "harbours", "gulls", "nets", "tides", "boats", "ropes", "maps", "oars",
          "sails", "storms", "anchors", "islands", "lighthouses")


def message(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return (f"Note {i}: please keep in mind that the {topic} of the northern coast were "
            f"counted twice this year, once in spring and once in late autumn, by two teams.")


def push_until_cut(
    qtbot, window, cid: str, *, turns: int = 14, warned: bool = True
) -> tuple[int, WindowState]:
    """Send notes until the model's view of the chat moves; return that turn and the view.

    ``warned``: the meter must have turned amber on an earlier turn (with the tiny model's
    short replies a turn is small enough for that; SmolLM2's longer turns can step from
    "ok" straight past the limit)."""
    controller = window.controller
    levels = []
    for i in range(turns):
        before = controller.window(cid)
        type_and_send(qtbot, window, message(i))
        wait_idle(qtbot, window, cid)
        assert controller.branch(cid)[-1].role == "assistant", controller.failed.get(cid)
        levels.append(window.chat_page.composer.meter.level)
        after = controller.window(cid)
        if after != before:
            if warned:
                assert "near" in levels, levels  # the meter warned before the view moved
            return i, after
    raise AssertionError(f"the view never moved in {turns} turns")


def chat_under(make_window, policy: OverflowPolicy):
    """A window on the tiny model with a 512-token context, and a new chat under ``policy``."""
    window = make_window(model_options=dict(SMALL))
    window.chat_page.new_conversation()
    cid = current_id(window)
    window.chat_page.settings_panel.overflow.choose(policy)
    return window, cid


def show_divider(qtbot, page) -> None:
    """Scroll so the divider is in view for the screenshot (a late layout pass may still move
    the page, so scroll again until it is there)."""

    def shown() -> bool:
        page.verticalScrollBar().setValue(max(0, page.divider.y() - 160))
        y = page.divider.mapTo(page.viewport(), QPoint(0, 0)).y()
        return 0 <= y < page.viewport().height() - page.divider.height()

    qtbot.waitUntil(shown, timeout=5_000)
    qtbot.wait(100)
    qtbot.waitUntil(shown, timeout=5_000)


def fresh_chat_reply(qtbot, window, cid: str, window_state: WindowState, cut_turn_user_id: str) -> str:
    """A new chat holding exactly the turns the model kept (and the summary), answered anew."""
    storage, controller = window.storage, window.controller
    conv = controller.conversation(cid)
    branch = controller.branch(cid)
    start = next(i for i, m in enumerate(branch) if m.id == window_state.start_id)
    end = next(i for i, m in enumerate(branch) if m.id == cut_turn_user_id)
    fresh = storage.create_conversation(
        "fresh", system_prompt=conv.system_prompt, model_id=conv.model_id, sampling=conv.sampling
    )
    parent = None
    ids = []
    for m in branch[start : end + 1]:
        parent = storage.add_message(fresh.id, parent, m.role, m.content).id
        ids.append(parent)
    if window_state.summary:
        controller.replies.state.save_window(fresh.id, WindowState(ids[0], window_state.summary))
    controller.refresh()
    window.chat_page.open_conversation(fresh.id)
    assert controller.regenerate(fresh.id, parent)
    wait_idle(qtbot, window, fresh.id)
    reply = controller.branch(fresh.id)[-1]
    assert reply.role == "assistant"
    return reply.content


def reply_to(window, cid: str, user_id: str) -> str:
    branch = window.controller.branch(cid)
    i = next(i for i, m in enumerate(branch) if m.id == user_id)
    return branch[i + 1].content


def user_of_turn(window, cid: str, turn: int) -> str:
    users = [m for m in window.controller.branch(cid) if m.role == "user"]
    return users[turn].id


def test_drop_oldest_keeps_answering_with_a_divider_and_a_fresh_chats_reply(make_window, qtbot):
    window = make_window(model_options=dict(SMALL))
    window.chat_page.new_conversation()
    cid = current_id(window)
    assert window.controller.policy(cid) is OverflowPolicy.DROP_OLDEST  # the default
    turn, view = push_until_cut(qtbot, window, cid)
    assert view.start_id is not None and view.summary == ""
    page = chat_view(window).page()
    assert page.divider is not None
    qtbot.waitUntil(page.divider.isVisible, timeout=5_000)  # laid out and shown
    assert "no longer sees" in page.divider.findChild(QLabel, "dividerText").text()
    # The divider sits right above the first message the model still sees.
    widgets = page.message_widgets()
    first_seen = next(w for w in widgets if w.message_id == view.start_id)
    assert page.divider.y() < first_seen.y()
    assert all(w.y() < page.divider.y() for w in widgets if w.message_id != view.start_id
               and widgets.index(w) < widgets.index(first_seen))
    cut_user = user_of_turn(window, cid, turn)
    stats = window.controller.branch(cid)[-1].stats
    use = window.controller.context_use(cid)
    assert use is not None and use.n_ctx == 512 and stats.prompt_tokens <= use.limit * 0.6 + 1
    meter = window.chat_page.composer.meter
    assert meter.text().endswith("/ 512 tokens")
    qtbot.waitUntil(lambda: page.divider.y() > 0, timeout=5_000)
    show_divider(qtbot, page)
    screenshot(window, "chat-overflow-divider")

    # Two more turns: the view stays where it is (each turn extends what the engine holds).
    for i in (turn + 1, turn + 2):
        type_and_send(qtbot, window, message(i))
        wait_idle(qtbot, window, cid)
        assert window.controller.window(cid) == view
        assert window.controller.branch(cid)[-1].stats.cache_hit_kind in ("sticky", "continuation")

    expected = reply_to(window, cid, cut_user)
    assert fresh_chat_reply(qtbot, window, cid, view, cut_user) == expected


# The tiny model's random words are no summary (the app checks: tests/ui/test_summary_check.py);
# under this grammar its summary speaks of the notes: "In this conversation, the user counted
# the northern coast twice with teams." (the app writes the first words).
SUMMARY_LIKE = SamplingSettings(
    temperature=0.0, max_tokens=24, grammar='root ::= " counted the northern coast twice with teams."'
)


def test_summarise_replaces_the_oldest_turns_with_the_models_summary(make_window, qtbot):
    window = make_window(model_options=dict(SMALL), sampling=SUMMARY_LIKE)
    window.chat_page.new_conversation()
    cid = current_id(window)
    window.chat_page.settings_panel.overflow.choose(OverflowPolicy.SUMMARISE)
    assert window.controller.policy(cid) is OverflowPolicy.SUMMARISE
    turn, view = push_until_cut(qtbot, window, cid)
    assert view.summary == "In this conversation, the user counted the northern coast twice with teams."
    assert view.start_id is not None and view.no_summary == ""
    page = chat_view(window).page()
    assert page.divider is not None
    assert view.summary in page.divider.findChild(QLabel, "dividerSummary").text()
    screenshot(window, "chat-overflow-summary")
    type_and_send(qtbot, window, message(turn + 1))
    wait_idle(qtbot, window, cid)
    assert window.controller.window(cid) == view  # it fits: no new summary

    cut_user = user_of_turn(window, cid, turn)
    expected = reply_to(window, cid, cut_user)
    assert fresh_chat_reply(qtbot, window, cid, view, cut_user) == expected


def test_stop_at_the_limit_says_so_and_another_policy_unblocks_it(make_window, qtbot):
    window, cid = chat_under(make_window, OverflowPolicy.STOP)
    controller = window.controller
    for i in range(14):
        type_and_send(qtbot, window, message(i))
        wait_idle(qtbot, window, cid)
        if cid in controller.failed:
            break
    assert "reached the model's context" in controller.failed[cid]
    branch = controller.branch(cid)
    assert branch[-1].role == "user" and branch[-1].content == message(i)  # nothing lost
    assert controller.window(cid) == WindowState()
    screenshot(window, "chat-overflow-stop")

    window.chat_page.settings_panel.overflow.choose(OverflowPolicy.DROP_OLDEST)
    assert controller.retry(cid)
    wait_idle(qtbot, window, cid)
    assert controller.branch(cid)[-1].role == "assistant"
    assert controller.window(cid).start_id is not None
    assert chat_view(window).page().divider is not None


def test_continue_a_reply_cut_by_the_context_end(make_window, qtbot):
    # NOTE: a 256-token context, so the reply reaches its end after ~70 tokens (the tiny model
    # under its grammar decodes slowly on a busy CPU).
    short = SamplingSettings(temperature=0.0, max_tokens=8, grammar=ASCII_GRAMMAR)
    window = make_window(model_options={**SMALL, "n_ctx": 256}, sampling=short)
    controller = window.controller
    type_and_send(qtbot, window, message(0) + " " + message(1) + " " + message(2))
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    endless = SamplingSettings(temperature=0.0, max_tokens=4000, grammar=ASCII_GRAMMAR)
    controller.update_settings(cid, sampling=endless)
    type_and_send(qtbot, window, "Now write as much as you can about the sea.")
    wait_idle(qtbot, window, cid)
    cut = controller.branch(cid)[-1]
    assert cut.role == "assistant", controller.failed.get(cid)
    assert cut.stats.context_full and cut.stats.finish_reason == "length"
    assert cut.stats.prompt_tokens + cut.stats.completion_tokens >= 255
    widget = chat_view(window).message_widgets()[-1]
    assert "cut: the context is full" in widget.meta.text()
    assert widget.continue_button is not None
    qtbot.waitUntil(widget.continue_button.isVisible, timeout=5_000)  # laid out and shown
    screenshot(window, "chat-reply-cut")

    qtbot.mouseClick(widget.continue_button, LEFT)
    qtbot.waitUntil(lambda: controller.is_busy(cid), timeout=10_000)
    live = controller.live_reply(cid)
    assert live is not None and live.text == cut.content  # it goes on from the cut text
    qtbot.waitUntil(lambda: live.num_tokens >= 5, timeout=REPLY_TIMEOUT_MS)
    controller.stop(cid)  # enough to see it continue
    wait_idle(qtbot, window, cid)
    continued = controller.branch(cid)[-1]
    assert continued.id != cut.id and continued.parent_id == cut.parent_id
    assert continued.content.startswith(cut.content) and len(continued.content) > len(cut.content)
    assert continued.stats.completion_tokens >= 5
    # The policy made room: the first exchange left the model's view.
    view = controller.window(cid)
    assert view.start_id == cut.parent_id
    assert chat_view(window).page().divider is not None
    # The cut version stays reachable beside the continued one.
    assert controller.siblings(continued.id) == (2, 2)


def test_a_message_longer_than_the_context_is_refused_clearly(make_window, qtbot):
    window = make_window(model_options=dict(SMALL), sampling=TEST_SAMPLING)
    text = " ".join(message(i) for i in range(30))  # ~1,000 tokens
    box = message_input(window)
    box.setPlainText(text)  # a paste
    qtbot.keyClick(box, Qt.Key.Key_Return)
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    assert "too long for this model" in window.controller.failed[cid]
    assert window.controller.branch(cid)[-1].content == text
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=REPLY_TIMEOUT_MS)


@pytest.mark.smollm2
def test_a_long_chat_on_smollm2_is_summarised_in_words(make_window, qtbot, smollm2_path):
    """The summary is the model's own prose (the README's screenshot)."""
    sampling = SamplingSettings(temperature=0.0, max_tokens=40, repetition_penalty=1.1)
    window = make_window(
        model_path=smollm2_path, model_id="SmolLM2", model_options=dict(SMALL), sampling=sampling
    )
    window.chat_page.new_conversation()
    cid = current_id(window)
    window.chat_page.settings_panel.overflow.choose(OverflowPolicy.SUMMARISE)
    turn, view = push_until_cut(qtbot, window, cid, warned=False)
    assert view.summary and any(c.isalpha() for c in view.summary)
    page = chat_view(window).page()
    qtbot.waitUntil(lambda: page.divider is not None and page.divider.y() > 0, timeout=5_000)
    show_divider(qtbot, page)
    screenshot(window, "chat-overflow-summary-smollm2")
    type_and_send(qtbot, window, "What did I ask you to keep in mind?")
    wait_idle(qtbot, window, cid)
    assert controller_reply(window, cid)


def controller_reply(window, cid: str) -> str:
    last = window.controller.branch(cid)[-1]
    assert last.role == "assistant"
    return last.content
