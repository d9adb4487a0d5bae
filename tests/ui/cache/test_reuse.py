"""Say why (issue #13 item 5): the dashboard shows what each request reused of what Hearth
held, in plain words, naming conversations by title."""

from __future__ import annotations

import time
from typing import Any

from app.engine.events import Reuse, ReuseRecord, SchedulerSnapshot
from app.ui.cache.dashboard import TAB_REUSE
from app.ui.cache.reuse_panel import ReusePanel
from app.ui.cache.reuse_words import reuse_words
from app.ui.state.titles import ConversationTitles
from tests.ui.cache.conftest import screenshot
from tests.ui.cache.test_live_store import chat

TITLES = {"c1": "Trip to Lisbon", "c2": "Bread recipe"}


def test_words_for_each_source_and_miss():
    title_of = TITLES.get
    assert reuse_words(Reuse("cache", 1014, 1015, None, "c1"), 1015, session_id="c1") == (
        "reused 1,014 of 1,015 prompt tokens from this chat's earlier reply "
        "(the last shared token is always read again, for a fresh answer)"
    )
    assert reuse_words(
        Reuse("cache", 500, 700, None, "c2"), 900, session_id="c1", title_of=title_of
    ) == "reused 500 of 900 prompt tokens from “Bread recipe” (200 more matched but could not be reused)"
    assert reuse_words(Reuse("session", 300, 300, None, "c1"), 340, session_id="c1") == (
        "reused 300 of 340 prompt tokens still held in memory for this chat"
    )
    assert reuse_words(Reuse("live", 40, 40, None, None), 60) == (
        "reused 40 of 60 prompt tokens shared with another request still held in memory"
    )
    assert reuse_words(Reuse("cache", 64, 64, None, None), 80) == (
        "reused 64 of 80 prompt tokens from a saved conversation"
    )
    for reason, words in (
        ("nothing_shared", "nothing saved started the same way"),
        ("evicted", "removed to make room"),
        ("other_identity", "another model, adapter set or context setting"),
        ("corrupt", "damaged"),
        ("too_short", "too short to be worth loading"),
    ):
        text = reuse_words(Reuse("none", 0, 3, reason, None), 812)  # type: ignore[arg-type]
        assert text.startswith("read all 812 prompt tokens: ") and words in text


class _Snapshots:
    """A model as the panel reads it: only its lock-free snapshot."""

    def __init__(self, *records: ReuseRecord) -> None:
        self.snap = SchedulerSnapshot(recent_reuse=records)

    def snapshot(self) -> SchedulerSnapshot:
        return self.snap


def test_the_panel_lists_requests_newest_first(qtbot: Any) -> None:
    panel = ReusePanel(ConversationTitles(TITLES.get))
    qtbot.addWidget(panel)
    now = time.time()
    older = ReuseRecord("c1", 900, Reuse("none", 0, 0, "nothing_shared", None), "cold", now - 60)
    newer = ReuseRecord("c1", 950, Reuse("cache", 899, 900, None, "c1"), "partial", now - 5)
    other = ReuseRecord("c2", 400, Reuse("session", 380, 380, None, "c2"), "sticky", now - 1)
    panel.refresh({"smol": _Snapshots(older, newer), "tiny": _Snapshots(other)})
    assert panel.table.rowCount() == 3
    cells = [[panel.table.item(r, c).text() for c in range(5)] for r in range(3)]
    assert [row[1:3] for row in cells] == [
        ["Bread recipe", "tiny"], ["Trip to Lisbon", "smol"], ["Trip to Lisbon", "smol"],
    ]  # fmt: skip
    assert panel.words(1) == (
        "reused 899 of 950 prompt tokens from this chat's earlier reply "
        "(the last shared token is always read again, for a fresh answer)"
    )
    assert panel.words(2).startswith("read all 900 prompt tokens: nothing saved")
    assert [row[3] for row in cells] == [
        "hit · held for its chat", "hit · restored from the cache", "miss · read in full",
    ]  # the dashboard's words and counting
    assert panel.summary.text() == (
        "The 3 requests below: hits 67 % of 3 requests · tokens reused: 57 %."
    )
    panel.resize(900, 260)
    screenshot(panel, "cache-reuse-panel")


def test_real_requests_say_what_they_reused(tiny: Any, engine: Any, make_dashboard: Any, qtbot: Any) -> None:
    dash = make_dashboard(engine, session_namer={"conv-1": "Bread questions"}.get)
    tokens = chat(tiny, "How long should bread dough rise before baking?")
    tiny.infer(tokens, session_id="conv-1", response_tokens=3).result(timeout=120)
    assert engine.cache.flush()
    tiny.infer(tokens, response_tokens=3).result(timeout=120)  # the same prompt again
    dash.select_tab(TAB_REUSE)
    dash.sample()
    panel = dash.reuse_panel
    assert panel.table.rowCount() == 2
    assert panel.words(0).startswith("reused ")
    assert "“Bread questions”" in panel.words(0)
    assert panel.words(1).startswith("read all ")
    screenshot(dash, "cache-reuse")
