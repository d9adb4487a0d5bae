"""``hearth bench --only KV``'s machinery on the tiny model: the settings take turns, every
row has its timings and its exactness verdict, and the default is exact and is its own
reference. (The figures belong to ``hearth bench --only KV`` on SmolLM2.)"""

from __future__ import annotations

from pathlib import Path

from benchmarks import scenarios_kv
from benchmarks.scenarios_kv import DEFAULT, kv_settings


def test_the_kv_table_times_and_checks_each_setting(tiny_model_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(scenarios_kv, "DECODE_TICKS", 4)
    res = kv_settings(str(tiny_model_path), rounds=1, only=["FA off · ubatch 128"], n_threads=1)
    rows = {row[0]: row for row in res.rows}
    assert list(rows) == [DEFAULT, "FA off · ubatch 128"]
    for name, row in rows.items():
        assert all(isinstance(v, float) and v > 0 for v in row[1:5]), row
        assert row[6] in ("yes", "no") and row[7] in ("yes", "no")
        assert len(res.figures[name]["runs"]) == 1
    default = rows[DEFAULT]
    assert default[5] == 1.0  # × default
    assert default[6] == "yes" and default[7] == "yes" and default[9] == "—"  # the default is exact
    assert rows["FA off · ubatch 128"][7] == "no"  # a transposed V: other KV bytes
