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
    assert size(one) <= overhead + 40 and one[-1]["content"].endswith("…" + "x" * 25)


@pytest.mark.parametrize("value", ["drop_oldest", "summarise", "stop"])
def test_policies_round_trip_and_unknown_values_fall_back(value):
    assert OverflowPolicy.parse(value).value == value
    assert OverflowPolicy.parse("nonsense") is OverflowPolicy.DROP_OLDEST
    assert WindowState.from_dict(WindowState("x", "y").to_dict()) == WindowState("x", "y")
    assert WindowState.from_dict("garbage") == WindowState()
