"""A Hub download as the UI sees it, without Qt: the frozen ``DownloadItem`` snapshot, its
state, the observable list of them (``DownloadList``, keyed by id) and the status line under
one (``describe``). ``app.ui.models.downloads.DownloadManager`` owns the list and runs the
downloads; ``app.ui.qt_models.download_list`` adapts the list for Qt views.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from app.ui.state.format import human_duration, human_rate
from app.ui.state.observable import ObservableList
from app.units import human_bytes


class DownloadState(StrEnum):
    QUEUED = "queued"
    DOWNLOADING = "downloading"
    PAUSING = "pausing"
    PAUSED = "paused"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class DownloadItem:
    """A snapshot of one download; the manager replaces it on every change."""

    id: int
    repo_id: str
    filename: str
    quant: str | None
    num_bytes_total: int
    num_bytes_done: int = 0
    bytes_per_s: float = 0.0
    state: DownloadState = DownloadState.QUEUED
    error: str | None = None
    path: Path | None = None  # the installed file once finished
    verified: bool = True  # False: the Hub gave no checksum, only the size was checked
    started_at: float = 0.0

    @property
    def fraction(self) -> float:
        return self.num_bytes_done / self.num_bytes_total if self.num_bytes_total else 0.0

    @property
    def eta_s(self) -> float | None:
        if self.state != DownloadState.DOWNLOADING or self.bytes_per_s <= 0:
            return None
        return max(0.0, (self.num_bytes_total - self.num_bytes_done) / self.bytes_per_s)

    @property
    def is_active(self) -> bool:
        return self.state in (DownloadState.QUEUED, DownloadState.DOWNLOADING,
                              DownloadState.PAUSING)

    @property
    def can_pause(self) -> bool:
        return self.state in (DownloadState.QUEUED, DownloadState.DOWNLOADING)

    @property
    def can_resume(self) -> bool:
        return self.state in (DownloadState.PAUSED, DownloadState.FAILED)


class DownloadList(ObservableList[DownloadItem, int]):
    """The downloads in the order they were started."""

    def __init__(self) -> None:
        super().__init__(_item_id)

    def append(self, item: DownloadItem) -> None:
        self._insert(len(self), [item])

    def replace(self, item: DownloadItem) -> None:
        row = self.position(item.id)
        assert row is not None, item
        self._replace(row, item)

    def remove(self, item_id: int) -> None:
        row = self.position(item_id)
        if row is not None:
            self._remove(row, row)


def _item_id(item: DownloadItem) -> int:
    return item.id


def describe(item: DownloadItem) -> str:
    """The status line under a download: ``"2.1 MiB of 5.2 MiB · 1.3 MiB/s · 3 s left"``."""
    sizes = f"{human_bytes(item.num_bytes_done)} of {human_bytes(item.num_bytes_total)}"
    if item.state == DownloadState.DOWNLOADING:
        return f"{sizes} · {human_rate(item.bytes_per_s)} · {human_duration(item.eta_s)} left"
    if item.state == DownloadState.QUEUED:
        return f"Waiting… {sizes}"
    if item.state == DownloadState.PAUSING:
        return f"Stopping… {sizes}"
    if item.state == DownloadState.PAUSED:
        return f"Paused · {sizes}"
    if item.state == DownloadState.FINISHED and not item.verified:
        return (f"Done · {human_bytes(item.num_bytes_total)} · added to the library, but NOT verified: "
                "the Hub lists no checksum for this file")
    if item.state == DownloadState.FINISHED:
        return f"Done · {human_bytes(item.num_bytes_total)} · verified and added to the library"
    return f"Failed · {item.error or 'unknown error'}"
