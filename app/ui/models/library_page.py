"""The Library page: local GGUF files, per-model load settings, load/unload off the GUI thread."""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QItemSelection, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.chat_formats import CUSTOM, FORMATS, NO_FORMAT, format_label
from app.engine.backend import REUSE_WORDS
from app.engine.chat_template import render_chat_template
from app.engine.errors import EngineError, InvalidRequest
from app.engine.llama.kv_calibration import describe as kv_cells_words
from app.models.library import ModelEntry, ModelLibrary, estimate_memory, memory_words
from app.ui.models.settings import LoadSettings, load_settings_for, save_settings_for
from app.ui.models.widgets import MessageCard, beside_card, button, caption, section, side_card
from app.ui.qt_models.model_library import COL_NAME, LibraryTableModel, chat_format_words
from app.ui.state.library_catalog import LibraryCatalog, LibraryRow
from app.ui.widgets.elided import ElidedLabel
from app.units import human_bytes

log = logging.getLogger(__name__)

ATTENTION_CHOICES = (("Exact (flash attention)", True), ("Faster prefill, not bit-identical", False))
ATTENTION_TIP = (
    "Exact: a turn restored from the cache is the same, bit for bit, as the same turn computed "
    "from scratch, however the prompt was split into batches.\n"
    "Faster prefill: flash attention off. On a CPU prompts are read faster (2,000 tokens in "
    "0.75 x the time on SmolLM2 in Hearth's benchmark), several conversations decode slower "
    "(1.23 x for four), and the result depends on how the prompt was batched: a reply after a "
    "cache restore can differ from the same reply computed from scratch. Its cache entries are "
    "kept apart from the exact setting's.")
INEXACT_NOTE = ("Not bit-identical across batch shapes: a reply after a cache restore can "
                "differ from the same reply computed from scratch.")


def _spin(lo: int, hi: int, step: int = 1, special: str | None = None) -> QSpinBox:
    s = QSpinBox()
    s.setRange(lo, hi)
    s.setSingleStep(step)
    s.setAccelerated(True)
    if special:
        s.setSpecialValueText(special)
    s.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)  # never squeezed: the card scrolls
    return s


class LibraryPage(QWidget):
    """Emits ``load_requested(path, LoadSettings)`` / ``unload_requested(model_id)``; the
    manager runs them and reports back through ``set_busy`` / ``show_error``."""

    load_requested = Signal(str, object)  # path, LoadSettings
    attach_requested = Signal(str, str)  # adapter path, model id
    unload_requested = Signal(str)  # model id
    rescan_requested = Signal()

    def __init__(
        self,
        library: ModelLibrary,
        catalog: LibraryCatalog,
        settings: MutableMapping[str, object],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("libraryPage")
        self.library = library
        self.catalog = catalog
        self.settings = settings
        self._loading_form = False
        self._chat_template: str | None = None  # the pasted template, once checked
        self._select_after_rescan: Path | None = None  # a file just added
        self.fit_check: Callable[[str, LoadSettings], Any] | None = None
        """``Engine.fit_verdict`` for (path, settings): would it fit now (set by the manager)."""
        self.fit_choice: Callable[[str, LoadSettings], Any] | None = None
        """``Engine.fit_choice``: the context × chats that fit now (the "Fit" button)."""
        self.table_model = LibraryTableModel(
            catalog, lambda row: load_settings_for(settings, row.path, row.entry.context_length).chat_format,
            self._fit_cell)

        top = QHBoxLayout()
        top.addWidget(caption(
            "GGUF files in your models folders, read from their headers — nothing is loaded "
            "until you press Load. Hover a status for details."), 1)
        self.add_folder_button = button("Add folder…", "addFolderButton")
        self.add_file_button = button("Add file…", "addFileButton")
        self.rescan_button = button("Rescan", "rescanButton")
        top.addWidget(self.add_folder_button)
        top.addWidget(self.add_file_button)
        top.addWidget(self.rescan_button)

        self.table = QTableView()
        self.table.setObjectName("libraryTable")
        self.table.setModel(self.table_model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setShowGrid(False)
        self.table.setAlternatingRowColors(False)
        self.table.setWordWrap(False)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(32)
        header = self.table.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COL_NAME, QHeaderView.ResizeMode.Stretch)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)

        left = QVBoxLayout()
        left.setSpacing(10)
        left.addLayout(top)
        left.addWidget(self.table, 1)
        self._left = left  # add_section puts more below the table (the remote models)

        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(16)
        self.details_scroll = _scrolling(self._build_details())
        beside_card(layout, left, self.details_scroll)

        self.add_folder_button.clicked.connect(self._on_add_folder_clicked)
        self.add_file_button.clicked.connect(self._on_add_file_clicked)
        self.rescan_button.clicked.connect(self.rescan_requested)
        self.table.selectionModel().selectionChanged.connect(self._on_selection_changed)
        self.table.doubleClicked.connect(lambda _i: self._on_load_clicked())
        self.table_model.modelReset.connect(self._on_rows_reset)
        self.table_model.dataChanged.connect(lambda *_: self._refresh_details())
        self._refresh_details()

    def add_section(self, widget: QWidget) -> None:
        """Another section under the GGUF table (the Library's "Remote models")."""
        self._left.addWidget(widget)

    # -- construction -------------------------------------------------------------------------

    def _build_details(self) -> QFrame:
        card, v = side_card()
        self.details_card = card
        self.details_title = ElidedLabel("No model selected")
        self.details_title.setObjectName("cardTitle")
        self.details_sub = QLabel("")  # no word wrap: explicit lines keep its height right
        self.details_sub.setObjectName("caption")
        v.addWidget(self.details_title)
        v.addWidget(self.details_sub)
        v.addWidget(self._build_attach_box())
        self.load_box = QWidget()
        outer, v = v, QVBoxLayout(self.load_box)
        v.setContentsMargins(0, 0, 0, 0)
        v.setSpacing(8)
        outer.addWidget(self.load_box)
        v.addWidget(section("Load settings"))
        form = QFormLayout()
        form.setHorizontalSpacing(12)
        form.setVerticalSpacing(6)
        self.n_ctx = _spin(128, 1 << 20, 256)
        self.n_ctx.setObjectName("nCtxSpin")
        self.n_seq_max = _spin(1, 64)
        self.n_seq_max.setObjectName("nSeqMaxSpin")
        self.n_batch = _spin(16, 1 << 16, 64)
        self.n_batch.setObjectName("nBatchSpin")
        self.n_gpu_layers = _spin(-1, 1000, 1, "all")
        self.n_gpu_layers.setObjectName("nGpuLayersSpin")
        self.n_threads = _spin(0, 256, 1, "auto")
        self.n_threads.setObjectName("nThreadsSpin")
        self.n_threads_background = _spin(0, 256, 1, "auto")
        self.n_threads_background.setObjectName("nThreadsBackgroundSpin")
        self.attention = QComboBox()
        self.attention.setObjectName("attentionCombo")
        for text, flash_attn in ATTENTION_CHOICES:
            self.attention.addItem(text, flash_attn)
        self.attention.setToolTip(ATTENTION_TIP)
        self.attention.currentIndexChanged.connect(self._on_setting_changed)
        self._build_chat_format()
        for label, w, tip in (
            ("Context", self.n_ctx, "Tokens one conversation can hold (per sequence)."),
            ("Parallel", self.n_seq_max, "Conversations that can generate at the same time."),
            ("Batch", self.n_batch, "Tokens per decode step; at least 'Parallel'."),
            ("GPU layers", self.n_gpu_layers, "Layers offloaded to the GPU (-1: all)."),
            ("Threads", self.n_threads, "CPU threads (auto: llama.cpp's default)."),
            ("Read-ahead threads", self.n_threads_background,
             "CPU threads that read a message while you type it, when nothing else runs "
             "(auto: every core)."),
        ):
            w.setToolTip(tip)
            form.addRow(label, w)
            w.valueChanged.connect(self._on_setting_changed)
        form.addRow(QLabel("Attention"))
        form.addRow(self.attention)  # the whole width: its choices are long
        form.addRow(QLabel("Chat format"))
        form.addRow(self.chat_format)  # the whole width, as Attention
        v.addLayout(form)
        v.addWidget(self.chat_format_note)
        self.attention_note = caption(INEXACT_NOTE)
        self.attention_note.setObjectName("attentionNote")
        self.attention_note.setWordWrap(True)
        self.attention_note.hide()
        v.addWidget(self.attention_note)
        v.addWidget(section("Memory estimate"))
        self.memory_label = QLabel("–")
        self.memory_label.setObjectName("memoryEstimate")
        self.memory_label.setWordWrap(True)
        v.addWidget(self.memory_label)
        self.memory_detail = caption("")
        v.addWidget(self.memory_detail)
        fit_row = QHBoxLayout()
        self.fit_label = caption("")  # "Fits on this machine: …" / "Does not fit on this machine: …"
        self.fit_label.setObjectName("fitVerdict")
        self.fit_label.setWordWrap(True)
        fit_row.addWidget(self.fit_label, 1)
        self.fit_button = button("Fit", "fitButton")
        self.fit_button.setToolTip("Set Context and Parallel to the most that fit this machine now: the "
                                   "context first, then fewer conversations, then a smaller context.")
        self.fit_button.hide()
        fit_row.addWidget(self.fit_button, 0, Qt.AlignmentFlag.AlignTop)
        v.addLayout(fit_row)
        v.addWidget(section("What the cache can reuse"))
        self.reuse_label = caption("")  # the model's memory type (docs/design.md §8)
        self.reuse_label.setObjectName("reuseKinds")
        v.addWidget(self.reuse_label)
        v.addWidget(section("KV cells on this CPU"))
        self.kv_cells_label = caption("")  # the calibrated pair and why (app.engine.llama.kv_calibration)
        self.kv_cells_label.setObjectName("kvCells")
        self.kv_cells_label.setWordWrap(True)
        v.addWidget(self.kv_cells_label)
        v.addSpacing(6)
        buttons = QHBoxLayout()
        self.load_button = button("Load", "loadButton", primary=True)
        self.unload_button = button("Unload", "unloadButton")
        buttons.addWidget(self.load_button, 1)
        buttons.addWidget(self.unload_button, 1)
        v.addLayout(buttons)
        v = outer
        self.busy_bar = QProgressBar()
        self.busy_bar.setObjectName("loadBusy")
        self.busy_bar.setRange(0, 0)  # indeterminate
        self.busy_bar.setTextVisible(False)
        self.busy_bar.hide()
        v.addWidget(self.busy_bar)
        self.error_card = MessageCard("loadError")
        v.addWidget(self.error_card)
        v.addStretch(1)
        self.load_button.clicked.connect(self._on_load_clicked)
        self.unload_button.clicked.connect(self._on_unload_clicked)
        self.fit_button.clicked.connect(self._on_fit_clicked)
        return card

    def _build_chat_format(self) -> None:
        """Chat format: automatic (the file's template, else the format the model's architecture
        and vocabulary call for), a built-in format, or a pasted template (``TemplateDialog``,
        checked in the template sandbox before it is kept)."""
        self.chat_format = QComboBox()
        self.chat_format.setObjectName("chatFormatCombo")
        self.chat_format.addItem("Automatic", "")
        for fmt in FORMATS.values():
            self.chat_format.addItem(fmt.label, fmt.name)
        self.chat_format.addItem("Paste a template…", CUSTOM)
        self.chat_format.activated.connect(self._on_chat_format_activated)
        self.chat_format_note = caption("")
        self.chat_format_note.setObjectName("chatFormatNote")
        self.chat_format_note.setWordWrap(True)
        self.template_dialog: TemplateDialog | None = None

    def _build_attach_box(self) -> QWidget:
        """For a LoRA adapter: attach it to a loaded model, right from the list."""
        self.attach_box = QWidget()
        v = QVBoxLayout(self.attach_box)
        v.setContentsMargins(0, 0, 0, 0)
        v.setSpacing(8)
        v.addWidget(section("Attach to a loaded model"))
        self.attach_model_picker = QComboBox()
        self.attach_model_picker.setObjectName("attachModelPicker")
        self.attach_button = button("Attach", "attachButton", primary=True)
        self.attach_hint = caption("")
        v.addWidget(self.attach_model_picker)
        v.addWidget(self.attach_button)
        v.addWidget(self.attach_hint)
        self.attach_button.clicked.connect(self._on_attach_clicked)
        self.attach_box.hide()
        return self.attach_box

    # -- queries ------------------------------------------------------------------------------

    def selected_row(self) -> LibraryRow | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        r = rows[0].row()
        return self.catalog.row(r) if 0 <= r < len(self.catalog) else None

    def select_path(self, path: Path | str) -> bool:
        row = self.catalog.row_of(path)
        if row < 0:
            return False
        self.table.selectRow(row)
        self.table.scrollTo(self.table_model.index(row, 0))
        return True

    def form_settings(self) -> LoadSettings:
        choice = str(self.chat_format.currentData() or "")
        if choice == CUSTOM and self._chat_template is None:
            choice = ""  # nothing checked yet: automatic until a template is
        return LoadSettings(n_ctx=self.n_ctx.value(), n_seq_max=self.n_seq_max.value(),
                            n_batch=self.n_batch.value(), n_gpu_layers=self.n_gpu_layers.value(),
                            n_threads=self.n_threads.value(),
                            n_threads_background=self.n_threads_background.value(),
                            flash_attn=self.attention.currentData() is not False,
                            chat_format=choice,
                            chat_template=self._chat_template or "" if choice == CUSTOM else "")

    def set_form_settings(self, s: LoadSettings) -> None:
        """Fill the form (and remember the values for the selected model)."""
        self._set_form(s)
        self._on_setting_changed()

    # -- slots --------------------------------------------------------------------------------

    def _on_add_folder_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a models folder")
        if folder:
            self.add_folder(folder)

    def add_folder(self, folder: str | Path) -> None:
        self.library.add_dir(folder)
        self.rescan_requested.emit()

    def _on_add_file_clicked(self) -> None:
        path, _filter = QFileDialog.getOpenFileName(self, "Add a model file", "",
                                                    "GGUF models (*.gguf);;All files (*)")
        if path:
            self.add_file(path)

    def add_file(self, path: str | Path) -> None:
        """One GGUF file, wherever it is; the Library remembers it."""
        self.library.add_file(path)
        self._select_after_rescan = Path(path)
        self.rescan_requested.emit()

    def _on_selection_changed(self, _sel: QItemSelection, _desel: QItemSelection) -> None:
        self.error_card.clear()
        row = self.selected_row()
        if row is not None:
            self._set_form(load_settings_for(self.settings, row.path, row.entry.context_length))
        self._refresh_details()

    def _on_rows_reset(self) -> None:
        target, self._select_after_rescan = self._select_after_rescan, None
        if target is not None and self.select_path(target):
            pass
        elif self.selected_row() is None and len(self.catalog):
            self.table.selectRow(0)
        self._refresh_details()

    def _on_setting_changed(self, *_: object) -> None:
        if self._loading_form:
            return
        row = self.selected_row()
        if row is not None and not row.entry.is_broken and not row.entry.is_adapter:
            save_settings_for(self.settings, row.path, self.form_settings())
        self._refresh_memory(row)
        self.table_model.fits_changed()  # (its dataChanged refreshes the details once more)

    def _on_chat_format_activated(self, _index: int) -> None:
        if self.chat_format.currentData() == CUSTOM:
            self._open_template_dialog()
            return
        self._chat_format_chosen()

    def _chat_format_chosen(self) -> None:
        self._on_setting_changed()
        row = self.selected_row()
        if row is not None:
            self.table_model.chat_choice_changed(row.path)
        self._refresh_chat_format_note(row)
        if row is not None and row.is_loaded:
            self.chat_format_note.setText("It applies from the model's next load: Unload, then Load.")
            self.chat_format_note.show()

    def _open_template_dialog(self) -> None:
        """Paste a template: kept once it renders a sample chat in the sandbox; Cancel goes
        back to the previous choice."""
        row = self.selected_row()
        if row is None:
            return
        previous = load_settings_for(self.settings, row.path, row.entry.context_length)
        dialog = TemplateDialog(row.entry.name, previous.chat_template, self)
        self.template_dialog = dialog

        def done(result: int) -> None:
            self.template_dialog = None
            if result == QDialog.DialogCode.Accepted:
                self._chat_template = dialog.template
                self._chat_format_chosen()
            else:
                self._set_form(previous)

        dialog.finished.connect(done)
        dialog.open()

    def _on_load_clicked(self) -> None:
        row = self.selected_row()
        if row is None or not row.can_load:
            return
        s = self.form_settings()
        if s.n_batch < s.n_seq_max:
            self.error_card.show_text(
                f"Batch ({s.n_batch}) must be at least Parallel ({s.n_seq_max}): each "
                "conversation needs one row per decode step.")
            return
        self.error_card.clear()
        self.load_requested.emit(str(row.path), s)

    def _on_attach_clicked(self) -> None:
        row = self.selected_row()
        model_id = self.attach_model_picker.currentText()
        if row is not None and row.entry.is_adapter and model_id:
            self.attach_requested.emit(str(row.path), model_id)

    def _on_unload_clicked(self) -> None:
        row = self.selected_row()
        if row is not None and row.model_id is not None and not row.busy:
            self.unload_requested.emit(row.model_id)

    def show_error(self, text: str) -> None:
        self.error_card.show_text(text)

    def _on_fit_clicked(self) -> None:
        row = self.selected_row()
        if row is None or self.fit_choice is None:
            return
        s = self.form_settings()
        try:
            fit = self.fit_choice(str(row.path), s)
        except EngineError as exc:  # not even one short conversation fits
            self.error_card.show_text(f"{row.entry.name} {exc}")
            return
        if fit is not None:
            self.error_card.clear()
            self.catalog.update(row.path, error=None)  # the refusal no longer holds
            self.set_form_settings(replace(s, n_ctx=fit.n_ctx, n_seq_max=fit.n_seq_max))

    def _fit_cell(self, row: LibraryRow) -> tuple[str, str] | None:
        """The Memory column: would the row load with its remembered settings now?"""
        if self.fit_check is None or row.entry.is_broken or row.entry.is_adapter or row.is_loaded:
            return None
        s = load_settings_for(self.settings, row.path, row.entry.context_length)
        verdict = self.fit_check(str(row.path), s)
        if verdict is None:
            return None
        return ("Fits" if verdict.fits else "Does not fit"), verdict.words

    # -- helpers ------------------------------------------------------------------------------

    def _set_form(self, s: LoadSettings) -> None:
        self._loading_form = True
        try:
            self.n_ctx.setValue(s.n_ctx)
            self.n_seq_max.setValue(s.n_seq_max)
            self.n_batch.setValue(s.n_batch)
            self.n_gpu_layers.setValue(s.n_gpu_layers)
            self.n_threads.setValue(s.n_threads)
            self.n_threads_background.setValue(s.n_threads_background)
            self.attention.setCurrentIndex(max(0, self.attention.findData(s.flash_attn)))
            self.chat_format.setCurrentIndex(max(0, self.chat_format.findData(s.chat_format)))
            self._chat_template = s.chat_template if s.chat_format == CUSTOM else None
        finally:
            self._loading_form = False

    def _refresh_details(self) -> None:
        row = self.selected_row()
        busy = any(r.busy for r in self.catalog.rows())
        self.busy_bar.setVisible(row is not None and bool(row.busy))
        if row is None:
            self.details_title.set_full_text("No model selected")
            self.details_sub.setText("Pick a model in the table\nto see its load settings.")
            self.load_button.setEnabled(False)
            self.unload_button.setEnabled(False)
            self._refresh_memory(None)
            return
        e = row.entry
        self.attach_box.setVisible(e.is_adapter and not e.is_broken)
        self.load_box.setVisible(not e.is_adapter)
        if e.is_adapter:
            self._refresh_attach()
        title = e.general_name or e.name
        self.details_title.set_full_text(title)
        self.details_title.setToolTip(f"{title}\n{e.path}")
        self.details_sub.setText(_subtitle(e, row))
        editable = not (e.is_broken or e.is_adapter or row.is_loaded or row.busy)
        form = (self.n_ctx, self.n_seq_max, self.n_batch, self.n_gpu_layers, self.n_threads,
                self.n_threads_background, self.attention)
        for w in form:
            w.setEnabled(editable)
        # The chat format may be chosen while the model is loaded (its chats may be refused
        # for the lack of one): it applies from the next load, as the note says.
        self.chat_format.setEnabled(not (e.is_broken or e.is_adapter or row.busy))
        self.load_button.setEnabled(row.can_load and not busy)
        self.load_button.setText("Loading…" if row.busy == "Loading…" else "Load")
        self.unload_button.setEnabled(row.is_loaded and not row.busy)
        if row.error and not self.error_card.isVisible():
            self.error_card.show_text(row.error)
        self._refresh_memory(row)
        self._refresh_chat_format_note(row)

    def _refresh_chat_format_note(self, row: LibraryRow | None) -> None:
        """The automatic choice's words in the combo's first item; a note under the form when
        the model cannot chat as it is."""
        if row is None or row.entry.is_broken or row.entry.is_adapter:
            return
        e = row.entry
        if e.has_chat_template:
            auto = "Automatic: the file's template"
        elif e.chat_format:
            auto = f"Automatic: {format_label(e.chat_format)}"
        else:
            auto = "Automatic: none fits"
        self.chat_format.setItemText(0, auto)
        custom = self.chat_format.findData(CUSTOM)
        self.chat_format.setItemText(custom, "Your template (edit…)" if self._chat_template else "Paste a template…")
        words = chat_format_words(e, str(self.chat_format.currentData() or ""))
        self.chat_format.setToolTip(words[1])
        note = ""
        if not self.chat_format.currentData() and not e.has_chat_template and not e.chat_format:
            note = ("No chat template in the file and no known format in its vocabulary: choose "
                    "a format or paste a template, else it cannot chat.")
        self.chat_format_note.setText(note)
        self.chat_format_note.setToolTip(NO_FORMAT if note else "")
        self.chat_format_note.setVisible(bool(note))

    def _refresh_attach(self) -> None:
        loaded = [r.model_id for r in self.catalog.rows() if r.model_id is not None]
        current = self.attach_model_picker.currentText()
        self.attach_model_picker.blockSignals(True)
        self.attach_model_picker.clear()
        self.attach_model_picker.addItems(loaded)
        if current in loaded:
            self.attach_model_picker.setCurrentText(current)
        self.attach_model_picker.blockSignals(False)
        self.attach_model_picker.setEnabled(bool(loaded))
        self.attach_button.setEnabled(bool(loaded))
        self.attach_hint.setText(
            "It is checked against the model's tensor shapes first; its scale is set on "
            "the Adapters page." if loaded else "Load a model first: an adapter attaches "
            "to a loaded model."
        )

    def _refresh_memory(self, row: LibraryRow | None) -> None:
        if row is None or row.entry.is_broken or row.entry.is_adapter:
            self.memory_label.setText("–")
            self.memory_detail.setText("")
            self.fit_label.setText("")
            self.fit_button.hide()
            self.reuse_label.setText("")
            self.kv_cells_label.setText("")
            self.attention_note.hide()
            return
        e, s = row.entry, self.form_settings()
        words = REUSE_WORDS.get(e.memory_kind, e.memory_kind)
        self.reuse_label.setText(words[0].upper() + words[1:] + ".")
        self.kv_cells_label.setText(kv_cells_words(str(e.path), s.flash_attn))
        self.attention_note.setVisible(not s.flash_attn)
        total = estimate_memory(e, s.n_ctx, s.n_seq_max)
        self.memory_label.setText(f"≈ {human_bytes(total)}")
        self.memory_detail.setText(
            f"{human_bytes(e.size_bytes)} of weights + {human_bytes(total - e.size_bytes)} of "
            f"{memory_words(e, s.n_ctx, s.n_seq_max)}; compute buffers come on top.")
        verdict = None if self.fit_check is None or row.is_loaded else self.fit_check(str(row.path), s)
        self.fit_label.setText("" if verdict is None else verdict.short)
        self.fit_label.setToolTip("" if verdict is None else verdict.words)
        self.fit_label.setProperty("fits", None if verdict is None else verdict.fits)
        self.fit_label.setStyleSheet("" if verdict is None or verdict.fits else "color: #dc2626;")
        self.fit_button.setVisible(verdict is not None and not verdict.fits and self.fit_choice is not None)


def _scrolling(card: QFrame) -> QScrollArea:
    """The details card in a scroll area of its width: in a short window its settings keep
    their height (they were squeezed until their numbers were cut) and the card scrolls."""
    scroll = QScrollArea()
    scroll.setObjectName("detailsScroll")
    scroll.setWidget(card)
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    scroll.setMinimumWidth(card.minimumWidth())
    scroll.setMaximumWidth(card.maximumWidth() + scroll.verticalScrollBar().sizeHint().width())
    scroll.setStyleSheet("QScrollArea#detailsScroll, QScrollArea#detailsScroll > QWidget > QWidget "
                         "{ background: transparent; }")
    return scroll


class TemplateDialog(QDialog):
    """Paste a chat template for one model: "Check and use" renders a sample chat with it in
    the template sandbox and keeps it only when every message's words are in the result."""

    def __init__(self, model_name: str, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("templateDialog")
        self.setWindowTitle(f"Chat template for {model_name}")
        self.template = ""
        v = QVBoxLayout(self)
        intro = caption("A Jinja chat template, as in a model's tokenizer_config.json (Hugging Face "
                        "conventions: messages, bos_token, eos_token, add_generation_prompt). It "
                        "runs in the same sandbox as a GGUF's own template.")
        intro.setWordWrap(True)
        v.addWidget(intro)
        self.edit = QPlainTextEdit(text)
        self.edit.setObjectName("chatTemplateEdit")
        self.edit.setMinimumSize(460, 180)
        v.addWidget(self.edit)
        self.note = caption("")
        self.note.setObjectName("templateNote")
        self.note.setWordWrap(True)
        v.addWidget(self.note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.use_button = buttons.addButton("Check and use", QDialogButtonBox.ButtonRole.ActionRole)
        self.use_button.setObjectName("useTemplateButton")
        self.use_button.setDefault(True)
        buttons.rejected.connect(self.reject)
        self.use_button.clicked.connect(self._on_use_clicked)
        v.addWidget(buttons)

    def _on_use_clicked(self) -> None:
        text = self.edit.toPlainText()
        problem = check_pasted_template(text)
        if problem:
            self.note.setText(problem)
            return
        self.template = text
        self.accept()


SAMPLE_CHAT = [
    {"role": "system", "content": "Sample system words"},
    {"role": "user", "content": "Sample question words"},
    {"role": "assistant", "content": "Sample answer words"},
    {"role": "user", "content": "Sample follow-up words"},
]


def check_pasted_template(text: str) -> str | None:
    """Why a pasted chat template cannot be used, or None: it must render a sample chat in the
    template sandbox (``app.engine.chat_template``, bounded as a GGUF's own template is) with
    each message's words in the result."""
    if not text.strip():
        return "Paste a template first."
    try:
        rendered = render_chat_template(text, SAMPLE_CHAT, bos_token="", eos_token="")
    except InvalidRequest as e:
        return f"Not used: {e}"
    missing = [m["role"] for m in SAMPLE_CHAT if m["content"] not in rendered]
    if missing:
        return f"Not used: a sample chat rendered without its {', '.join(dict.fromkeys(missing))} message."
    return None


def _subtitle(e: ModelEntry, row: LibraryRow) -> str:
    if e.broken:
        return "Broken: this file cannot be loaded\n(hover its status for the reason)."
    if e.is_adapter:
        return "A LoRA adapter for a model\nof the same architecture."
    bits = [b for b in (e.architecture, e.size_label, e.quant.upper() if e.quant else None,
                        human_bytes(e.size_bytes)) if b]
    text = " · ".join(bits)
    if row.model_id:
        text += f"\nLoaded as “{row.model_id}”"
    return text

