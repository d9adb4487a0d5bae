"""Settings › Memory caps Hearth's memory (issue 54): the cap is kept across a restart, the
engine's budget follows it at once (a load past it is refused with the numbers), and back to
Automatic the load fits."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.engine import ModelConfig
from app.engine.memory.memory_fit import DoesNotFit
from tests.ui.screens import screenshot

GiB = 1 << 30


def _memory_tab(dialog):
    for i in range(dialog.tabs.count()):
        if dialog.tabs.tabText(i) == "Memory":
            bar = dialog.tabs.tabBar()
            QTest.mouseClick(bar, Qt.MouseButton.LeftButton, pos=bar.tabRect(i).center())
            return dialog.tabs.widget(i)
    raise AssertionError("no Memory tab")


def test_the_memory_cap_is_kept_and_holds(make_window, qtbot, tiny_model_path):
    window = make_window()
    dialog = window.app_actions.open_settings()
    qtbot.waitExposed(dialog)
    page = _memory_tab(dialog)
    spin = page.cap
    assert spin.text() == "Automatic" and window.engine.memory.cap_setting is None
    spin.setFocus()
    spin.lineEdit().selectAll()
    QTest.keyClicks(spin, "0.1")
    QTest.keyClick(spin, Qt.Key.Key_Return)
    assert window.engine.memory.cap_setting == int(0.1 * GiB)
    assert page.now.text().startswith("Now: 102.4 MiB cap")
    screenshot(dialog, "settings-memory")
    big = ModelConfig(path=str(tiny_model_path), n_ctx=2048, n_seq_max=4, n_threads=2, cache_enabled=False)
    try:
        window.engine.load_model("capped", big)
        raise AssertionError("a load past the cap was not refused")
    except DoesNotFit as exc:
        assert "Hearth's memory cap of 102.4 MiB leaves" in str(exc)
    dialog.close()

    again = make_window()  # a restart on the same data: the cap is kept
    assert again.engine.memory.cap_setting == int(0.1 * GiB)
    dialog = again.app_actions.open_settings()
    page = _memory_tab(dialog)
    assert page.cap.value() == 0.1
    page.cap.setFocus()
    page.cap.lineEdit().selectAll()
    QTest.keyClick(page.cap, Qt.Key.Key_Delete)
    QTest.keyClicks(page.cap, "0")
    QTest.keyClick(page.cap, Qt.Key.Key_Return)
    assert page.cap.text() == "Automatic" and again.engine.memory.cap_setting is None
    again.engine.load_model("fits", big)
    dialog.close()


def test_a_shortage_is_said_in_the_banner(make_window, qtbot, tmp_path, monkeypatch):
    """Another app takes the memory: the watch lets the cache's buffers and RAM rows go and the
    window says so (here the look the watch thread makes every 2 s is made at once)."""
    from app.engine.memory.memory_budget import LOW_WATER
    from app.engine.memory.memory_fit import MEMINFO_ENV

    window = make_window()
    engine = window.engine
    qtbot.waitUntil(lambda: bool(engine.list_models()), timeout=30_000)
    store = engine.cache
    store.memory.reserve(4 << 20)  # (what a load's restores keep ready)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: {4 << 20} kB\nMemAvailable: {LOW_WATER // 2048} kB\n")
    monkeypatch.setenv(MEMINFO_ENV, str(meminfo))
    assert engine.memory.relieve(store) > 0
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=5000)
    assert window.banner.text().startswith("Memory short: ")
    assert window.banner.kind() == "info"
    screenshot(window, "memory-short-banner")
