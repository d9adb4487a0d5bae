"""Keep the app alive on PySide6 6.12.0 under Python 3.11.

PySide6 6.12.0 returns ``None`` (from every void method: ``QLabel.setText``,
``QTimer.start`` …) and ``True`` (from ``SignalInstance.emit``) without taking a reference.
Python 3.12+ makes these singletons immortal, so the missing reference is harmless there;
on 3.11 each call drops one reference, and after enough calls the interpreter aborts with
"none_dealloc: deallocating None" (or "bool_dealloc"). We give ``None``, ``True`` and
``False`` a huge reference count once, which is what 3.12 does for them. The proper fix is a
PySide6 release without the bug (6.11.x is not affected); this guard is a no-op on 3.12+.
"""

from __future__ import annotations

import ctypes
import sys

_HUGE = 1 << 40


def immortalize_singletons() -> bool:
    """Give None/True/False a reference count no leak can exhaust. Returns True if applied."""
    if sys.version_info >= (3, 12):
        return False
    for obj in (None, True, False):
        # ob_refcnt is the first field of every PyObject; we hold the GIL here.
        refcnt = ctypes.c_ssize_t.from_address(id(obj))
        if refcnt.value < _HUGE:
            refcnt.value += _HUGE
    return True
