"""``QAbstractTableModel`` over a plain list of Hub search results (``RepoInfo``)."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.models.hub import RepoInfo
from app.ui.qt_models.flat_table import FlatTableModel, Index
from app.ui.state.format import human_count, human_date

REPO_ID_ROLE = Qt.ItemDataRole.UserRole + 1
COLUMNS = ("Repository", "Downloads", "Likes", "Updated")


class HubResultsModel(FlatTableModel):
    """Holds the last search's results; ``set_results`` replaces them (a model reset)."""

    columns = COLUMNS

    def __init__(self) -> None:
        super().__init__()
        self._results: list[RepoInfo] = []

    def set_results(self, results: list[RepoInfo]) -> None:
        self.beginResetModel()
        self._results = list(results)
        self.endResetModel()

    def result(self, row: int) -> RepoInfo:
        return self._results[row]

    def num_rows(self) -> int:
        return len(self._results)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self._results):
            return None
        r = self._results[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (r.id, human_count(r.downloads), human_count(r.likes),
                    human_date(r.updated))[col]
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == 0:
                return r.id
            if col == 1:
                return f"{r.downloads:,} downloads"
            if col == 3 and r.updated is not None:
                return r.updated.isoformat(timespec="minutes")
            return None
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (1, 2):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == REPO_ID_ROLE:
            return r.id
        return None
