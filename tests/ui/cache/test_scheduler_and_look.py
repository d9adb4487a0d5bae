"""The live scheduler view during two generations, and screenshots in both palettes."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from app.ui import theme
from app.ui.cache.dashboard import TAB_SCHEDULER, TAB_SPACE, TAB_TREE
from tests.ui.cache.conftest import fill_index, screenshot, tiny_config
from tests.ui.cache.test_live_store import chat


def test_monitor_shows_two_busy_slots(engine: Any, tiny_model_path: Any, make_dashboard: Any, qtbot: Any) -> None:
    # NOTE: a long context so the two replies outlast the monitor's refresh timer by far
    # (the tiny model decodes hundreds of tokens a second; 400 tokens could end unseen).
    config = dataclasses.replace(tiny_config(tiny_model_path), n_ctx=2048)
    tiny = engine.load_model("tiny", config)
    dash = make_dashboard(engine)
    dash.select_tab(TAB_SCHEDULER)
    panel = dash.scheduler_panel
    qtbot.waitUntil(lambda: panel.slot_states("tiny") == ["free"] * 4, timeout=2000)
    streams = [
        tiny.infer(chat(tiny, f"Tell me a long story about loaf number {i}."), session_id=f"story-{i}",
                   response_tokens=1900)  # fmt: skip
        for i in range(2)
    ]
    try:
        busy = ("prefilling", "generating")
        qtbot.waitUntil(lambda: sum(s in busy for s in panel.slot_states("tiny")) == 2, timeout=30_000)
        qtbot.waitUntil(lambda: panel.slot_states("tiny").count("generating") == 2, timeout=30_000)
        mon = panel.monitors["tiny"]
        qtbot.waitUntil(lambda: len(tiny.snapshot().recent_ticks) >= 3, timeout=30_000)
        mon.refresh()
        assert "2 of 4 slots busy" in mon.status.text()
        assert {c.who.text().split(" ·")[0] for c in mon.chips[:2]} == {"story-0", "story-1"}
        screenshot(dash, "cache-scheduler-monitor")
    finally:
        for s in streams:
            s.cancel()
        for s in streams:
            s.result(timeout=60)
    qtbot.waitUntil(lambda: panel.slot_states("tiny").count("pinned") == 2, timeout=5000)


def test_screenshots_light_and_dark(engine: Any, make_dashboard: Any, qtbot: Any, tmp_path: Any,
                                    monkeypatch: Any) -> None:
    """Many rows and all tabs, in the app's light and dark themes (look at them): each tab is
    drawn in the scheme's own colours and shows the rows (the tree once it is built)."""
    if not os.environ.get("HEARTH_SCREENSHOT_DIR"):
        monkeypatch.setenv("HEARTH_SCREENSHOT_DIR", str(tmp_path))
    app = QApplication.instance()
    fill_index(engine.cache, 300)
    try:
        for scheme, colors in (("light", theme.LIGHT), ("dark", theme.DARK)):
            theme.apply_theme(app, scheme)
            dash = make_dashboard(engine)
            _look_at_every_tab(qtbot, dash, scheme, colors)
            dash.shutdown()
    finally:
        theme.apply_theme(app, "light")
        app.setStyleSheet("")


def _look_at_every_tab(qtbot: Any, dash: Any, scheme: str, colors: theme.Colors) -> None:
    for _ in range(3):
        dash.sample()
    assert dash.rows_panel.count_label.text() == "300 entries"
    _look(dash, f"cache-{scheme}-table", colors)
    dash.select_tab(TAB_SPACE)
    assert all(row.usage.text() for row in dash.tiers_panel.rows.values())
    _look(dash, f"cache-{scheme}-space", colors)
    dash.select_tab(TAB_TREE)
    dash.tree_panel.model_box.setCurrentText("beta")
    # The tree is built off the GUI thread: wait for it, then look.
    qtbot.waitUntil(lambda: dash.tree_panel.summary.text().startswith("100 saved points"), timeout=10_000)
    assert dash.tree_panel.model.rowCount() > 0
    _look(dash, f"cache-{scheme}-tree", colors)


def _look(dash: Any, name: str, colors: theme.Colors) -> None:
    """Save the screenshot and check it is drawn in ``colors``: the window background."""
    path = screenshot(dash, name)
    assert path is not None
    image = QImage(str(path))
    assert image.width() == dash.width() and image.height() == dash.height()
    # The top-left corner is the dashboard's own background, outside every card.
    assert image.pixelColor(2, 2).name() == colors.window, (name, image.pixelColor(2, 2).name())


def test_models_loaded_and_unloaded_while_open(engine: Any, tiny_model_path: Any, make_dashboard: Any, qtbot: Any) -> None:
    from tests.ui.cache.conftest import tiny_config

    dash = make_dashboard(engine)
    dash.select_tab(TAB_SCHEDULER)
    assert dash.scheduler_panel.empty.isVisible()
    engine.load_model("tiny", tiny_config(tiny_model_path))
    qtbot.waitUntil(lambda: "tiny" in dash.scheduler_panel.monitors, timeout=2000)
    dash.sample()
    assert dash.rows_panel.model_filter.findText("tiny") >= 0
    engine.unload("tiny")
    qtbot.waitUntil(lambda: not dash.scheduler_panel.monitors, timeout=2000)
    assert dash.scheduler_panel.empty.isVisible()


def test_a_failing_action_reports_instead_of_dying(engine: Any, make_dashboard: Any, qtbot: Any) -> None:
    dash = make_dashboard(engine)
    with qtbot.waitSignal(dash.action_failed, timeout=5000) as failed:
        dash.cache_actions.move([b"\0" * 32], "floppy")
    assert failed.args[0] == "move" and "floppy" in failed.args[1]
    assert dash.action_status.text().startswith("Could not move")
