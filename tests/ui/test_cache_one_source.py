"""Issue 50, item 5: the Cache views agree — "What was reused" gives the same totals as the
status bar (one source: the cache's counters), and keeps the requests of a model that was
unloaded since (its rows went with it)."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.ui.cache.dashboard import TAB_REUSE
from tests.ui.helpers import current_id, type_and_send, wait_idle
from tests.ui.screens import screenshot
from tests.ui.test_accounting_labels import open_cache_tab
from tests.ui.test_models_in_chat import click_library, library_model

LEFT = Qt.MouseButton.LeftButton


def test_what_was_reused_agrees_with_the_status_bar_and_keeps_unloaded_models(
    make_window, qtbot, data_dir, tiny_model_path
):
    first = library_model(data_dir, tiny_model_path, "tiny-a")
    second = library_model(data_dir, tiny_model_path, "tiny-b")
    window = make_window(model_path=first, model_id=None, work_areas=True)
    click_library(qtbot, window, second, "load")
    page = window.chat_page
    for model_id, text in (("tiny-a", "a question for model a"), ("tiny-b", "a question for model b"),
                           ("tiny-b", "and one more for model b")):
        if text.startswith("a question"):
            page.new_conversation()
            page.pick_model(model_id)
        type_and_send(qtbot, window, text)
        wait_idle(qtbot, window, current_id(window))
    click_library(qtbot, window, second, "unload")  # nothing streams: no question
    assert window.models.ids() == ["tiny-a"]

    dash = open_cache_tab(qtbot, window, TAB_REUSE)
    reuse = dash.reuse_panel
    models = [reuse.table.item(r, 2).text() for r in range(reuse.table.rowCount())]
    assert sorted(models) == ["tiny-a", "tiny-b", "tiny-b"], models  # tiny-b's rows stay
    status = window.status_hits.text()  # "Cache: hits 33 % · tokens reused: 20 %"
    hits, reused = status.removeprefix("Cache: hits ").split(" · tokens reused: ")
    assert reuse.summary.text() == (
        f"Since the cache was created: hits {hits} of 3 requests · tokens reused: {reused}. "
        "Each of them is below."
    )
    assert dash.stats_panel.headline.text().lower() == f"hits {hits} of 3 requests · tokens reused: {reused}"
    screenshot(window, "cache-reuse-one-source")
