"""``ModelManager``: the Models work area (objectName ``modelManager``).

Three pages behind a segmented control — Library (local GGUF files, load settings,
load/unload), Download (Hub search, quant picker, downloads list) and Adapters (LoRA on a
loaded model with live effective fingerprint). The manager owns the plain-Python state
(``LibraryCatalog``, ``DownloadManager``) and the worker pools, runs every blocking call
(engine load/unload, adapter changes, library scans, Hub queries) off the GUI thread, and
tells the main window what happened through its signals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from pathlib import Path

from PySide6.QtCore import QEvent, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.cache.policy import DESKTOP_POLICY
from app.engine.config import ModelConfig
from app.engine.memory.memory_fit import DoesNotFit
from app.models.hub import HubClient
from app.models.library import ModelEntry, ModelLibrary
from app.ui.engine_api import EngineApi
from app.ui.models.adapters_page import AdaptersPage
from app.ui.models.downloads import DownloadManager
from app.ui.models.hub_page import HubPage
from app.ui.models.library_page import LibraryPage
from app.ui.models.settings import SETTINGS_FILE, JsonSettingsStore, LoadSettings
from app.ui.models.style import models_stylesheet
from app.ui.models.widgets import caption
from app.ui.state.downloads import DownloadItem
from app.ui.state.library_catalog import LibraryCatalog
from app.ui.tasks import TaskRunner
from app.ui.theme import colors

log = logging.getLogger(__name__)

ConfigFactory = Callable[[str, LoadSettings], ModelConfig]
UnloadHook = Callable[[str], None]
PAGES = ("library", "download", "adapters")


def default_config_factory(path: str, s: LoadSettings) -> ModelConfig:
    """The ``ModelConfig`` of a model loaded in the app (the default model included):
    the Library's load settings, the desktop cache policy, saves to disk."""
    return ModelConfig(path=path, n_ctx=s.n_ctx, n_seq_max=s.n_seq_max, n_batch=s.n_batch,
                       n_gpu_layers=s.n_gpu_layers, n_threads=s.n_threads or None,
                       n_threads_background=s.n_threads_background or None, flash_attn=s.flash_attn,
                       policy=DESKTOP_POLICY, tier="disk", chat_template=s.chat_template_override())


class ModelManager(QWidget):
    """The Models view.

    ``engine``: the app's ``Engine``; ``library``: a ``ModelLibrary``; ``hub``: a
    ``HubClient``; ``settings``: a dict-like store for per-model load settings (keyed by the
    file's absolute path; ``None`` → ``model_load_settings.json`` in the engine's data dir).
    ``config_factory`` turns (path, LoadSettings) into the ``ModelConfig`` to load with.
    ``before_unload(model_id)`` runs on the GUI thread before a model is unloaded (the app
    shuts that model's chat bridge down there, so nothing of the UI is inside the model
    when the engine frees it).
    """

    model_loaded = Signal(str)  # model id
    model_unloaded = Signal(str)  # model id
    adapters_changed = Signal(str)  # model id
    error_raised = Signal(str)  # a message for the window's banner
    library_refreshed = Signal()
    download_finished = Signal(str)  # installed path

    def __init__(
        self,
        engine: EngineApi,
        library: ModelLibrary,
        hub: HubClient,
        settings: MutableMapping[str, object] | None = None,
        parent: QWidget | None = None,
        *,
        config_factory: ConfigFactory | None = None,
        before_unload: UnloadHook | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("modelManager")
        self.engine = engine
        self.library = library
        self.hub = hub
        if settings is None:
            base = Path(getattr(engine, "data_dir", None) or library.models_dir.parent)
            settings = JsonSettingsStore(base / SETTINGS_FILE)
        self.settings = settings
        self._config_factory = config_factory or default_config_factory
        self._before_unload = before_unload
        self._select_after_scan: Path | None = None
        self._load_after_scan: Path | None = None
        self.confirm_unload: Callable[[str], bool] | None = None
        """Asked before a model is unloaded (the app asks the user when it is writing a reply)."""
        self._scan_again = False
        self._scanning = False
        self._theme = ""
        self._closed = False

        # Engine calls run one at a time, in order (a scale change never overtakes an attach).
        self.engine_runner = TaskRunner(max_threads=1, parent=self)
        self.io_runner = TaskRunner(max_threads=2, parent=self)
        self.catalog = LibraryCatalog()
        self.downloads = DownloadManager(hub, parent=self)

        self.library_page = LibraryPage(library, self.catalog, settings)
        verdict, choice = getattr(engine, "fit_verdict", None), getattr(engine, "fit_choice", None)
        if callable(verdict) and callable(choice):  # fits / does not fit on this machine (issue 54)
            self.library_page.fit_check = lambda path, s: verdict(path, s.n_ctx, s.n_seq_max, s.n_batch)
            self.library_page.fit_choice = lambda path, s: choice(path, s.n_ctx, s.n_seq_max, s.n_batch)
        self.hub_page = HubPage(hub, self.downloads, self.io_runner)
        self.adapters_page = AdaptersPage(engine, self.engine_runner)
        self.stack = QStackedWidget()
        for page in (self.library_page, self.hub_page, self.adapters_page):
            self.stack.addWidget(page)

        layout = QVBoxLayout(self)
        layout.setSizeConstraint(QLayout.SizeConstraint.SetNoConstraint)
        layout.setContentsMargins(28, 22, 28, 22)
        layout.setSpacing(14)
        layout.addLayout(self._build_header())
        layout.addWidget(self.stack, 1)

        self.library_page.load_requested.connect(self._on_load_requested)
        self.library_page.unload_requested.connect(self.unload_model)
        self.library_page.rescan_requested.connect(self.rescan)
        self.library_page.attach_requested.connect(self._on_attach_requested)
        self.adapters_page.adapters_changed.connect(self.adapters_changed)
        self.downloads.download_finished.connect(self._on_download_finished)
        self.downloads.download_failed.connect(
            lambda item: self.error_raised.emit(f"Download of {item.filename} failed: "
                                                f"{item.error}"))
        self._apply_style()
        self.downloads.load_partials()
        self.rescan()

    # -- construction -------------------------------------------------------------------------

    def _build_header(self) -> QHBoxLayout:
        titles = QVBoxLayout()
        titles.setSpacing(2)
        title = QLabel("Models")
        title.setObjectName("pageTitle")
        titles.addWidget(title)
        titles.addWidget(caption("Local GGUF models, downloads from the Hugging Face Hub, and "
                                 "LoRA adapters for the loaded model."))
        bar = QFrame()
        bar.setObjectName("segmentBar")
        bl = QHBoxLayout(bar)
        bl.setContentsMargins(3, 3, 3, 3)
        bl.setSpacing(2)
        self.page_group = QButtonGroup(self)
        self.page_buttons: dict[str, QPushButton] = {}
        for i, (key, label) in enumerate(zip(PAGES, ("Library", "Download", "Adapters"),
                                             strict=True)):
            b = QPushButton(label)
            b.setObjectName("segment")
            b.setCheckable(True)
            self.page_group.addButton(b, i)
            self.page_buttons[key] = b
            bl.addWidget(b)
        self.page_buttons["library"].setChecked(True)
        self.page_group.idClicked.connect(self.stack.setCurrentIndex)
        head = QHBoxLayout()
        head.addLayout(titles, 1)
        head.addWidget(bar)
        return head

    # -- public -------------------------------------------------------------------------------

    def show_page(self, name: str) -> None:
        """``library``, ``download`` or ``adapters``."""
        i = PAGES.index(name)
        self.page_buttons[name].setChecked(True)
        self.stack.setCurrentIndex(i)

    def entries(self) -> list[ModelEntry]:
        return [r.entry for r in self.catalog.rows()]

    def rescan(self) -> None:
        """Re-read the library folders off the GUI thread; ``library_refreshed`` when done."""
        if self._scanning:
            self._scan_again = True
            return
        self._scanning = True
        self.io_runner.run(self.library.scan, self._on_scanned, self._on_scan_failed)

    def load_model(self, path: str | Path, settings: LoadSettings | None = None) -> None:
        """Load a library file with ``settings`` (default: the remembered ones)."""
        row = self.catalog.find(path)
        if row is None:
            self._report(f"{Path(path).name} is not in the library")
            return
        if settings is None:
            from app.ui.models.settings import load_settings_for

            settings = load_settings_for(self.settings, row.path, row.entry.context_length)
        self._on_load_requested(str(row.path), settings)

    def load_file(self, path: str | Path) -> None:
        """Load a GGUF file, adding it to the Library first when no folder of it lists it (the
        Library remembers it): a chat's "Load …" and "Locate…"."""
        if self.catalog.find(path) is not None:
            self.load_model(path)
            return
        self.library.add_file(path)
        self._load_after_scan = Path(path)
        self._select_after_scan = Path(path)
        self.rescan()

    def unload_model(self, model_id: str) -> None:
        if self.confirm_unload is not None and not self.confirm_unload(model_id):
            return  # a reply it is writing goes on
        if self._before_unload is not None:
            self._before_unload(model_id)
        path = self._path_of(model_id)
        if path is not None:
            self.catalog.update(path, busy="Unloading…")

        def unload() -> None:
            self.engine.unload(model_id)

        def done(_r: object) -> None:
            if path is not None:
                self.catalog.update(path, busy=None, model_id=None)
            # A library scan that landed while the engine was unloading marked the row as
            # loaded (and ``path`` was unknown if the scan had not landed before): read the
            # engine again so the row can be loaded once more.
            self.sync_loaded()
            self.model_unloaded.emit(model_id)

        def failed(e: Exception) -> None:
            if path is not None:
                self.catalog.update(path, busy=None)
            self._report(f"Could not unload {model_id}: {_text(e)}")

        self.engine_runner.run(unload, done, failed)

    def sync_loaded(self) -> None:
        """Re-read which models the engine has loaded (e.g. after the window loaded one)."""
        loaded = self._loaded_paths()
        for row in self.catalog.rows():
            mid = loaded.get(_resolve(row.path))
            if mid != row.model_id and not row.busy:
                self.catalog.update(row.path, model_id=mid)
        self.adapters_page.refresh_models()

    def shutdown(self) -> None:
        """Pause running downloads (partials stay for the next start) and wait for workers."""
        if self._closed:
            return
        self._closed = True
        self.downloads.shutdown()
        self.io_runner.wait(10_000)
        self.engine_runner.wait(60_000)

    # -- load ---------------------------------------------------------------------------------

    def _on_load_requested(self, path: str, settings: LoadSettings) -> None:
        row = self.catalog.find(path)
        if row is None or not row.can_load:
            return
        if self.engine is None:
            self.library_page.show_error("The engine is not running, so no model can be loaded.")
            return
        model_id = self._unique_id(row.entry.name)
        self.catalog.update(path, busy="Loading…", error=None)
        factory = self._config_factory

        def load() -> str:
            self.engine.load_model(model_id, factory(path, settings))
            return model_id

        def done(mid: str) -> None:
            self.catalog.update(path, busy=None, model_id=mid, error=None)
            self.adapters_page.refresh_models(select=mid)
            self.model_loaded.emit(mid)

        def failed(e: Exception) -> None:
            words = e.short + " (or press Fit)" if isinstance(e, DoesNotFit) else _text(e)
            text = f"Could not load {row.entry.name}: {words}"
            self.catalog.update(path, busy=None, error=text)
            self.library_page.show_error(text)
            self._report(text)

        self.engine_runner.run(load, done, failed)

    def _on_attach_requested(self, path: str, model_id: str) -> None:
        """An adapter picked in the Library: attach it on the Adapters page, which shows it."""
        self.adapters_page.refresh_models(select=model_id)
        self.show_page("adapters")
        self.adapters_page.attach_adapter(path)

    def _unique_id(self, name: str) -> str:
        taken = {m.id for m in self.engine.list_models()}
        taken |= {r.model_id for r in self.catalog.rows() if r.model_id}
        candidate, n = name, 2
        while candidate in taken:
            candidate, n = f"{name}-{n}", n + 1
        return candidate

    # -- scans and downloads ------------------------------------------------------------------

    def _on_scanned(self, entries: list[ModelEntry]) -> None:
        self._scanning = False
        self.catalog.reset(entries, self._loaded_paths())
        target = self._select_after_scan
        if target is not None and self.library_page.select_path(target):
            self._select_after_scan = None
        load = self._load_after_scan
        if load is not None and (self.catalog.find(load) is not None or not self._scan_again):
            self._load_after_scan = None  # a scan that started before the file was added lacks it
            self.load_model(load)
        self.library_refreshed.emit()
        if self._scan_again:
            self._scan_again = False
            self.rescan()

    def _on_scan_failed(self, e: Exception) -> None:
        self._scanning = False
        self._report(f"Could not read the model folders: {_text(e)}")

    def _on_download_finished(self, item: DownloadItem) -> None:
        assert item.path is not None
        self._select_after_scan = item.path
        self.rescan()
        self.download_finished.emit(str(item.path))

    # -- helpers ------------------------------------------------------------------------------

    def _loaded_paths(self) -> dict[Path, str]:
        if self.engine is None:
            return {}
        return {_resolve(Path(m.path)): m.id for m in self.engine.list_models()}

    def _path_of(self, model_id: str) -> Path | None:
        for r in self.catalog.rows():
            if r.model_id == model_id:
                return r.path
        return None

    def _report(self, text: str) -> None:
        log.info("models: %s", text)
        self.error_raised.emit(text)

    def _apply_style(self) -> None:
        c = colors()
        if c.name != self._theme:
            self._theme = c.name
            self.setStyleSheet(models_stylesheet(c))

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_style()
        super().changeEvent(event)


def _resolve(p: Path) -> Path:
    try:
        return p.resolve()
    except OSError:
        return p


def _text(e: Exception) -> str:
    return str(getattr(e, "message", None) or e or type(e).__name__)
