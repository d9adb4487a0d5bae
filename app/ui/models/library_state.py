"""The library table's plain-Python state: the scanned entries and what is loaded or busy.

Every mutation goes through ``reset`` / ``update`` which notify listeners before and after,
so ``app.ui.qt_models.model_library.LibraryTableModel`` is a thin adapter (STYLE §2). No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from app.models.library import ModelEntry


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


class LibraryListener(Protocol):
    def before_reset(self) -> None: ...
    def after_reset(self) -> None: ...
    def changed(self, row: int) -> None: ...


def _key(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


class LibraryCatalog:
    """Rows in scan order; load state (id, busy, error) survives a rescan, keyed by path."""

    def __init__(self) -> None:
        self._rows: list[LibraryRow] = []
        self._listeners: list[LibraryListener] = []

    def add_listener(self, listener: LibraryListener) -> None:
        self._listeners.append(listener)

    def __len__(self) -> int:
        return len(self._rows)

    def row(self, index: int) -> LibraryRow:
        return self._rows[index]

    def rows(self) -> tuple[LibraryRow, ...]:
        return tuple(self._rows)

    def row_of(self, path: Path | str) -> int:
        key = _key(Path(path))
        for i, r in enumerate(self._rows):
            if _key(r.path) == key:
                return i
        return -1

    def find(self, path: Path | str) -> LibraryRow | None:
        i = self.row_of(path)
        return self._rows[i] if i >= 0 else None

    def reset(self, entries: list[ModelEntry], loaded: dict[Path, str] | None = None) -> None:
        """Replace the entries; ``loaded`` maps resolved paths to engine ids."""
        old = {_key(r.path): r for r in self._rows}
        loaded = {_key(p): mid for p, mid in (loaded or {}).items()}
        rows = []
        for e in entries:
            prev = old.get(_key(e.path))
            row = LibraryRow(e) if prev is None else replace(prev, entry=e)
            if loaded is not None:
                row = replace(row, model_id=loaded.get(_key(e.path)))
            rows.append(row)
        for lis in self._listeners:
            lis.before_reset()
        self._rows = rows
        for lis in self._listeners:
            lis.after_reset()

    def update(self, path: Path | str, **changes: object) -> None:
        """Change ``model_id`` / ``busy`` / ``error`` of one row (no-op for unknown paths)."""
        i = self.row_of(path)
        if i < 0:
            return
        self._rows[i] = replace(self._rows[i], **changes)  # type: ignore[arg-type]
        for lis in self._listeners:
            lis.changed(i)
