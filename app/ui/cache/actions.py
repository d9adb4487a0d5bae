"""Cache actions (pin, evict, delete, move, clear, verify, quotas) run off the GUI thread.

Store calls can touch files (moving a blob, verifying every CRC), so each action is a
coroutine on the app's qasync loop whose store work runs on a one-thread ``TaskRunner`` —
actions happen in the order they were asked for — and reports through signals on the GUI
thread (progress crosses with ``call_soon_threadsafe``). A failure becomes ``failed``
(STYLE: nothing dies silently in a thread).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, Signal

from app.cache.store import CacheStore
from app.ui.aio import gui_loop
from app.ui.state import cache_fmt as fmt
from app.ui.tasks import TaskRunner
from app.units import human_bytes

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
Job = Callable[[Progress], str]


class CacheActions(QObject):
    """Queue cache actions on a worker thread; results arrive as signals."""

    started = Signal(str)  # action name
    progressed = Signal(int, int)  # done, total
    finished = Signal(str, str)  # action name, a message for the user
    failed = Signal(str, str)  # action name, error text

    def __init__(self, store: CacheStore, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._store = store
        self.runner = TaskRunner(max_threads=1, parent=self)

    def wait(self, msecs: int = 30_000) -> bool:
        """Block until queued actions are done (used at close and by tests)."""
        return self.runner.wait(msecs)

    def run(self, name: str, job: Job) -> None:
        self.runner.start(self._act(name, job), name=f"cache {name}")

    async def _act(self, name: str, job: Job) -> None:
        loop = gui_loop()

        def progress(done: int, total: int) -> None:  # on the worker thread
            loop.call_soon_threadsafe(self.progressed.emit, done, total)

        def work() -> str:
            loop.call_soon_threadsafe(self.started.emit, name)
            return job(progress)

        try:
            message = await self.runner.call(work)
        except Exception as exc:  # noqa: BLE001 - reported to the user and logged
            log.error("cache action %s failed", name, exc_info=exc)
            self.failed.emit(name, str(exc) or type(exc).__name__)
            return
        self.finished.emit(name, message)

    # -- the actions ----------------------------------------------------------------------

    def _per_key(self, name: str, keys: Sequence[bytes], fn: Callable[[bytes], bool], verb: str) -> None:
        keys = list(keys)

        def job(progress: Progress) -> str:
            n = 0
            for i, key in enumerate(keys):
                progress(i, len(keys))
                n += bool(fn(key))
            progress(len(keys), len(keys))
            return f"{verb} {n} of {len(keys)} saved {_entries(len(keys))}."

        self.run(name, job)

    def pin(self, keys: Sequence[bytes]) -> None:
        self._per_key("pin", keys, self._store.pin, "Pinned")

    def unpin(self, keys: Sequence[bytes]) -> None:
        self._per_key("unpin", keys, self._store.unpin, "Unpinned")

    def evict(self, keys: Sequence[bytes]) -> None:
        self._per_key("evict", keys, self._store.evict, "Evicted")

    def delete(self, keys: Sequence[bytes]) -> None:
        self._per_key("delete", keys, self._store.delete, "Deleted")

    def move(self, keys: Sequence[bytes], tier: str) -> None:
        label = fmt.TIER_LABELS.get(tier, tier)
        self._per_key("move", keys, lambda k: self._store.move(k, tier), f"Moved to {label}:")

    def clear(self, model_id: str | None = None, older_than: float | None = None) -> None:
        def job(progress: Progress) -> str:
            n = self._store.clear(model_id=model_id, older_than=older_than)
            scope = f" of {model_id}" if model_id else ""
            age = f" unused for {older_than / 3600:g} h" if older_than is not None else ""
            return f"Cleared {n} {_entries(n)}{scope}{age} (pinned ones were kept)."

        self.run("clear", job)

    def verify(self) -> None:
        def job(progress: Progress) -> str:
            report = self._store.verify(progress)
            bad = len(report.removed)
            tail = f"; {bad} damaged {_entries(bad)} removed" if bad else ", all intact"
            return f"Checked {report.checked} {_entries(report.checked)}{tail}."

        self.run("verify", job)

    def gc(self) -> None:
        self.run("gc", lambda progress: f"Made room: {self._store.gc()} entries moved or removed.")

    def set_quota(self, tier: str, quota: int) -> None:
        def job(progress: Progress) -> str:
            self._store.set_quota(tier, quota)
            return f"{fmt.TIER_LABELS.get(tier, tier)} limit set to {human_bytes(quota)}."

        self.run("quota", job)


def _entries(n: int) -> str:
    return "entry" if n == 1 else "entries"
