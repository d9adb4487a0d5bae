"""B2's burst floor: one server with the backend alone, serving the turns as Hearth's clients
sent them, one at a time, shortest first."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.floor import Queued, reusable_prefix, served_one_at_a_time


def test_turns_that_arrive_together_wait_for_the_shorter_ones_served_before_them() -> None:
    got = served_one_at_a_time([Queued(0.0, 90.0), Queued(0.0, 60.0), Queued(1.0, 80.0), Queued(2.0, 70.0)])
    # 60 first (0-60), then the shortest arrived by then: 70 (60-130), 80 (130-210), 90 (210-300)
    assert got == [300.0, 60.0, 209.0, 128.0]


def test_a_turn_that_arrives_when_the_server_is_idle_waits_for_nothing() -> None:
    got = served_one_at_a_time([Queued(0.0, 50.0), Queued(500.0, 40.0), Queued(520.0, 10.0)])
    assert got == [50.0, 40.0, 30.0]  # the third arrives while the second is served: 540 - 520 + 10


def test_a_turn_waits_for_the_turn_whose_tokens_it_reuses_even_when_shorter() -> None:
    # Four chats' first turns at once: the first reads the shared system prompt cold, the
    # others reuse it and so cannot go before it, however short they are.
    cold = Queued(0.0, 1500.0)
    got = served_one_at_a_time([cold, Queued(0.1, 80.0, after=0), Queued(0.2, 70.0, after=0), Queued(0.0, 90.0)])
    # the fourth reuses nothing: it goes first (the shortest ready), then the cold one, then 70, 80
    assert got == pytest.approx([1590.0, 1739.9, 1659.8, 90.0])


def test_the_reusable_prefix_and_where_it_comes_from() -> None:
    computed = [(1, 2, 3, 4, 5), (1, 2, 9), (1, 2, 3, 4, 5, 6, 7)]
    assert reusable_prefix((1, 2, 3, 4, 5, 6, 7, 8), computed) == (7, 2)
    assert reusable_prefix((1, 2, 3), computed) == (2, 0)  # the last token is always prefilled
    assert reusable_prefix((7, 8), computed) == (0, None)
    assert reusable_prefix((7, 8), []) == (0, None)


def test_b2_reports_hearth_and_the_peer_against_the_burst_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenario's rows and figures from recorded rounds (Hearth, the peer and the floor's
    backend replaced): two chats that send together, one of them after the other's reply."""
    from benchmarks import scenarios_chat as b2

    system = tuple(range(100, 140))
    sent = [
        b2.Sent("chat-0", 10.0, (*system, 1), (50, 51)),
        b2.Sent("chat-1", 10.0001, (*system, 2), (60,)),
        b2.Sent("chat-0", 11.0, (*system, 1, 50, 51, 3), (52,)),
    ]
    timed: list[tuple[str, int, int]] = []

    class FakeFloor:
        def __init__(self, *args: Any) -> None:
            pass

        def __enter__(self) -> FakeFloor:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def turn(self, key: str, prompt: tuple[int, ...], reusable: int) -> float:
            timed.append((key, len(prompt), reusable))
            return 10.0 * (len(prompt) - reusable)  # 10 ms a new token

    monkeypatch.setattr(b2, "FloorProcess", FakeFloor)
    monkeypatch.setattr(b2, "hearth_b2", lambda path: {"wall_s": 5.0, "median_ttft_ms": 300.0, "hits": {},
                                                       "system_tokens": 40, "sent": list(sent)})
    monkeypatch.setattr(b2, "llama_cpp_python_b2", lambda path, ram_cache: {"wall_s": 9.0, "median_ttft_ms": 400.0})
    result = b2.b2_chats("model.gguf", None, rounds=1)
    # chat-0 cold (41 tokens, 410 ms); chat-1 reuses the system prompt from it (1 new, after it);
    # chat-0's next turn reuses its own turn and reply (1 new), sent 1 s later.
    assert timed == [("chat-0", 41, 0), ("chat-1", 41, 40), ("chat-0", 44, 43)]
    # TTFTs: 410, 410 + 10 - 0.1 (waited for chat-0), 10: median 410
    rows = {row[0]: row for row in result.rows}
    assert rows[b2.BURST_FLOOR][2] == pytest.approx(410.0)
    assert result.figures["ttft_over_burst_floor"] == pytest.approx(300.0 / 410.0)
    assert result.figures["burst_floor_over_ram_cache"] == pytest.approx(410.0 / 400.0)
    assert "sent" not in result.figures["hearth"]
    assert "burst floor" in result.note.lower()
