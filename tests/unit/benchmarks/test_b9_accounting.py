"""B9's accounting: which computed prompt tokens count as re-processed."""

from __future__ import annotations

from benchmarks.scenarios_server import Turn, burst_floor, reprocessed


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


def test_the_burst_floor_serves_each_turn_index_shortest_first_and_the_later_one_waits() -> None:
    alone = [
        Turn("coder", 1, 900.0, 1500, 0, 1500, ""),
        Turn("ops", 1, 700.0, 1400, 0, 1400, ""),
        Turn("coder", 2, 40.0, 1620, 0, 72, ""),
        Turn("ops", 2, 55.0, 1500, 0, 90, ""),
        Turn("coder", 3, 30.0, 1700, 0, 60, ""),  # alone in its burst: its own prefill
    ]
    got = {(t.client, t.turn): t.ttft_ms for t in burst_floor(alone)}
    assert got == {("ops", 1): 700.0, ("coder", 1): 1600.0, ("coder", 2): 40.0, ("ops", 2): 95.0,
                   ("coder", 3): 30.0}


def test_b9_judges_hearth_against_the_burst_floor_without_a_llama_server(monkeypatch) -> None:
    """The scenario's table and verdict from recorded turns (the servers and the floor's
    backend are replaced by their turns): Hearth's median over the burst floor's."""
    from benchmarks import scenarios_server as b9

    def trace(ttft: float) -> list[Turn]:
        return [Turn(c, k, ttft + (10.0 if c == "ops" else 0.0), 1500 + 100 * k, 48, 1500 if k == 1 else 100, "r")
                for c in b9.CLIENTS for k in range(1, b9.N_TURNS + 1)]

    monkeypatch.setattr(b9, "run_trace", lambda launch, extra=None: trace(300.0))
    monkeypatch.setattr(b9, "floor_trace", lambda model, turns: trace(100.0))
    monkeypatch.setattr(b9, "llama_cpp_python_available", lambda: "not here")
    result = b9.b9_agent_trace("model.gguf", None)
    rows = {row[0]: row for row in result.rows}
    assert set(rows) == {b9.HEARTH, b9.FLOOR, b9.BURST_FLOOR}
    assert rows[b9.FLOOR][1] == 105.0 and rows[b9.BURST_FLOOR][1] == 155.0  # medians: 100|110, 100|210
    assert result.figures["ttft_over_burst_floor"] == 305.0 / 155.0
    assert result.met is False  # 1.97 × the burst floor
    assert "no --llama-server" in result.note
