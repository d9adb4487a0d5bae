"""Run blocking calls (engine loads, adapter changes, Hub queries) off the GUI thread.

``TaskRunner.run(fn, on_done, on_error)`` executes ``fn`` on a private ``QThreadPool`` and
calls exactly one of the callbacks back on the GUI thread through a queued signal. A worker
exception is never lost: it reaches ``on_error`` (or the log when there is none).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

logger = logging.getLogger(__name__)

DoneCallback = Callable[[Any], None]
ErrorCallback = Callable[[Exception], None]


class _Job(QRunnable):
    def __init__(self, runner: TaskRunner, task_id: int, fn: Callable[[], Any]) -> None:
        super().__init__()
        self.setAutoDelete(True)
        self._runner = runner
        self._task_id = task_id
        self._fn = fn

    def run(self) -> None:
        try:
            result = self._fn()
        except Exception as e:  # noqa: BLE001 - delivered to the GUI thread, not swallowed
            self._runner._finished.emit(self._task_id, None, e)
        else:
            self._runner._finished.emit(self._task_id, result, None)


class TaskRunner(QObject):
    """A small thread pool whose results come back as GUI-thread callbacks."""

    _finished = Signal(int, object, object)  # task id, result, exception
    idle_changed = Signal(bool)

    def __init__(self, max_threads: int = 2, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(max_threads)
        self._ids = itertools.count(1)
        self._callbacks: dict[int, tuple[DoneCallback | None, ErrorCallback | None]] = {}
        self._finished.connect(self._on_finished)

    @property
    def num_pending(self) -> int:
        return len(self._callbacks)

    def run(
        self,
        fn: Callable[[], Any],
        on_done: DoneCallback | None = None,
        on_error: ErrorCallback | None = None,
    ) -> int:
        task_id = next(self._ids)
        was_idle = not self._callbacks
        self._callbacks[task_id] = (on_done, on_error)
        self._pool.start(_Job(self, task_id, fn))
        if was_idle:
            self.idle_changed.emit(False)
        return task_id

    def wait(self, timeout_ms: int = -1) -> bool:
        """Block until every started task has returned (results are still delivered later)."""
        return bool(self._pool.waitForDone(timeout_ms))

    def _on_finished(self, task_id: int, result: Any, error: Exception | None) -> None:
        on_done, on_error = self._callbacks.pop(task_id, (None, None))
        try:
            if error is not None:
                if on_error is not None:
                    on_error(error)
                else:
                    logger.error("background task failed", exc_info=error)
            elif on_done is not None:
                on_done(result)
        finally:
            if not self._callbacks:
                self.idle_changed.emit(True)
