"""Python's cyclic garbage collector runs on the GUI thread only.

CPython runs a collection on whichever thread's allocation passes the first threshold. When
a bridge or engine thread collects a cycle that holds a Qt object (a closure over a widget,
a window that was closed), ``~QObject`` runs on that thread: it takes Qt's signal-slot lock
for the object and then asks Shiboken for a Python override, which needs the GIL. If the
GUI thread holds the GIL and waits for the same lock (``QObject::connect`` while it builds a
widget), neither goes on and the app hangs. NOTE: seen in ``make test`` on 2026-12-03: a
model bridge's thread, in ``EngineBridge._poll_status``, collected an earlier test's window
while ``tests/ui/test_type_ahead.py`` built a new one.

So automatic collection is turned off and a GUI-thread timer runs the same generational
collections: a generation is collected when its count passes its threshold, as CPython
would, only later (at most ``INTERVAL_MS``) and always here; ``create_window`` also
collects what building the window left, before its event loop runs. NOTE: CPython also
puts a full collection off until a quarter of the oldest generation is new since the last
one, which Python does not expose; this may collect the oldest generation more often. B6
with 4 chats streaming had 2 full collections either way (47-64 ms here, 48-56 ms before;
longest GUI stall 45.9-52.9 ms here, 41.1-73.6 ms before, 3 paired runs, 2026-12-03).
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

INTERVAL_MS = 20


def collect_due() -> int:
    """Collect the generations whose counts passed their thresholds (the youngest first, an
    older one only when the younger one's did too), on the calling thread; returns the
    objects found unreachable."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    found = 0
    for generation in range(3):
        if thresholds[generation] <= 0 or counts[generation] <= thresholds[generation]:
            break
        found = gc.collect(generation)
    return found


class GuiGarbageCollector(QObject):
    """The timer that collects on the GUI thread (``install``)."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self.setObjectName("guiGarbageCollector")
        self._timer = QTimer(self)
        self._timer.setInterval(INTERVAL_MS)
        self._timer.timeout.connect(collect_due)
        self._timer.start()


def install(app: QCoreApplication) -> GuiGarbageCollector:
    """Turn automatic collection off and collect on ``app``'s thread from now on; once per
    application (the same collector again after that)."""
    collector = app.findChild(GuiGarbageCollector, "guiGarbageCollector")
    if collector is None:
        collector = GuiGarbageCollector(app)
    gc.disable()
    return collector
