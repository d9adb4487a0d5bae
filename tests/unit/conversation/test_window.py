"""The overflow policies: which turns the model sees once a conversation outgrows its context.

The planner is pure: it measures candidate views with a ``count`` callback. Here the callback
is exact arithmetic over made-up turn sizes (so each expected cut can be worked out by hand);
tests/unit/conversation/test_prompt.py measures with the real template and tokenizer.
"""

from __future__ import annotations

import pytest

from app.conversation.window import (
    Budget,
    OverflowPolicy,
    Turn,
    WindowState,
    check_summary,
    clean_summary,
    fitted_summary_request,
    plan_window,
    summary_request,
    view_messages,
)

SYSTEM = 20


def conversation(sizes: list[int]) -> tuple[list[Turn], dict[str, int]]:
    """Alternating user/assistant turns with the given token sizes."""
    turns = [Turn(f"m{i}", "user" if i % 2 == 0 else "assistant", f"t{i}") for i in range(len(sizes))]
    return turns, {t.id: n for t, n in zip(turns, sizes, strict=True)}


def counter(turns: list[Turn], size: dict[str, int], calls: list[int] | None = None):
    def count(start: int, summary: str) -> int:
        if calls is not None:
            calls.append(start)
        return SYSTEM + (len(summary) if summary else 0) + sum(size[t.id] for t in turns[start:])

    return count


def test_a_view_that_fits_is_left_alone():
    turns, size = conversation([30, 40, 30])
    plan = plan_window(turns, WindowState(), counter(turns, size), Budget(512, 64), OverflowPolicy.STOP)
    assert (plan.kind, plan.start, plan.num_tokens) == ("fits", 0, 120)
    assert plan.can_send


def test_drop_oldest_cuts_at_a_user_turn_to_the_target_and_keeps_the_last_turn():
    # 20 + 10 turns of 50 = 520 > limit 448 (512 - 64); target = int(448 * 0.6) = 268.
    turns, size = conversation([50] * 10 + [40])
    plan = plan_window(turns, WindowState(), counter(turns, size), Budget(512, 64), OverflowPolicy.DROP_OLDEST)
    assert plan.kind == "cut"
    # From m6: 20 + 4*50 + 40 = 260 <= 268; from m4 it would be 360.
    assert plan.start == 6 and turns[plan.start].role == "user"
    assert plan.num_tokens == 260 and plan.summary == ""


def test_after_a_cut_the_window_stays_put_while_it_fits():
    turns, size = conversation([50] * 10 + [40, 50, 30])
    state = WindowState("m6", "")
    plan = plan_window(turns, state, counter(turns, size), Budget(512, 64), OverflowPolicy.DROP_OLDEST)
    assert (plan.kind, plan.start) == ("fits", 6)


def test_stop_refuses_and_too_long_reports_the_last_turn():
    turns, size = conversation([50] * 10 + [40])
    stop = plan_window(turns, WindowState(), counter(turns, size), Budget(512, 64), OverflowPolicy.STOP)
    assert stop.kind == "full" and not stop.can_send and stop.num_tokens == 560
    turns, size = conversation([50, 50, 500])
    long = plan_window(turns, WindowState(), counter(turns, size), Budget(512, 64), OverflowPolicy.DROP_OLDEST)
    assert (long.kind, long.start, long.num_tokens) == ("too_long", 2, 520)


def test_summarise_asks_for_a_summary_of_the_turns_that_leave_with_room_for_it():
    turns, size = conversation([50] * 10 + [40])
    budget = Budget(512, 64)
    plan = plan_window(turns, WindowState(), counter(turns, size), budget, OverflowPolicy.SUMMARISE)
    assert plan.kind == "summarise" and not plan.can_send
    # Room is kept for a summary of up to 448 // 4 = 112 tokens: from m8 the view would be
    # 20 + 50 + 50 + 40 + 112 = 272 > 268 (the target), from m10 it is 20 + 40 + 112 = 172.
    assert budget.summary_tokens == 112
    assert (plan.start, plan.summarise_from, plan.num_tokens) == (10, 0, 60)
    # The next plan, with the summary in place, fits and keeps the summary.
    state = WindowState(turns[plan.start].id, "s" * 100)
    again = plan_window(turns, state, counter(turns, size), budget, OverflowPolicy.SUMMARISE)
    assert (again.kind, again.start, again.summary) == ("fits", plan.start, "s" * 100)


def test_a_state_off_the_active_branch_starts_from_the_beginning():
    turns, size = conversation([30, 40, 30])
    plan = plan_window(turns, WindowState("gone", "old summary"), counter(turns, size), Budget(512, 64), OverflowPolicy.DROP_OLDEST)
    assert (plan.kind, plan.start, plan.summary) == ("fits", 0, "")


def test_the_cut_is_found_with_a_logarithmic_number_of_renders():
    turns, size = conversation([10] * 400 + [10])
    calls: list[int] = []
    plan = plan_window(turns, WindowState(), counter(turns, size, calls), Budget(2048, 256), OverflowPolicy.DROP_OLDEST)
    assert plan.kind == "cut"
    assert len(calls) <= 12  # one for the current view, ~log2(200) for the cut, one to report


def test_budget_keeps_room_for_the_reply_but_never_more_than_a_quarter():
    assert Budget.for_reply(4096, 512).limit == 4096 - 512
    assert Budget.for_reply(512, 512).limit == 512 - 128
    assert Budget.for_reply(512, 24).limit == 488


def test_view_messages_put_the_summary_after_the_system_prompt():
    turns = [Turn("a", "user", "hi"), Turn("b", "assistant", "hello"), Turn("c", "user", "more")]
    messages, extra = view_messages(turns, 2, "they greeted")
    assert extra == "" and messages[0]["role"] == "system" and "they greeted" in messages[0]["content"]
    assert messages[1:] == [{"role": "user", "content": "more"}]
    merged, extra = view_messages(turns, 2, "they greeted", merge_summary=True)
    assert merged == [{"role": "user", "content": "more"}] and "they greeted" in extra


def test_the_summary_request_is_cut_to_fit():
    turns = [Turn(str(i), "user", "x" * 100) for i in range(10)]

    def size(messages):
        return sum(len(m["content"]) for m in messages)

    full = size(summary_request(turns, "old"))
    fitted = fitted_summary_request(turns, "old", size, 400)
    assert size(fitted) <= 400 < full
    assert "old" in fitted[-1]["content"]  # the previous summary is always kept
    overhead = size(summary_request([], ""))
    one = fitted_summary_request(turns[:1], "", size, overhead + 40)
    assert size(one) <= overhead + 40 and "The user said: …" + "x" * 13 + "\n\n" in one[-1]["content"]


@pytest.mark.parametrize("value", ["drop_oldest", "summarise", "stop"])
def test_policies_round_trip_and_unknown_values_fall_back(value):
    assert OverflowPolicy.parse(value).value == value
    assert OverflowPolicy.parse("nonsense") is OverflowPolicy.DROP_OLDEST
    assert WindowState.from_dict(WindowState("x", "y").to_dict()) == WindowState("x", "y")
    assert WindowState.from_dict("garbage") == WindowState()


NOTES = [
    Turn("u1", "user", "Note 3: please keep in mind that the gulls of the northern coast were "
                       "counted twice this year, once in spring and once in late autumn, by two teams."),
    Turn("a1", "assistant", "Understood. I will remember the gull counts of the northern coast."),
    Turn("u2", "user", "Note 4: please keep in mind that the nets of the northern coast were "
                       "counted twice this year, once in spring and once in late autumn, by two teams."),
]


def test_a_summary_that_is_only_a_label_or_empty_is_not_usable():
    assert check_summary("", NOTES) == "was empty"
    assert check_summary("Summary:", NOTES) == "was only “Summary:”"
    assert check_summary("  **Summary:**  \n", NOTES) == "was only “**Summary:**”"
    assert check_summary("Summary of the conversation:", NOTES).startswith("was only")


def test_a_summary_that_copies_one_turn_is_not_usable_even_with_a_detail_changed():
    copy = NOTES[2].content
    assert check_summary(copy, NOTES) == "only repeated one of the messages"
    assert check_summary("Summary: " + copy, NOTES) == "only repeated one of the messages"
    wrong_number = copy.replace("Note 4", "Note 5")
    assert check_summary(wrong_number, NOTES) == "only repeated one of the messages"
    assert check_summary(NOTES[2].content[:60], NOTES) == "only repeated one of the messages"


def test_a_summary_must_be_shorter_than_what_it_replaces():
    long = "The user and the assistant talked about many things at length. " * 10
    assert check_summary(long, NOTES) == "was not shorter than the messages it replaced"


def test_a_real_summary_is_usable_and_loses_its_label():
    text = ("Summary: The user asked to remember that gulls and nets on the northern coast "
            "were counted twice this year by two teams.")
    assert check_summary(text, NOTES) == ""
    assert clean_summary(text).startswith("The user asked")
    assert check_summary(text, NOTES, previous="Earlier they spoke of boats.") == ""


def test_the_reason_a_view_has_no_summary_survives_a_round_trip():
    state = WindowState("u2", "", no_summary="was only “Summary:”")
    assert WindowState.from_dict(state.to_dict()) == state
    assert WindowState("u2", "a summary").to_dict() == {"start_id": "u2", "summary": "a summary"}
    assert WindowState.from_dict({"start_id": "u2", "summary": "s", "no_summary": "x"}).no_summary == ""


def test_a_summary_that_goes_on_with_the_conversation_or_invents_is_not_usable():
    goes_on = "In this conversation, the user said:\nUser: Note 5: please keep in mind the tides."
    assert check_summary(goes_on, NOTES) == "went on with the conversation instead of summarising it"
    invented = ("In this conversation, the user wants a local restaurant with seafood and wine "
                "near the harbour in Porto.")
    assert check_summary(invented, NOTES) == "was mostly about things the messages do not say"


def test_the_summary_request_is_a_third_person_transcript_with_the_instruction_last():
    (message,) = summary_request(NOTES[:2], "They spoke of boats.")
    assert message["role"] == "user"
    text = message["content"]
    assert "Earlier, in short: They spoke of boats." in text
    assert "The user said: Note 3" in text and "The assistant answered: Understood." in text
    assert text.rstrip().endswith("the facts, names and numbers that matter.")


def test_the_summary_prompts_own_transcript_lines_and_the_earlier_summary_are_refused():
    echo = ("In this conversation, the user asked about the gull counts.\n\nThe user said: Note 5: "
            "please keep in mind that the boats were counted twice.")
    assert check_summary(echo, NOTES) == "went on with the conversation instead of summarising it"
    earlier = "The user asked to remember that the gulls of the northern coast were counted twice."
    assert check_summary(earlier, NOTES, previous=earlier) == "only repeated the earlier summary"
