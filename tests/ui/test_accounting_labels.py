"""One definition of a hit, shown the same way everywhere (issue 27, item 6): the tooltip under
each reply names the kind of request the Cache dashboard counts it under, with its share of
prompt tokens reused; the dashboard's numbers, the status bar and "What was reused" agree,
with a token-weighted figure beside the request count — and "What was reused" still lists
the earlier replies after a restart."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.conversation.accounting import REUSE_KINDS, HitTotals
from app.storage import SamplingSettings
from app.ui.cache.dashboard import TAB_REUSE, TAB_SPACE
from tests.ui.conftest import ASCII_GRAMMAR
from tests.ui.helpers import chat_view, current_id, type_and_send, wait_idle
from tests.ui.screens import screenshot

LEFT = Qt.MouseButton.LeftButton
SAMPLING = SamplingSettings(temperature=0.0, max_tokens=12, grammar=ASCII_GRAMMAR)
LABELS = {k.source: k.label for k in REUSE_KINDS}


def totals_of(replies) -> HitTotals:
    return HitTotals.of_requests(
        (r.stats.reuse_source, r.stats.prompt_tokens, r.stats.tokens_reused) for r in replies
    )


def open_cache_tab(qtbot, window, tab: int):
    qtbot.mouseClick(window.nav_buttons["cache"], LEFT)
    dash = window.cache_dashboard
    bar = dash.tabs.tabBar()
    qtbot.mouseClick(bar, LEFT, pos=bar.tabRect(tab).center())
    assert dash.tabs.currentIndex() == tab
    dash.sample()
    return dash


def check_tooltips(window, cid: str, replies) -> None:
    widgets = [w for w in chat_view(window).message_widgets() if w.role == "assistant"]
    assert len(widgets) == len(replies)
    for widget, reply in zip(widgets, replies, strict=True):
        s = reply.stats
        label = LABELS[s.reuse_source].lower()
        hit = "a miss" if s.reuse_source == "none" else "a hit"
        share = f"{100 * s.tokens_reused / s.prompt_tokens:.0f} %"
        expected = (f"Counted as {hit} — {label}: {s.tokens_reused:,} of {s.prompt_tokens:,} "
                    f"prompt tokens reused ({share}).")
        assert expected in widget.meta.toolTip().splitlines(), widget.meta.toolTip()
        assert "Cache: " not in widget.meta.toolTip()  # no second vocabulary


def test_a_hit_is_one_thing_everywhere_and_what_was_reused_survives_a_restart(
    make_window, qtbot, data_dir
):
    window = make_window(work_areas=True, sampling=SAMPLING)
    type_and_send(qtbot, window, "first question about the harbour and its boats")
    cid = current_id(window)
    wait_idle(qtbot, window, cid)
    type_and_send(qtbot, window, "second question about the nets")
    wait_idle(qtbot, window, cid)
    replies = [m for m in window.controller.branch(cid) if m.role == "assistant"]
    assert [r.stats.reuse_source for r in replies] == ["none", "session"]
    check_tooltips(window, cid, replies)
    totals = totals_of(replies)
    assert (totals.hits, totals.requests) == (1, 2)

    # The dashboard: the same figures as the status bar, the same words as the tooltips.
    dash = open_cache_tab(qtbot, window, TAB_SPACE)
    panel = dash.stats_panel
    assert panel.headline.text() == "H" + totals.summary()[1:]
    assert panel.headline.text().endswith(f"tokens reused: {totals.token_percent_text()}")
    assert window.status_hits.text() == (
        f"Cache: hits {totals.percent_text()} · tokens reused: {totals.token_percent_text()}"
    )
    assert panel.values["hits_sticky"].text() == "1" and panel.values["misses"].text() == "1"
    assert panel.values["hits_restored"].text() == "0" and panel.values["hits_live"].text() == "0"
    screenshot(window, "cache-savings-one-accounting")
    reuse = open_cache_tab(qtbot, window, TAB_REUSE).reuse_panel
    assert reuse.table.rowCount() == 2
    assert [reuse.counted_as(r) for r in range(2)] == ["hit · held for its chat", "miss · read in full"]
    assert reuse.summary.text() == f"Since the cache was created: {totals.summary()}. Each of them is below."
    window.close()

    # After a restart: the earlier replies are listed, counted the same way.
    again = make_window(data_dir, work_areas=True, sampling=SAMPLING)
    reuse = open_cache_tab(qtbot, again, TAB_REUSE).reuse_panel
    assert reuse.table.rowCount() == 2
    assert [reuse.counted_as(r) for r in range(2)] == ["hit · held for its chat", "miss · read in full"]
    assert reuse.words(0).startswith(f"reused {replies[1].stats.tokens_reused:,} of")
    assert reuse.summary.text() == f"Since the cache was created: {totals.summary()}. Each of them is below."
    screenshot(again, "cache-reuse-after-restart")

    # A turn after the restart is restored from the cache: the tooltip, the dashboard's
    # "Restored from the cache" and the list say so alike.
    qtbot.mouseClick(again.nav_buttons["chat"], LEFT)
    type_and_send(qtbot, again, "third question, after the restart")
    wait_idle(qtbot, again, cid)
    replies = [m for m in again.controller.branch(cid) if m.role == "assistant"]
    assert replies[-1].stats.reuse_source == "cache"
    check_tooltips(again, cid, replies)
    dash = open_cache_tab(qtbot, again, TAB_SPACE)
    assert dash.stats_panel.values["hits_restored"].text() == "1"
    # The restore's time is there too (it said "to load it back: —" after restores, issue 50).
    loaded = dash.stats_panel.times.text().split("to load it back: ")[1]
    assert loaded != "—" and loaded.endswith(" ms"), loaded
    assert dash.stats_panel.headline.text() == "H" + totals_of(replies).summary()[1:]
    reuse = open_cache_tab(qtbot, again, TAB_REUSE).reuse_panel
    qtbot.waitUntil(lambda: reuse.table.rowCount() == 3, timeout=5_000)
    assert reuse.counted_as(0) == "hit · restored from the cache"
    qtbot.waitUntil(lambda: reuse.summary.text() == (
        f"Since the cache was created: {totals_of(replies).summary()}. Each of them is below."), timeout=5_000)
