"""B6's machinery on the tiny model, fast: four chats stream in an offscreen window while the
open one is switched; the stalls, the open chat's text on screen and the switches are
measured, and hidden chats' text is not counted as on screen. (The figures themselves belong
to ``hearth bench --only B6`` on SmolLM2.)"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from benchmarks.scenarios_gui import b6_gui
from tests.ui.conftest import ASCII_GRAMMAR


def test_a_short_b6_on_the_tiny_model(qapp, tiny_model_path: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the run's data dir is made
    result = b6_gui(
        str(tiny_model_path),
        timeout_s=120.0,
        reply_tokens=120,
        model_options={"n_ctx": 1024, "n_seq_max": 4, "n_batch": 256},
        grammar=ASCII_GRAMMAR,
    )
    assert not list(tmp_path.glob("hearth-b6-*"))  # its data dir is gone once the window is closed
    f = result.figures
    assert f["finished"], result.note
    assert f["reply_tokens"] == [120] * 4
    assert f["switches"] >= 4 and f["beats"] > 10
    assert f["updates_measured"] > 0
    for key in ("longest_stall_ms", "start_stall_ms", "to_screen_p95_ms", "switch_to_paint_p95_ms", "to_screen_any_paint_p95_ms"):
        assert math.isfinite(f[key]) and f[key] >= 0, (key, f[key])
    # Only the open chat's text is measured: fewer updates than the four replies sent.
    assert f["updates_measured"] + f["updates_unpainted"] < f["updates_any_paint"]
    assert "switch to painted, p95" in result.table()
