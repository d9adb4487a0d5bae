"""A new chat's title: its first line, and distinct from the titles already in the list."""

from __future__ import annotations

from app.conversation.titles import distinct_title, title_from


def test_the_title_is_the_first_line_cut_to_48_characters():
    assert title_from("Hello there\nsecond line") == "Hello there"
    assert title_from("   ") == "New chat"
    long = title_from("word " * 30)
    assert len(long) == 48 and long.endswith("…")


def test_chats_that_start_alike_get_titles_that_show_where_they_differ():
    start = "Please summarise the following report on the northern coast for me: "
    first = distinct_title(start + "the lanterns were counted twice.", set())
    second = distinct_title(start + "the harbours were dredged.", {first},
                            [start + "the lanterns were counted twice."])
    assert second == "Please … the harbours were dredged."
    assert first[:24] != second[:24]  # what the sidebar shows of them differs
    third = distinct_title(start + "the lanterns were counted twice.", {first, second},
                           [start + "the lanterns were counted twice."])
    assert third == "Please summarise … (2)"
    assert distinct_title("hi", {"hi"}) == "hi … (2)"
    assert distinct_title("hi", {"hi", "hi … (2)"}) == "hi … (3)"
