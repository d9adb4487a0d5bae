"""``hearth bench --only KV``'s machinery on the tiny model: the settings take turns, every
row has its timings and its exactness verdict, and the default is exact and is its own
reference. (The figures belong to ``hearth bench --only KV`` on SmolLM2.)"""

from __future__ import annotations

from pathlib import Path

from benchmarks import scenarios_kv
from benchmarks.scenarios_kv import DEFAULT, HEARTH_COLD, LLAMA_DEFAULT, kv_settings


def test_the_kv_table_times_and_checks_each_setting(tiny_model_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(scenarios_kv, "DECODE_TICKS", 4)
    monkeypatch.setattr(scenarios_kv, "COLD_TOKENS", 300)
    res = kv_settings(str(tiny_model_path), rounds=1, only=["FA off · ubatch 128"], n_threads=1)
    rows = {row[0]: row for row in res.rows}
    assert list(rows) == [DEFAULT, "FA off · ubatch 128", LLAMA_DEFAULT, HEARTH_COLD]
    # The cold prefill through Hearth against llama.cpp's defaults (a child process): both timed.
    cold = res.figures["cold prefill vs llama.cpp default"]
    assert len(cold["hearth_ms"]) == len(cold["llama_default_ms"]) == 1
    assert min(cold["hearth_ms"] + cold["llama_default_ms"]) > 0 and cold["ratio"] > 0
    assert cold["tokens"] == 300 and f"{cold['ratio']:.3f} × llama.cpp" in rows[HEARTH_COLD][5]
    assert rows[HEARTH_COLD][6] == rows[DEFAULT][6] == "yes"  # the exactness of the pair Hearth uses (calibration off)
    for name, row in list(rows.items())[:2]:
        assert all(isinstance(v, float) and v > 0 for v in row[1:5]), row
        assert row[6] in ("yes", "no") and row[7] in ("yes", "no")
        assert len(res.figures[name]["runs"]) == 1
    default = rows[DEFAULT]
    assert default[5] == 1.0  # × default
    assert default[6] == "yes" and default[7] == "yes" and default[9] == "—"  # the default is exact
    assert rows["FA off · ubatch 128"][7] == "no"  # a transposed V: other KV bytes


def _row(name: str, ratio: float, exact: bool) -> list:
    return [name, 1.0, 1.0, 1.0, 1.0, ratio, "yes" if exact else "no", "no", 0.0, "—"]


def test_the_verdict_wants_the_default_to_be_the_fastest_exact_setting() -> None:
    """Met unless another exact setting is clearly faster (5 %: closer is drift) or the default
    is not exact; the fastest inexact one is named as the labelled choice."""
    verdict = scenarios_kv._verdict
    met, text = verdict([_row(DEFAULT, 1.0, True), _row("ubatch 128", 0.97, True), _row("FA off", 0.7, False)])
    assert met and "Fastest inexact: FA off (0.700 ×)" in text and "--fast-prefill" in text
    met, text = verdict([_row(DEFAULT, 1.0, True), _row("ubatch 128", 0.9, True)])
    assert not met and text.startswith(f"An exact setting is faster than the one Hearth uses ({DEFAULT}): "
                                       "ubatch 128 (0.900 ×)")
    assert verdict([_row(DEFAULT, 1.0, False)]) == (False, "")
    # Where the calibration chose q8_0 K+V, that row is the one measured against.
    q8 = scenarios_kv.AUTO_ROWS[("q8_0", "q8_0")]
    rows = [_row(DEFAULT, 1.0, True), _row(q8, 0.55, True), _row("FA off", 0.5, False)]
    assert verdict(rows, q8)[0] and not verdict(rows)[0]
