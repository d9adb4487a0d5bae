"""The app's asyncio loop: qasync's, on the GUI thread (docs/design.md §5), and how work reaches it.

Background work in the UI — Hub searches and file listings, downloads, model loads and
adapter changes, library scans — is written as coroutines that ``await`` a blocking call
run on a worker thread (:func:`run_blocking`); everything before and after the ``await``
runs on the GUI thread, so it may touch widgets. :func:`spawn` starts one; an exception it
does not handle is logged with its traceback, never lost (STYLE §7).

``main()`` runs this loop (``gui_loop().run_until_complete``). Under pytest-qt nobody runs it: its
callbacks are Qt timers and queued signals, so they fire whenever Qt processes events
(``qtbot.wait*``), which is why no code here asks for ``asyncio.get_running_loop()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import TypeVar

import qasync
from PySide6.QtWidgets import QApplication

log = logging.getLogger(__name__)

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None


def gui_loop() -> asyncio.AbstractEventLoop:
    """The qasync loop of this QApplication (made, and made current, on first use)."""
    global _loop
    if _loop is None or _loop.is_closed():
        app = QApplication.instance()
        assert isinstance(app, QApplication), "create the QApplication first"
        _loop = qasync.QEventLoop(app)
        asyncio.set_event_loop(_loop)
    return _loop


def spawn(coro: Coroutine[object, object, T], *, name: str | None = None) -> asyncio.Task[T]:
    """Start ``coro`` on the GUI loop; an exception it raises is logged, not swallowed."""
    task = gui_loop().create_task(coro, name=name)
    task.add_done_callback(_report)
    return task


async def run_blocking(executor: Executor, fn: Callable[[], T]) -> T:
    """``fn()`` on ``executor``'s thread; the caller resumes on the GUI thread."""
    return await asyncio.wrap_future(executor.submit(fn), loop=gui_loop())


def _report(task: asyncio.Task[object]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("background task %s failed", task.get_name(), exc_info=exc)

