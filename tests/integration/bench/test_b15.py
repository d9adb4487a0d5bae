"""B15's machinery on the tiny model, fast: four loads under one budget, a RAM tier small enough
to fill in seconds, the phases' peaks and the row accounting. (The figures belong to
``hearth bench --only B15`` on SmolLM2.)"""

from __future__ import annotations

from pathlib import Path

from app.engine.memory.memory_budget import process_rss
from benchmarks.scenarios_memory import b15_budget

MiB = 1 << 20


def test_a_short_b15_on_the_tiny_model(tiny_model_path: Path):
    budget = process_rss() + 1024 * MiB  # (this test process holds more than a fresh one)
    result = b15_budget(str(tiny_model_path), budget=budget, ram_quota=256 * 1024, fill_seconds=60)
    phases = [row[0] for row in result.rows]
    assert phases == ["load", "chat", "three more models", "cache full"]
    assert [row[3] for row in result.rows] == [1, 1, 4, 4]  # models loaded
    figures = result.figures
    assert set(figures["peaks"]) >= set(phases) and all(p <= budget for p in figures["peaks"].values())
    assert figures["demotions"] > 0, "the RAM tier never filled"
    assert figures["rows_now"] >= figures["rows_seen"] - figures["evictions"] > 0
    assert figures["rows_lost_uncounted"] == 0 and figures["saves_rejected"] == 0 and figures["save_errors"] == 0
    assert len(figures["fits"]) == 4 and figures["memory_status"]["cap"] == budget
    assert result.met is (figures["vm_hwm"] <= budget)
