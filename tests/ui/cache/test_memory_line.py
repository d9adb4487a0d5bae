"""The live scheduler says what each loaded model's memory lets the cache reuse (issue 28)."""

from __future__ import annotations

from typing import Any

from app.ui.cache.dashboard import TAB_SCHEDULER
from tests.helpers.tiny_families import ensure_tiny_family
from tests.ui.cache.conftest import tiny_config


def test_a_recurrent_model_is_said_to_reuse_from_checkpoints(engine: Any, assets_dir: Any, tiny_model_path: Any,
                                                              make_dashboard: Any, qtbot: Any) -> None:
    engine.load_model("mamba", tiny_config(ensure_tiny_family("mamba2", assets_dir)))
    engine.load_model("tiny", tiny_config(tiny_model_path))
    dash = make_dashboard(engine)
    dash.select_tab(TAB_SCHEDULER)
    monitors = dash.scheduler_panel.monitors
    qtbot.waitUntil(lambda: {"mamba", "tiny"} <= set(monitors), timeout=5000)
    assert monitors["mamba"].memory.text() == (
        "Memory: recurrent: reuse from checkpoints at turn boundaries (a state cannot be cut)"
    )
    assert monitors["tiny"].memory.text().startswith("Memory: attention: any shared prefix")
