"""``emit``: Signal emission that survives PySide6 6.12.0's reference leak on ``True``.

PySide6 6.12.0's ``SignalInstance.emit`` returns ``True`` without taking a reference, so
every emission from Python drops one reference to ``True``. On Python 3.11 (where ``True``
is not immortal) a few thousand streamed frames later the interpreter aborts with
"bool_dealloc: deallocating True or False". We measure the leak once at import and, only
when it is there, give the reference back after each emission. Every Python-side emit in
``app.ui`` goes through :func:`emit`.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from PySide6.QtCore import QObject, Signal

_PROBES = 16


class _Probe(QObject):
    fired = Signal()


def _measure_leak() -> bool:
    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(_PROBES):
        probe.fired.emit()
    lost = before - sys.getrefcount(True)
    for _ in range(max(0, lost)):
        _give_back()
    return lost >= _PROBES // 2


def _give_back() -> None:
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(True))


EMIT_LEAKS_TRUE = _measure_leak()


def emit(signal: Any, *args: Any) -> None:
    """``signal.emit(*args)``, compensating the PySide6 leak when it was detected."""
    signal.emit(*args)
    if EMIT_LEAKS_TRUE:
        _give_back()
