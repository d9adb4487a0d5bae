"""``QAbstractTableModel`` adapter over :class:`LibraryCatalog` (it owns no state; the row
signals come from :class:`~app.ui.qt_models.adapter.ListAdapter`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPainter, QPixmap

from app.chat_formats import CUSTOM, FORMATS, NO_FORMAT, format_label
from app.models.library import ModelEntry
from app.ui.qt_models.adapter import ListAdapter
from app.ui.qt_models.flat_table import FlatTableModel, Index
from app.ui.state.library_catalog import LibraryCatalog, LibraryRow
from app.units import human_bytes

ROW_ROLE = Qt.ItemDataRole.UserRole + 1  # the LibraryRow
PATH_ROLE = Qt.ItemDataRole.UserRole + 2  # str path of the file

COLUMNS = ("Name", "Architecture", "Params", "Quant", "Context", "Size", "Chat format", "Status", "Memory")
COL_NAME, COL_ARCH, COL_PARAMS, COL_QUANT, COL_CTX, COL_SIZE, COL_TEMPLATE, COL_STATUS, COL_FITS = range(9)
FitCell = Callable[["LibraryRow"], "tuple[str, str] | None"]
"""(the words in the Memory column, its tooltip) for a row: "Fits" / "Does not fit" on this
machine with the row's load settings; None: nothing to say (broken, an adapter, loaded)."""

_STATUS_COLORS = {"loaded": "#16a34a", "broken": "#dc2626", "busy": "#f59e0b",
                  "failed": "#dc2626", "idle": "#9ca3af"}


class LibraryTableModel(ListAdapter[LibraryRow, Path], FlatTableModel):
    columns = COLUMNS

    def __init__(self, catalog: LibraryCatalog, chat_choice: Callable[[LibraryRow], str] | None = None,
                 fit_of: FitCell | None = None) -> None:  # fmt: skip
        """``chat_choice(row)``: the chat format the user chose for the row's file ("":
        automatic; ``LoadSettings.chat_format``); ``fit_of(row)``: the Memory column."""
        super().__init__()
        self._catalog = catalog
        self._chat_choice = chat_choice or (lambda _row: "")
        self._fit_of: FitCell = fit_of or (lambda _row: None)
        self.observe(catalog)

    def fits_changed(self) -> None:
        """Memory or settings changed: the Memory column reads again."""
        if len(self._catalog):
            self.dataChanged.emit(self.index(0, COL_FITS), self.index(len(self._catalog) - 1, COL_FITS))

    def chat_choice_changed(self, path: Path) -> None:
        """The user chose another chat format for ``path``: its cell reads it again."""
        row = self._catalog.row_of(path)
        if row >= 0:
            cell = self.index(row, COL_TEMPLATE)
            self.dataChanged.emit(cell, cell)

    # -- QAbstractTableModel ----------------------------------------------------------------

    def num_rows(self) -> int:
        return len(self._catalog)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self._catalog):
            return None
        row = self._catalog.row(index.row())
        col = index.column()
        if col == COL_TEMPLATE and role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            words = chat_format_words(row.entry, self._chat_choice(row))
            return words[0] if role == Qt.ItemDataRole.DisplayRole else words[1]
        if col == COL_FITS and role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            cell = self._fit_of(row)
            return ("" if cell is None else cell[0]) if role == Qt.ItemDataRole.DisplayRole else (cell and cell[1])
        if role == Qt.ItemDataRole.DisplayRole:
            return _display(row, col)
        if role == Qt.ItemDataRole.ToolTipRole:
            return _tooltip(row, col)
        if role == Qt.ItemDataRole.DecorationRole and col == COL_STATUS:
            return _dot(_STATUS_COLORS[_state(row)])
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (COL_PARAMS, COL_CTX, COL_SIZE):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == ROW_ROLE:
            return row
        if role == PATH_ROLE:
            return str(row.path)
        return None

    def row_of(self, path: str) -> int:
        return self._catalog.row_of(path)


_DOTS: dict[str, QPixmap] = {}


def _dot(color: str) -> QPixmap:
    """A small filled circle (a status light), cached per colour."""
    pix = _DOTS.get(color)
    if pix is None:
        pix = QPixmap(10, 10)
        pix.fill(QColor(0, 0, 0, 0))
        p = QPainter(pix)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(QColor(0, 0, 0, 0))
        p.setBrush(QColor(color))
        p.drawEllipse(1, 1, 8, 8)
        p.end()
        _DOTS[color] = pix
    return pix


def _state(row: LibraryRow) -> str:
    if row.busy:
        return "busy"
    if row.entry.is_broken:
        return "broken"
    if row.is_loaded:
        return "loaded"
    if row.error:
        return "failed"
    return "idle"


def _display(row: LibraryRow, col: int) -> str:
    e = row.entry
    if col == COL_NAME:
        return e.name + ("  (default)" if e.is_default else "")
    if col == COL_ARCH:
        return e.architecture or "–"
    if col == COL_PARAMS:
        return e.size_label or "–"
    if col == COL_QUANT:
        return e.quant.upper() if e.quant else "–"
    if col == COL_CTX:
        return f"{e.context_length:,}" if e.context_length else "–"
    if col == COL_SIZE:
        return human_bytes(e.size_bytes)
    if col == COL_STATUS:
        return row.status
    return ""


def _tooltip(row: LibraryRow, col: int) -> str | None:
    e = row.entry
    if col == COL_STATUS:
        if e.broken:
            return f"This file cannot be used: {e.broken}"
        if row.error:
            return row.error
        if row.model_id is not None:
            return f"Loaded as “{row.model_id}”: chat with it or attach adapters."
        if e.is_adapter:
            return "A LoRA adapter: select it to attach it to a loaded model."
        return None
    if col == COL_NAME:
        return str(e.path)
    if col == COL_PARAMS and e.num_params:
        return f"{e.num_params:,} parameters"
    return None


def chat_format_words(e: ModelEntry, choice: str) -> tuple[str, str]:
    """(cell text, tooltip) of the Chat format column: what a chat with the file is rendered
    with — the user's choice, the file's own template, or the format chosen by the model's
    architecture and vocabulary when the file has none (``app.chat_formats``)."""
    if e.is_broken or e.is_adapter:
        return "–", ""
    if choice in FORMATS:
        return (f"{FORMATS[choice].label} (your choice)",
                f"Chats with this model use the {FORMATS[choice].label} format: your choice "
                "(Chat format, in the panel on the right).")
    if choice == CUSTOM:
        return ("Your template", "Chats with this model use the template you pasted "
                                 "(Chat format, in the panel on the right).")
    if e.has_chat_template:
        return "From the file", "The file carries its own chat template: chats use it."
    if e.chat_format:
        label = format_label(e.chat_format)
        return (f"{label} (no template)",
                f"The file has no chat template. Its architecture ({e.architecture or 'unknown'}) and "
                f"vocabulary (it has {label}'s turn tokens) call for the {label} format, so chats "
                "use it and a reply ends at the model's own end-of-turn token. You can choose "
                "another format or paste a template in the panel on the right.")
    return ("None: choose one", NO_FORMAT)
