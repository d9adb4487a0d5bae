"""Python's cyclic garbage collector runs on the GUI thread only (``app.ui.gui_gc``): a cycle
holding a Qt object, dropped on another thread that then allocates past the collector's
threshold, is freed by the GUI thread's timer, never on that thread (where ``~QObject`` could
wait for the GIL the GUI thread holds while it waits for Qt's lock: a hang)."""

from __future__ import annotations

import gc
import threading
from typing import Any

from PySide6.QtCore import QObject

from app.ui import gui_gc


def test_a_cycle_holding_a_qt_object_is_freed_on_the_gui_thread(qtbot: Any, qapp: Any) -> None:
    collector = gui_gc.install(qapp)
    assert gui_gc.install(qapp) is collector and not gc.isenabled()
    gc.collect()
    freed_on: list[int] = []
    kept: list[Any] = []
    obj = QObject()  # a GUI-thread object, like a window's
    obj.destroyed.connect(lambda *_: freed_on.append(threading.get_ident()))
    cycle: list[Any] = [obj]
    cycle.append(cycle)
    handed_over = [cycle]
    del obj, cycle

    def drop_the_cycle_then_allocate() -> None:
        handed_over.clear()  # the last reference to the cycle goes on this thread
        kept.extend([] for _ in range(3 * gc.get_threshold()[0]))  # past the first threshold, and kept
        assert not freed_on  # automatic collection would run here, on this thread

    worker = threading.Thread(target=drop_the_cycle_then_allocate)
    worker.start()
    worker.join()
    assert not freed_on
    qtbot.waitUntil(lambda: bool(freed_on), timeout=5000)
    assert freed_on == [threading.get_ident()]


def test_only_the_generations_past_their_thresholds_are_collected(monkeypatch: Any) -> None:
    collected: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: collected.append(generation) or 0)
    monkeypatch.setattr(gc, "get_threshold", lambda: (700, 10, 10))
    for counts, want in [((5, 0, 0), []), ((701, 3, 0), [0]), ((701, 11, 2), [0, 1]), ((701, 11, 11), [0, 1, 2]),
                         ((0, 11, 11), [])]:  # fmt: skip
        collected.clear()
        monkeypatch.setattr(gc, "get_count", lambda c=counts: c)
        gui_gc.collect_due()
        assert collected == want, counts
