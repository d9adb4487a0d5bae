"""Application entry: ``create_window`` wires engine, default model, database and widgets
without running an event loop; ``main`` runs it under qasync."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, MutableMapping
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtWidgets import QApplication, QWidget

from app import log_file
from app.conversation.accounting import source_of
from app.engine.config import ModelConfig
from app.engine.errors import EngineError
from app.engine.events import Reuse, ReuseRecord
from app.remote.endpoint import is_remote_id
from app.remote.registry import RemoteRegistry
from app.storage import SamplingSettings, Storage, StorageError, database_path
from app.storage import data_dir as resolve_data_dir
from app.ui import gui_gc, wheel_guard
from app.ui.aio import gui_loop
from app.ui.bridges import ModelBridges
from app.ui.chat.controller import ChatController
from app.ui.confirm import confirm_stop, writing_words
from app.ui.engine_api import EngineApi, ServedEngine
from app.ui.engine_bridge import qthread_starter
from app.ui.main_window import MainWindow
from app.ui.memory_settings import MemoryNotices
from app.ui.models.manager import default_config_factory
from app.ui.models.settings import (
    SETTINGS_FILE,
    JsonSettingsStore,
    LoadSettings,
    load_settings_for,
    save_settings_for,
)
from app.ui.startup import ModelLoading
from app.ui.state.library_memory import ModelFiles, remembered_library
from app.ui.theme import apply_theme

if TYPE_CHECKING:
    from app.ui.models import ModelManager

log = logging.getLogger(__name__)

EngineFactory = Callable[[Path], ServedEngine]

DEFAULT_SYSTEM_PROMPT = "You are Hearth, a helpful assistant running locally. Answer clearly."


def default_engine_factory(path: Path) -> ServedEngine:
    from app.engine import Engine

    return Engine(path, thread_starter=qthread_starter)


def default_model_settings(
    store: MutableMapping[str, object], model_path: str, overrides: dict[str, int | bool] | None = None
) -> LoadSettings:
    """The default model's load settings: the Library's, so the form shows what runs.

    ``overrides`` (tests, tools) replace fields and are remembered like an edit in the form.
    """
    from app.models.library import read_entry

    entry = read_entry(model_path)
    settings = load_settings_for(store, model_path, entry.context_length)
    if overrides:
        known = {f.name for f in fields(LoadSettings)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown model option(s) {sorted(unknown)}; known: {sorted(known)}")
        for name, value in overrides.items():
            if not settings.fits(name, value):
                kind = "true or false" if isinstance(getattr(settings, name), bool) else "a whole number"
                raise ValueError(f"model option {name} takes {kind}, not {value!r}")
        checked: dict[str, Any] = dict(overrides)  # each value fits its field (mypy cannot tell)
        settings = replace(settings, **checked)
    save_settings_for(store, model_path, settings)
    return settings


def create_window(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    engine_factory: EngineFactory | None = None,
    model_path: str | os.PathLike[str] | None = None,
    model_id: str | None = None,
    model_options: dict[str, int | bool] | None = None,
    default_sampling: SamplingSettings | None = None,
    work_areas: bool = True,
    load_in_background: bool = False,
    log_to_file: bool = False,
) -> MainWindow:
    """Build the whole window (engine, default model, database); no event loop is entered.

    ``data_dir`` defaults to ``HEARTH_DATA_DIR`` or the user data dir. The keyword seams
    (``engine_factory``, ``model_path`` …) let tests and tools swap parts;
    ``work_areas=False`` keeps placeholders for the Models and Cache areas.
    ``load_in_background=True`` (what ``main`` uses) returns before the default model is
    loaded: the window shows a loading state until it is (``window.model_loading``), then
    the model joins the chat through ``MainWindow.attach_model``.
    ``log_to_file=True`` (what ``main`` uses) also writes the log to ``<data dir>/logs/
    hearth.log``, rotated (``app.log_file``), until the window closes.
    """
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    gui_gc.install(app)  # cycles holding Qt objects are freed on this thread only
    wheel_guard.install(app)  # the wheel scrolls panels; it changes only a focused field
    base = resolve_data_dir(data_dir)
    log_path = log_file.install(base) if log_to_file else None
    errors: list[str] = []
    storage = Storage(database_path(base))
    try:
        storage.purge_deleted()
    except StorageError as exc:
        errors.append(str(exc))
    apply_theme(app, str(storage.get_setting("theme", "system")))
    load_settings = JsonSettingsStore(base / SETTINGS_FILE)

    engine: ServedEngine | None = None
    try:
        engine = (engine_factory or default_engine_factory)(base)
    except (EngineError, OSError) as exc:
        log.exception("could not start the engine")
        errors.append(f"Could not start the engine: {exc}")
    models = ModelBridges(engine)
    model_files = ModelFiles(storage)  # where each local model was loaded from, across restarts

    def remember_file(model_id: str) -> None:
        if engine is not None and not is_remote_id(model_id):
            with contextlib.suppress(EngineError):  # unloaded again meanwhile
                model_files.remember(model_id, engine.get_model(model_id).config.path)

    models.opened.connect(remember_file)
    loaded_id = ""
    pending: tuple[str, Callable[[], ModelConfig], str] | None = None  # id, config, label
    if engine is not None:
        try:
            path = str(model_path) if model_path is not None else str(_default_model_path())
            loaded_id = model_id or Path(path).stem
            settings = default_model_settings(load_settings, path, model_options)
            config = default_config_factory(path, settings)
            if load_in_background:
                pending = (loaded_id, lambda: config, Path(path).stem)
            else:
                models.open(loaded_id, engine.load_model(loaded_id, config))
        except (EngineError, OSError, ValueError) as exc:  # the window still opens, says why
            log.exception("could not load the model")
            errors.append(f"Could not load the model: {exc}")
            loaded_id = ""

    controller = ChatController(
        storage,
        models,
        default_model_id=loaded_id,
        default_sampling=default_sampling,
        default_system_prompt=DEFAULT_SYSTEM_PROMPT,
    )

    # Remote models the user added in the Library: chats use them like loaded ones.
    remote_models = RemoteRegistry(storage)  # an unreadable setting: logged, an empty list
    models.follow_registry(remote_models)

    def close_all() -> None:
        if engine is not None:
            try:
                engine.close()
            except Exception:  # closing must go on; the traceback is logged
                log.exception("engine.close failed")
        storage.close()
        if log_path is not None:
            log.info("Hearth closed")
            log_file.uninstall(base)

    model_manager = cache_dashboard = None
    if work_areas and engine is not None:
        model_manager = _build_model_manager(engine, base, load_settings, models, errors, remote_models, storage)
        cache_dashboard = _build_cache_dashboard(engine, storage, errors)
        keep = getattr(cache_dashboard, "keep_requests_of", None)
        if keep is not None:  # before a model's bridge goes, its requests are kept for the list
            models.released.connect(keep)
    if model_manager is not None and engine is not None:
        _load_files_for_chats(controller, model_manager, engine, model_files)
        model_manager.confirm_unload = lambda model_id: _unload_is_ok(controller, model_manager, model_id)

    window = MainWindow(
        storage,
        controller,
        engine=engine,
        on_close=close_all,
        model_manager=model_manager,
        cache_dashboard=cache_dashboard,
    )
    window.log_file = log_path
    if engine is not None:  # the memory budget's notices ("memory short: …") in the banner
        notices = MemoryNotices(engine, window)  # (its subscription and its parent keep it)
        notices.said.connect(lambda text: window.banner.show_message(text, kind="info"))
    if log_path is not None:
        log.info("Hearth started; data dir %s", base)
    window.restore_session()
    for text in errors:
        window.show_error(text)
    if pending is not None and engine is not None:
        window.model_loading = ModelLoading(window, window, engine, *pending)
        window.model_loading.start()
    gui_gc.collect_due()  # building the window's garbage, now rather than in its first seconds
    return window


def _build_model_manager(
    engine: EngineApi,
    base: Path,
    load_settings: MutableMapping[str, object],
    models: ModelBridges,
    errors: list[str],
    remote_models: RemoteRegistry,
    storage: Storage,
) -> ModelManager | None:
    try:
        from app.models.hub import HubClient
        from app.ui.models import ModelManager
        from app.ui.remote.panel import RemoteModelsPanel

        models_dir = base / "models"
        models_dir.mkdir(parents=True, exist_ok=True)
        manager = ModelManager(
            engine,
            remembered_library(storage, models_dir),  # with the folders and files added before
            HubClient(models_dir=models_dir),
            settings=load_settings,
            before_unload=models.release,
        )
        manager.library_page.add_section(RemoteModelsPanel(remote_models))
    except Exception as exc:  # the window must open whatever else fails; logged with traceback
        log.exception("the Models view could not be built")
        errors.append(f"The Models view could not be opened: {exc}")
        return None
    manager.model_loaded.connect(models.open)
    return manager


def _unload_is_ok(controller: ChatController, parent: QWidget, model_id: str) -> bool:
    """Nothing is being written by ``model_id``, or the user agreed to stop it."""
    cids = controller.replies.writing(model_id)
    if not cids:
        return True
    titles = [controller.title_of(cid) or "a chat" for cid in cids]
    return confirm_stop(
        parent, f"Unload {model_id}?",
        f"{model_id} is still writing a reply in {writing_words(titles)}. Unloading stops it: what it "
        "wrote so far is kept, marked interrupted, with Continue once a model is loaded.", "Unload",
    )  # fmt: skip


def _load_files_for_chats(
    controller: ChatController, manager: ModelManager, engine: EngineApi, model_files: ModelFiles
) -> None:
    """A chat's "Load …" / "Locate…": load that file through the Library, and once it is
    loaded, the chat replies with it (a located file may load under another id)."""
    controller.model_files = model_files
    waiting: dict[Path, str] = {}  # the file → the chat that asked for it

    def requested(cid: str, path: str) -> None:
        waiting[Path(path).resolve()] = cid
        manager.load_file(path)

    def loaded(model_id: str) -> None:
        try:
            path = Path(engine.get_model(model_id).config.path).resolve()
        except EngineError:
            return
        cid = waiting.pop(path, None)
        if cid is not None and controller.model_of(cid) != model_id:
            controller.set_model(cid, model_id)

    controller.model_file_requested.connect(requested)
    manager.model_loaded.connect(loaded)


def _build_cache_dashboard(engine: EngineApi, storage: Storage, errors: list[str]) -> QWidget | None:
    def session_title(session_id: str) -> str | None:
        try:
            return storage.get_conversation(session_id).title
        except StorageError:
            return None

    try:
        from app.ui.cache.dashboard import CacheDashboard

        return CacheDashboard(
            engine, session_namer=session_title, past_requests=lambda t: _past_requests(storage, t)
        )
    except Exception as exc:  # the window must open whatever else fails; logged with traceback
        log.exception("the Cache view could not be built")
        errors.append(f"The Cache view could not be opened: {exc}")
        return None


def _past_requests(storage: Storage, before: float) -> list[tuple[str, ReuseRecord]]:
    """The chats' replies written before ``before``, as "What was reused" lists requests."""
    try:
        replies = storage.recent_replies(before)
    except StorageError as exc:  # the tab then shows this run's requests only
        log.warning("could not read the earlier replies: %s", exc)
        return []
    out = []
    for msg, model_id in replies:
        stats = msg.stats
        assert stats is not None
        source = source_of(stats.reuse_source, stats.miss_reason, stats.cache_hit_kind)
        reused = stats.tokens_reused if source == stats.reuse_source else stats.cache_read
        reuse = Reuse(
            source,  # type: ignore[arg-type]  # a stored string; kind_of() tells unknown ones
            reused,
            max(stats.tokens_shared, reused),
            stats.miss_reason or None,  # type: ignore[arg-type]
            stats.origin_session or None,
            stats.tokens_read_ahead,
        )
        kind = stats.cache_hit_kind or "cold"
        record = ReuseRecord(msg.conversation_id, stats.prompt_tokens, reuse, kind, msg.created)  # type: ignore[arg-type]
        out.append((model_id, record))
    return out


def _default_model_path() -> Path:
    from app.models.default_model import default_model_path

    return default_model_path()


def main(argv: list[str] | None = None) -> int:
    """Run the GUI: QApplication + qasync loop on the GUI thread."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    assert isinstance(app, QApplication)
    app.setApplicationName("Hearth")
    app.setOrganizationName("Hearth")
    app.setQuitOnLastWindowClosed(True)
    loop = gui_loop()  # the qasync loop the UI's coroutines run on
    from app.engine.llama.kv_calibration import allow_background

    allow_background()  # a model's first load on this CPU calibrates its KV cell types in a child
    window = create_window(load_in_background=True, log_to_file=True)
    window.show()
    closed = asyncio.Event()
    app.aboutToQuit.connect(closed.set)
    try:
        loop.run_until_complete(closed.wait())
    finally:
        window.shutdown()
    return 0
