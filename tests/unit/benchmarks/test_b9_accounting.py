"""B9's accounting: which computed prompt tokens count as re-processed."""

from __future__ import annotations

from benchmarks.scenarios_server import Turn, reprocessed


def turn(client: str, n: int, prompt: int, completion: int, processed: int) -> Turn:
    return Turn(client, n, 1.0, prompt, completion, processed, "")


def test_new_text_is_not_reprocessing_but_reading_the_old_part_again_is() -> None:
    turns = [
        turn("coder", 1, 1500, 48, 1500),  # cold start: all new
        turn("coder", 2, 1620, 48, 73),  # 1548 held, 72 new, the last token again: 1 re-processed
        turn("coder", 3, 1740, 40, 1740),  # a server that forgot everything: 1668 re-processed
        turn("ops", 1, 1400, 10, 1400),
        turn("ops", 2, 1500, 10, 90),  # fewer than the new tokens (can't be negative)
    ]
    got = reprocessed(turns)
    assert got == {("coder", 1): 0, ("coder", 2): 1, ("coder", 3): 1668, ("ops", 1): 0, ("ops", 2): 0}


def test_a_server_that_does_not_report_usage_has_no_figure() -> None:
    assert reprocessed([turn("coder", 1, 0, 0, 0), Turn("ops", 1, 1.0, 0, 0, None, "")]) is None
