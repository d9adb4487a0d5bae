"""The Cache dashboard shows Hearth's memory as one bar against its cap, and says when the RAM
tier gave way because the machine ran short (issue 54; a fake MemAvailable, ``HEARTH_MEMINFO``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from app.cache.policy import CachePolicy
from app.engine import Engine
from app.engine.memory.memory_budget import LOW_WATER, process_rss
from app.engine.memory.memory_fit import MEMINFO_ENV, read_shape
from app.ui.cache.dashboard import TAB_SPACE
from app.ui.cache.memory_bar import PARTS
from app.units import human_bytes
from tests.ui.cache.conftest import screenshot, tiny_config

GiB = 1 << 30


def test_the_budget_is_one_bar_and_a_shortage_is_said(
    qtbot: Any, make_dashboard: Any, tiny_model_path: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: {8 << 20} kB\nMemAvailable: {4 << 20} kB\n")
    monkeypatch.setenv(MEMINFO_ENV, str(meminfo))
    # The cap leaves room beside what this process holds already: the fixed part is measured
    # when the engine starts, and a test worker that ran other files first may hold more than
    # 1.5 GiB (a fresh-clone make test refused the load: "the cap leaves 0 B").
    cap = max(3 * GiB // 2, process_rss() + GiB)
    engine = Engine(tmp_path / "data", memory_cap=cap)
    try:
        policy = CachePolicy(min_tokens=8, cold_min_tokens=10**6, cold_max_tokens=2 * 10**6)
        config = tiny_config(tiny_model_path, policy)
        model = engine.load_model("tiny", config.__class__(**{**_fields(config), "tier": "ram"}))
        for i in range(3):
            model.complete(f"Conversation {i}: what do you know about the number {i}?", response_tokens=8)
        assert engine.cache.flush()
        dash = make_dashboard(engine)
        bar = dash.tabs.tabBar()
        qtbot.mouseClick(bar, Qt.MouseButton.LeftButton, pos=bar.tabRect(TAB_SPACE).center())
        assert dash.tabs.currentIndex() == TAB_SPACE
        shown = dash.memory_bar
        assert shown.isVisible()
        shape = read_shape(tiny_model_path)
        assert shape is not None
        need = shape.need(512, 4, n_batch=256)
        parts = dict((k, n) for k, n, _c in shown.bar.parts)
        assert list(parts) == [key for key, _w, _c in PARTS]
        assert parts["kv"] == need.kv and parts["buffers"] == need.buffers
        assert parts["ram_tier"] == engine.cache.tier_usage()["ram"][0] > 0
        assert shown.bar.cap == cap
        assert f"of {human_bytes(cap)}: your cap" in shown.summary.text()
        assert f"Saved in RAM {human_bytes(parts['ram_tier'])}" in shown.legend.text()
        assert not shown.notice.isVisible()
        screenshot(dash, "cache-memory-budget")

        meminfo.write_text(f"MemTotal: {8 << 20} kB\nMemAvailable: {LOW_WATER // 2048} kB\n")  # another app took it
        engine.memory.relieve(engine.cache)
        dash.sample()
        assert dict((k, n) for k, n, _c in shown.bar.parts)["ram_tier"] == 0
        assert shown.notice.isVisible() and "memory short" in shown.notice.text()
        assert "to disk" in shown.notice.text()
        screenshot(dash, "cache-memory-budget-shed")
    finally:
        engine.close()


def _fields(config: Any) -> dict[str, Any]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}
