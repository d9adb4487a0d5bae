"""A table of server requests (``RequestRecord``s): the live ones, or the log, newest first."""

from __future__ import annotations

import time

from PySide6.QtCore import QModelIndex, Qt

from app.server.activity import RequestRecord
from app.ui.qt_models.flat_table import FlatTableModel, Index

STATE_WORDS = {"running": "running", "done": "done", "cancelled": "client left", "error": "failed"}


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


class RequestTableModel(FlatTableModel):
    columns = ("Time", "Endpoint", "Client", "State", "Prompt", "Cached", "Reply", "First token ms", "Total ms")

    def __init__(self, capacity: int = 200) -> None:
        super().__init__()
        self.records: list[RequestRecord] = []
        self.capacity = capacity

    def num_rows(self) -> int:
        return len(self.records)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self.records):
            return None
        r = self.records[index.row()]
        if role == Qt.ItemDataRole.ToolTipRole:
            return r.error or f"{r.id} · model {r.model}"
        if role == Qt.ItemDataRole.TextAlignmentRole and index.column() >= 4:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        return (
            time.strftime("%H:%M:%S", time.localtime(r.started_at)),
            r.endpoint + (" (stream)" if r.stream else ""),
            r.client,
            STATE_WORDS.get(r.state, r.state) if r.state != "error" else f"failed ({r.status})",
            f"{r.prompt_tokens:,}" if r.prompt_tokens else "",
            f"{r.cached_tokens:,}" if r.prompt_tokens else "",
            f"{r.completion_tokens:,}" if r.completion_tokens else "",
            _ms(r.ttft_ms),
            _ms(r.duration_ms),
        )[index.column()]

    def upsert(self, record: RequestRecord) -> None:
        """Replace the row with the same id, or put a new one on top."""
        for row, old in enumerate(self.records):
            if old.id == record.id:
                self.records[row] = record
                self.dataChanged.emit(self.index(row, 0), self.index(row, len(self.columns) - 1))
                return
        self.beginInsertRows(QModelIndex(), 0, 0)
        self.records.insert(0, record)
        self.endInsertRows()
        if len(self.records) > self.capacity:
            last = len(self.records) - 1
            self.beginRemoveRows(QModelIndex(), last, last)
            self.records.pop()
            self.endRemoveRows()

    def remove(self, request_id: str) -> None:
        for row, old in enumerate(self.records):
            if old.id == request_id:
                self.beginRemoveRows(QModelIndex(), row, row)
                self.records.pop(row)
                self.endRemoveRows()
                return
