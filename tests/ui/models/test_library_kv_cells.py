"""The Library says which KV cell types a model gets on this CPU and why (issue 56): the
default pair until a calibration has run, then the calibrated pair with its reason."""

from __future__ import annotations

import os
from pathlib import Path

from app.engine.llama import kv_calibration
from app.engine.llama.kv_calibration import DEFAULT, Candidate


def test_the_library_names_the_calibrated_kv_cells(qtbot, make_manager, models_dir, tiny_model_path,
                                                    tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(kv_calibration.ENV, "on")
    tiny = models_dir / "tiny-chat-Q8_0.gguf"
    os.symlink(tiny_model_path, tiny)
    mm = make_manager()
    lib = mm.library_page
    qtbot.waitUntil(lambda: lib.select_path(tiny), timeout=10_000)
    before = lib.kv_cells_label.text()
    assert before.startswith(f"{DEFAULT.name}: the default until this CPU is calibrated"), before

    choice, _ = kv_calibration.calibrate(str(tiny), [DEFAULT, Candidate("q8_0", "q8_0")], n_threads=1, rounds=1)
    lib.n_ctx.setValue(lib.n_ctx.value() // 2)  # a setting changed: the details are read again
    after = lib.kv_cells_label.text()
    assert after.startswith(choice.why) and "Calibrated on this CPU" in after, after
    assert lib.kv_cells_label.isVisible()
    if shots := os.environ.get("HEARTH_SCREENSHOT_DIR"):
        lib.grab().save(str(Path(shots) / "library-kv-cells.png"))
