"""Blocking calls (engine loads, adapter changes, Hub queries, library scans) off the GUI
thread, as coroutines on the app's qasync loop (``app.ui.aio``).

``await runner.call(fn)`` runs ``fn`` on the runner's own threads and resumes on the GUI
thread; ``runner.run(fn, on_done, on_error)`` is the same for callback-style callers and
calls exactly one of the two back on the GUI thread. A worker exception is never lost: it
reaches ``on_error`` (or, for ``call``, the awaiting coroutine; unhandled, the log). When the
runner's owner is destroyed its pending tasks are cancelled, so no callback reaches a
deleted widget.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Signal

from app.ui.aio import spawn

log = logging.getLogger(__name__)

T = TypeVar("T")
ErrorCallback = Callable[[Exception], None]


class TaskRunner(QObject):
    """A few worker threads whose results come back to coroutines on the GUI thread.

    ``max_threads=1`` runs calls one at a time, in the order they were made (the Models
    view relies on it: a scale change never overtakes an attach).
    """

    idle_changed = Signal(bool)

    def __init__(self, max_threads: int = 2, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_threads, thread_name_prefix="hearth-task"
        )
        self._tasks: set[asyncio.Task[object]] = set()
        self._running: set[concurrent.futures.Future[Any]] = set()  # Future is invariant in T
        self._alive = [True]
        # NOTE: the slot captures plain objects, not ``self``: it runs as the QObject dies.
        self.destroyed.connect(_canceller(self._tasks, self._alive))

    @property
    def num_pending(self) -> int:
        """Tasks started and not yet finished (their callbacks included)."""
        return len(self._tasks)

    async def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on a worker thread; resumes on the GUI thread with its result."""
        future = self._executor.submit(fn)
        self._running.add(future)
        future.add_done_callback(self._running.discard)
        return await asyncio.wrap_future(future)

    def start(self, coro: Coroutine[object, object, T], name: str | None = None) -> asyncio.Task[T]:
        """Run ``coro`` as one of this runner's tasks (counted by ``num_pending``)."""
        was_idle = not self._tasks
        task = spawn(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done)
        if was_idle:
            self.idle_changed.emit(False)
        return task

    def run(
        self,
        fn: Callable[[], T],
        on_done: Callable[[T], None] | None = None,
        on_error: ErrorCallback | None = None,
    ) -> asyncio.Task[None]:
        """Callback style: ``on_done(result)`` or ``on_error(exc)`` on the GUI thread."""

        async def job() -> None:
            try:
                result = await self.call(fn)
            except Exception as exc:  # noqa: BLE001 - delivered, not swallowed
                if on_error is None:
                    raise
                on_error(exc)
            else:
                if on_done is not None:
                    on_done(result)

        return self.start(job(), name=getattr(fn, "__name__", None))

    def wait(self, timeout_ms: int = -1) -> bool:
        """Block until every call started on a worker thread has returned (their results
        are still delivered later, on the GUI loop)."""
        timeout = None if timeout_ms < 0 else timeout_ms / 1000
        _done, pending = concurrent.futures.wait(list(self._running), timeout=timeout)
        return not pending

    def _on_task_done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not self._tasks and self._alive:
            self.idle_changed.emit(True)


def _canceller(tasks: set[asyncio.Task[object]], alive: list[bool]) -> Callable[..., None]:
    def cancel(*_args: object) -> None:
        alive.clear()
        for task in list(tasks):
            task.cancel()

    return cancel
