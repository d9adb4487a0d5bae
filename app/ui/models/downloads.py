"""The download manager: owns the list of Hub downloads and runs them on worker threads.

Shaped after qutebrowser's ``browser/downloads.py``: the manager owns the list of frozen
``DownloadItem`` snapshots (``items``, a :class:`~app.ui.state.downloads.DownloadList` keyed
by id) and routes every change through ``_insert`` / ``_replace`` / ``_remove``;
``app.ui.qt_models.download_list`` only translates its notifications into a
``QAbstractListModel``.

Each download is a coroutine on the app's qasync loop (``app.ui.aio``): ``HubClient.download``
blocks, so it runs on the manager's worker threads, and its progress callback hands each
figure to the GUI thread with ``call_soon_threadsafe``, where the list is changed; when the
call returns, the same coroutine records the outcome. Pause sets the download's cancel event
and keeps the partial file; resume starts it again and the client continues from the partial
(also one left by an earlier run, see ``load_partials``).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.models.hub import Downloaded, HubClient, HubError
from app.models.library import quant_from_filename
from app.ui.aio import gui_loop
from app.ui.state.downloads import DownloadItem, DownloadList, DownloadState
from app.ui.tasks import TaskRunner

log = logging.getLogger(__name__)


class DownloadManager(QObject):
    """Owns ``items`` (the downloads) and runs them; views adapt ``items``."""

    download_finished = Signal(object)  # DownloadItem (with path)
    download_failed = Signal(object)  # DownloadItem (with error)

    def __init__(self, hub: HubClient, max_parallel: int = 2,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.hub = hub
        self.items = DownloadList()
        self._ids = itertools.count(1)
        self._cancels: dict[int, threading.Event] = {}
        self._discard_on_stop: set[int] = set()
        self.runner = TaskRunner(max_threads=max_parallel, parent=self)

    # -- queries ----------------------------------------------------------------------------

    @property
    def downloads(self) -> Sequence[DownloadItem]:
        return self.items.items()

    def row_of(self, item_id: int) -> int:
        row = self.items.position(item_id)
        return -1 if row is None else row

    def get(self, item_id: int) -> DownloadItem | None:
        return self.items.get(item_id)

    def find(self, repo_id: str, filename: str) -> DownloadItem | None:
        for d in self.downloads:
            if d.repo_id == repo_id and d.filename == filename:
                return d
        return None

    @property
    def num_active(self) -> int:
        return sum(1 for d in self.downloads if d.is_active)

    # -- actions ----------------------------------------------------------------------------

    def load_partials(self) -> int:
        """List downloads paused in an earlier run (``HubClient.list_partials``)."""
        n = 0
        try:
            partials = self.hub.list_partials()
        except OSError as e:
            log.warning("cannot list paused downloads: %s", e)
            return 0
        for p in partials:
            if self.find(p.repo_id, p.filename) is not None:
                continue
            self._insert(DownloadItem(
                next(self._ids), p.repo_id, p.filename, quant_from_filename(p.filename),
                p.size, p.num_bytes_done, state=DownloadState.PAUSED))
            n += 1
        return n

    def start(self, repo_id: str, filename: str, size: int | None = None) -> int:
        """Queue a download (or resume the listed one for the same file); returns its id."""
        existing = self.find(repo_id, filename)
        if existing is not None:
            if existing.can_resume:
                self.resume(existing.id)
            elif existing.state == DownloadState.FINISHED:
                self._remove(existing.id)
                return self.start(repo_id, filename, size)
            return existing.id
        item = DownloadItem(next(self._ids), repo_id, filename, quant_from_filename(filename),
                            size or 0)
        self._insert(item)
        self._launch(item)
        return item.id

    def pause(self, item_id: int) -> None:
        item = self.get(item_id)
        if item is None or not item.can_pause:
            return
        self._cancels[item_id].set()
        self._replace(replace(item, state=DownloadState.PAUSING, bytes_per_s=0.0))

    def resume(self, item_id: int) -> None:
        item = self.get(item_id)
        if item is None or not item.can_resume:
            return
        item = replace(item, state=DownloadState.QUEUED, error=None)
        self._replace(item)
        self._launch(item)

    def cancel(self, item_id: int) -> None:
        """Stop the download and delete its partial file; the row goes away."""
        item = self.get(item_id)
        if item is None:
            return
        if item.is_active:
            self._discard_on_stop.add(item_id)
            self._cancels[item_id].set()
            self._replace(replace(item, state=DownloadState.PAUSING, bytes_per_s=0.0))
            return
        if item.state != DownloadState.FINISHED:
            self._discard(item)
        self._remove(item_id)

    def clear_finished(self) -> None:
        for d in list(self.downloads):
            if d.state == DownloadState.FINISHED:
                self._remove(d.id)

    def shutdown(self, timeout_ms: int = 10_000) -> None:
        """Pause everything that runs (partials stay for the next start) and wait."""
        for d in self.downloads:
            ev = self._cancels.get(d.id)
            if ev is not None:
                ev.set()
        self.runner.wait(timeout_ms)

    # -- one download (a coroutine; everything but the Hub call runs on the GUI thread) ------

    async def _download(self, item_id: int, repo_id: str, filename: str,
                        cancel: threading.Event) -> None:
        loop = gui_loop()

        def progress(done: int, total: int, rate: float) -> None:  # a worker thread
            loop.call_soon_threadsafe(self._on_job_progressed, item_id, done, total, rate)

        def fetch() -> Downloaded:
            if cancel.is_set():
                raise HubError("paused before it started", "cancelled")
            loop.call_soon_threadsafe(self._on_job_started, item_id)
            return self.hub.download_checked(repo_id, filename, progress=progress, cancel=cancel,
                                             keep_partial=True)

        try:
            result = await self.runner.call(fetch)
        except HubError as e:
            self._on_job_ended(item_id, None, e)
        except Exception as e:  # noqa: BLE001 - a bug, but shown rather than lost
            log.exception("download of %s failed", filename)
            self._on_job_ended(item_id, None, HubError(f"{type(e).__name__}: {e}", "bug"))
        else:
            self._on_job_ended(item_id, result.path, None, verified=result.verified)

    def _on_job_started(self, item_id: int) -> None:
        item = self.get(item_id)
        if item is not None and item.state == DownloadState.QUEUED:
            self._replace(replace(item, state=DownloadState.DOWNLOADING,
                                  started_at=time.monotonic()))

    def _on_job_progressed(self, item_id: int, done: int, total: int, rate: float) -> None:
        item = self.get(item_id)
        if item is None or not item.is_active:
            return
        state = item.state if item.state == DownloadState.PAUSING else DownloadState.DOWNLOADING
        self._replace(replace(item, num_bytes_done=int(done), num_bytes_total=int(total),
                              bytes_per_s=float(rate), state=state))

    def _on_job_ended(self, item_id: int, path: Path | None, error: HubError | None, *,
                      verified: bool = True) -> None:
        self._cancels.pop(item_id, None)
        item = self.get(item_id)
        if item is None:
            return
        if item_id in self._discard_on_stop:
            self._discard_on_stop.discard(item_id)
            self._discard(item)
            self._remove(item_id)
            return
        if error is None:
            assert path is not None
            done = replace(item, state=DownloadState.FINISHED, path=Path(path), bytes_per_s=0.0,
                           num_bytes_done=item.num_bytes_total or item.num_bytes_done, verified=verified)
            self._replace(done)
            self.download_finished.emit(done)
        elif error.kind == "cancelled":
            self._replace(replace(item, state=DownloadState.PAUSED, bytes_per_s=0.0))
        else:
            failed = replace(item, state=DownloadState.FAILED, error=error.message,
                             bytes_per_s=0.0)
            if error.kind == "checksum_mismatch":  # the partial is gone: start from zero
                failed = replace(failed, num_bytes_done=0)
            self._replace(failed)
            self.download_failed.emit(failed)

    # -- the only places that change the list ---------------------------------------------------

    def _insert(self, item: DownloadItem) -> None:
        self.items.append(item)

    def _replace(self, item: DownloadItem) -> None:
        self.items.replace(item)

    def _remove(self, item_id: int) -> None:
        self.items.remove(item_id)

    # -- helpers ----------------------------------------------------------------------------

    def _launch(self, item: DownloadItem) -> None:
        cancel = threading.Event()
        self._cancels[item.id] = cancel
        self.runner.start(self._download(item.id, item.repo_id, item.filename, cancel),
                          name=f"download {item.filename}")

    def _discard(self, item: DownloadItem) -> None:
        try:
            self.hub.discard_partial(item.repo_id, item.filename)
        except (HubError, OSError) as e:
            log.warning("could not delete the partial of %s: %s", item.filename, e)
