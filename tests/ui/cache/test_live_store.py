"""The dashboard on a real store and the tiny model: rows, actions, tiers, counters, tree."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from PySide6.QtCore import Qt

from app.cache.policy import DESKTOP_POLICY
from app.ui.cache.dashboard import TAB_SPACE, TAB_TREE
from app.ui.qt_models.cache_rows import COL_CONVERSATION, COL_PINNED, COL_PREVIEW, KEY_ROLE
from app.ui.state.previews import NO_PREVIEW
from tests.ui.cache.conftest import screenshot, tiny_config

SEEN = 10_000
"""ms to wait for the dashboard to show a change: a hang guard, not a measurement. The cache's
writer may hold a save back for up to ``WRITE_HOLD_MAX_S`` (1 s) while a request waits for its
first token, and a loaded machine adds to that; a change that never shows still fails."""

SYSTEM = (
    "You are Hearth, a friendly assistant running on this computer. You answer questions "
    "about cooking, baking and bread clearly and briefly."
)


def chat(model: Any, user: str, system: str = SYSTEM) -> list[int]:
    return model.apply_chat_template({"messages": [{"role": "user", "content": user}], "system": system})


def rows_shown(dash: Any) -> int:
    return dash.rows_panel.proxy.rowCount()


def select_first(dash: Any, qtbot: Any) -> bytes:
    table = dash.rows_panel.table
    table.selectRow(0)
    keys = dash.selected_keys()
    assert len(keys) == 1
    return keys[0]


def test_chat_turn_appears_then_eviction_removes_it(tiny: Any, engine: Any, make_dashboard: Any, qtbot: Any) -> None:
    dash = make_dashboard(engine)
    assert rows_shown(dash) == 0
    tokens = chat(tiny, "How long should bread dough rise before baking?")
    assert len(tokens) >= DESKTOP_POLICY.min_tokens
    stats = tiny.infer(tokens, session_id="conv-1", response_tokens=3).result(timeout=120)
    assert stats.finish_key is not None
    t0 = time.perf_counter()
    qtbot.waitUntil(lambda: rows_shown(dash) == 1, timeout=SEEN)
    print(f"\nrow visible {1000 * (time.perf_counter() - t0):.0f} ms after the turn finished")
    index = dash.rows_panel.proxy.index(0, 0)
    assert index.data(KEY_ROLE) == stats.finish_key
    assert index.data() == "tiny"
    preview = dash.rows_panel.proxy.index(0, COL_PREVIEW).data()
    assert preview and preview != NO_PREVIEW  # detokenized with the loaded model
    assert "User: How long should bread dough rise" in preview

    key = select_first(dash, qtbot)
    with qtbot.waitSignal(dash.action_finished, timeout=10_000) as done:
        dash.rows_panel.evict_button.click()
    assert done.args[0] == "evict"
    qtbot.waitUntil(lambda: rows_shown(dash) == 0, timeout=SEEN)
    assert engine.cache.get(key) is None
    dash.sample()
    assert dash.stats_panel.values["evictions"].text() == "1"


def test_pin_survives_gc_and_tiers_and_counters_follow(tiny: Any, engine: Any, make_dashboard: Any, qtbot: Any) -> None:
    dash = make_dashboard(engine)
    dash.select_tab(TAB_SPACE)
    disk = dash.tiers_panel.rows["disk"]
    assert disk.bar.value() == 0
    assert dash.stats_panel.values["saves_finish"].text() == "0"
    for user in ("What flour is best for a crusty loaf of bread?", "How do I keep a sourdough starter alive?"):
        tiny.prefill_only(chat(tiny, user))
    qtbot.waitUntil(lambda: rows_shown(dash) == 2, timeout=5000)
    dash.sample()
    used, quota = engine.cache.tier_usage()["disk"]
    assert used > 0
    assert dash.stats_panel.values["saves_finish"].text() == "2"
    # the second chat reuses the template head the first one saved (#13): one miss, one hit
    assert dash.stats_panel.values["misses"].text() == "1"
    assert disk.usage.text().startswith(f"{used / 1024:.1f} KiB of 20.0 GiB")
    screenshot(dash, "cache-space-and-savings")

    # pin the entry used least recently-wise, then shrink the disk quota to nothing: gc
    # deletes everything except the pin
    dash.select_tab(0)
    dash.rows_panel.table.sortByColumn(COL_PINNED, Qt.SortOrder.AscendingOrder)
    key = select_first(dash, qtbot)
    with qtbot.waitSignal(dash.action_finished, timeout=10_000):
        dash.rows_panel.pin_button.click()
    qtbot.waitUntil(lambda: engine.cache.get(key).pinned, timeout=SEEN)
    qtbot.waitUntil(lambda: "pinned" in dash.rows_panel.proxy.index(
        dash.rows_panel.proxy.mapFromSource(dash.rows_model.index(dash.state.position(key), 0)).row(),
        COL_PINNED).data(), timeout=SEEN)  # fmt: skip

    disk.unit.setCurrentText("MiB")
    disk.quota.setValue(0.0)
    with qtbot.waitSignal(dash.action_finished, timeout=10_000) as done:
        disk.apply.click()
    assert done.args[0] == "quota"
    assert engine.cache.tier_usage()["disk"][1] == 0
    with qtbot.waitSignal(dash.action_finished, timeout=10_000):
        dash.cache_actions.gc()
    qtbot.waitUntil(lambda: rows_shown(dash) == 1, timeout=SEEN)
    assert dash.rows_panel.proxy.index(0, 0).data(KEY_ROLE) == key
    dash.sample()
    assert dash.stats_panel.values["evictions"].text() == "1"
    assert disk.bar.value() == 1000  # the pin alone is over the zero quota
    assert "0 B" in disk.usage.text().split(" of ")[1]


def _two_chats_sharing_a_prompt(engine: Any, tiny_model_path: Any) -> tuple[Any, Any, Any, int]:
    # no cold saves, so each request leaves exactly one row and the shape is exact
    policy = replace(DESKTOP_POLICY, cold_min_tokens=4096)
    model = engine.load_model("tiny", tiny_config(tiny_model_path, policy))
    a = chat(model, "How do I bake a rye bread at home?")
    b = chat(model, "Which cheese goes with pears?")
    shared = a[: next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)]
    assert len(shared) >= DESKTOP_POLICY.min_tokens
    first = model.prefill_only(shared)
    assert engine.cache.flush()  # published before the next lookup
    ra = model.infer(a, session_id="rye", response_tokens=2).result(timeout=120)
    rb = model.infer(b, session_id="cheese", response_tokens=2).result(timeout=120)
    assert ra.cache_hit_kind == rb.cache_hit_kind == "partial"
    return first, ra, rb, len(shared)


TITLES = {"rye": "Baking rye bread", "cheese": "Cheese and pears"}


def test_the_tree_shows_a_shared_prompt_once_with_its_chats_below(engine: Any, tiny_model_path: Any, make_dashboard: Any, qtbot: Any) -> None:
    """Issue #13 item 6: a system prompt shared by two chats is one line with the two chats
    under it; lines read as words, never as template markup."""
    dash = make_dashboard(engine, session_namer=TITLES.get)
    first, ra, rb, n_shared = _two_chats_sharing_a_prompt(engine, tiny_model_path)
    qtbot.waitUntil(lambda: rows_shown(dash) == 3, timeout=5000)
    dash.select_tab(TAB_TREE)
    tree = dash.tree_panel
    assert tree.current_model() == "tiny"
    qtbot.waitUntil(lambda: tree.model.rowCount() == 1, timeout=5000)
    top = tree.model.index(0, 0)
    assert top.data(KEY_ROLE) == first.finish_key
    # The text shows once the dashboard has seen the model (loaded after it opened).
    qtbot.waitUntil(lambda: "System: You are Hearth" in top.data(), timeout=5000)
    assert tree.model.rowCount(top) == 2
    children = {tree.model.index(i, 0, top).data(KEY_ROLE) for i in range(2)}
    assert children == {ra.finish_key, rb.finish_key}
    def labels() -> list[str]:
        return [tree.model.index(i, 0, top).data() for i in range(2)]

    qtbot.waitUntil(lambda: any("rye bread at home" in label for label in labels()), timeout=5000)
    assert all("… " in label and "<|" not in label for label in labels())
    assert tree.model.index(0, 2, top).data().startswith("+")
    child = next(tree.model.index(i, 0, top) for i in range(2)
                 if tree.model.index(i, 0, top).data(KEY_ROLE) == ra.finish_key)  # fmt: skip
    tree.view.setCurrentIndex(child)
    detail = tree.detail.toPlainText()
    assert f"continues the line above, which holds tokens 0–{n_shared:,}" in detail
    assert "User:\nHow do I bake a rye bread at home?" in detail and "<|" not in detail
    screenshot(dash, "cache-prefix-tree")
    dash.select_tab(0)
    dash.rows_panel.table.selectRow(0)
    screenshot(dash, "cache-table")


def test_rows_and_tree_lines_are_named_by_their_chats(engine: Any, tiny_model_path: Any, make_dashboard: Any, qtbot: Any) -> None:
    dash = make_dashboard(engine, session_namer=TITLES.get)
    _first, ra, _rb, _n = _two_chats_sharing_a_prompt(engine, tiny_model_path)
    qtbot.waitUntil(lambda: rows_shown(dash) == 3, timeout=5000)
    shown = {dash.rows_panel.proxy.index(i, COL_CONVERSATION).data() for i in range(3)}
    assert shown == {"", "Baking rye bread", "Cheese and pears"}
    dash.select_tab(TAB_TREE)
    tree = dash.tree_panel
    qtbot.waitUntil(lambda: tree.model.rowCount() == 1, timeout=5000)
    top = tree.model.index(0, 0)
    assert top.data().startswith("Shared by 2 chats · ")
    qtbot.waitUntil(lambda: all("· … " in tree.model.index(i, 0, top).data() for i in range(2)),
                    timeout=5000)  # the text shows once the dashboard has seen the model
    labels = sorted(tree.model.index(i, 0, top).data() for i in range(2))
    assert labels[0].startswith("“Baking rye bread” · … ")
    assert labels[1].startswith("“Cheese and pears” · … ")
    tree.view.setCurrentIndex(top)
    assert "Shared by 2 conversations: “" in tree.detail.toPlainText()


def test_move_verify_and_clear_run_off_the_gui_thread(tiny: Any, engine: Any, make_dashboard: Any, qtbot: Any) -> None:
    dash = make_dashboard(engine)
    for user in ("Is rye flour gluten free?", "How hot should the oven be for baguettes?"):
        tiny.prefill_only(chat(tiny, user))
    qtbot.waitUntil(lambda: rows_shown(dash) == 2, timeout=5000)
    key = select_first(dash, qtbot)
    with qtbot.waitSignal(dash.action_finished, timeout=10_000) as done:
        dash.cache_actions.move([key], "ram")
    assert done.args == ["move", "Moved to RAM: 1 of 1 saved entry."]
    qtbot.waitUntil(lambda: dash.state.get(key).tier == "ram", timeout=SEEN)
    dash.sample()
    assert dash.tiers_panel.rows["ram"].bar.value() > 0

    # damage the other (disk) entry: verify finds it, removes it and counts it
    other = next(r for r in engine.cache.rows() if r.key != key)
    with open(other.location, "r+b") as f:
        f.seek(-8, 2)
        f.write(b"\xff" * 8)
    progress: list[tuple[int, int]] = []
    dash.cache_actions.progressed.connect(lambda d, t: progress.append((d, t)))
    with qtbot.waitSignal(dash.action_finished, timeout=10_000) as done:
        dash.rows_panel.verify_button.click()
    assert done.args[1] == "Checked 2 entries; 1 damaged entry removed."
    assert progress[-1] == (2, 2)
    qtbot.waitUntil(lambda: rows_shown(dash) == 1, timeout=SEEN)
    assert dash.stats_panel.values["corrupt_files"].text() == "1"
    assert dash.action_status.text() == done.args[1]

    with qtbot.waitSignal(dash.action_finished, timeout=10_000) as done:
        dash.cache_actions.clear(model_id="tiny")
    assert done.args[1].startswith("Cleared 1 entry of tiny")
    qtbot.waitUntil(lambda: rows_shown(dash) == 0, timeout=SEEN)
