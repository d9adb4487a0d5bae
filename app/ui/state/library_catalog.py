"""The library table's plain-Python state: the scanned entries and what is loaded or busy.

An :class:`~app.ui.state.observable.ObservableList` keyed by the resolved path; every change goes
through ``reset`` / ``update``, so ``app.ui.qt_models.model_library.LibraryTableModel`` is a
thin adapter (STYLE §2). No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict, Unpack

from app.models.library import ModelEntry
from app.ui.state.observable import ObservableList


class RowChanges(TypedDict, total=False):
    """What ``LibraryCatalog.update`` may change of a row."""

    model_id: str | None
    busy: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class LibraryRow:
    """One model file as the table shows it."""

    entry: ModelEntry
    model_id: str | None = None  # the engine id when loaded
    busy: str | None = None  # "Loading…" / "Unloading…" while a worker runs
    error: str | None = None  # the last load failure

    @property
    def path(self) -> Path:
        return self.entry.path

    @property
    def is_loaded(self) -> bool:
        return self.model_id is not None

    @property
    def can_load(self) -> bool:
        e = self.entry
        return not (e.is_broken or e.is_adapter or self.is_loaded or self.busy)

    @property
    def status(self) -> str:
        if self.busy:
            return self.busy
        if self.entry.is_broken:
            return "Broken"
        if self.model_id is not None:
            return "Loaded"
        if self.entry.is_adapter:
            return "Adapter"
        if self.error:
            return "Load failed"
        return "Available"


def _key(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _row_key(row: LibraryRow) -> Path:
    return _key(row.path)


class LibraryCatalog(ObservableList[LibraryRow, Path]):
    """Rows in scan order; load state (id, busy, error) survives a rescan, keyed by path."""

    def __init__(self) -> None:
        super().__init__(_row_key)

    def row(self, index: int) -> LibraryRow:
        return self[index]

    def rows(self) -> tuple[LibraryRow, ...]:
        return tuple(self.items())

    def row_of(self, path: Path | str) -> int:
        row = self.position(_key(Path(path)))
        return -1 if row is None else row

    def find(self, path: Path | str) -> LibraryRow | None:
        return self.get(_key(Path(path)))

    def reset(self, entries: list[ModelEntry], loaded: dict[Path, str] | None = None) -> None:
        """Replace the entries; ``loaded`` maps resolved paths to engine ids."""
        loaded = {_key(p): mid for p, mid in (loaded or {}).items()}
        rows = []
        for e in entries:
            prev = self.get(_key(e.path))
            row = LibraryRow(e) if prev is None else replace(prev, entry=e)
            if loaded is not None:
                row = replace(row, model_id=loaded.get(_key(e.path)))
            rows.append(row)
        self._reset(rows)

    def update(self, path: Path | str, **changes: Unpack[RowChanges]) -> None:
        """Change ``model_id`` / ``busy`` / ``error`` of one row (no-op for unknown paths)."""
        i = self.row_of(path)
        if i >= 0:
            self._replace(i, replace(self[i], **changes))
