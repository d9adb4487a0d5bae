"""The main window: navigation rail, work areas, notification banner, status bar.

Window geometry, the chat splitter and the last open conversation are kept in the app
database's settings table and restored on the next start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QByteArray, QSize, Qt
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QApplication,
    QButtonGroup,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QMainWindow,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.conversation.accounting import HitAccount, HitTotals
from app.storage import Storage, StorageError
from app.ui.app_actions import install_app_actions
from app.ui.bridge_records import StatusSnapshot
from app.ui.chat.chat_page import ChatPage
from app.ui.chat.controller import ChatController
from app.ui.confirm import confirm_stop, writing_words
from app.ui.engine_api import ServedEngine
from app.ui.placeholders import PlaceholderArea
from app.ui.server import LocalServer
from app.ui.server.panel import restore_local_server
from app.ui.startup import ModelLoading
from app.ui.theme import apply_theme, current_icon
from app.ui.widgets.banner import NotificationBanner

log = logging.getLogger(__name__)

UNDO_MS = 10_000
DRAFTS_KEY = "chat_drafts"
"""Each chat's unsent message, saved at quit and put back in its box at the next start."""


class MainWindow(QMainWindow):
    def __init__(
        self,
        storage: Storage,
        controller: ChatController,
        *,
        engine: ServedEngine | None = None,
        on_close: Callable[[], None] | None = None,
        model_manager: QWidget | None = None,
        cache_dashboard: QWidget | None = None,
    ) -> None:
        super().__init__()
        self.setObjectName("mainWindow")
        self.setWindowTitle("Hearth")
        self.storage = storage
        self.controller = controller
        self.engine = engine
        self.log_file: Path | None = None
        """The rotated log file under the data dir, when the app writes one (``app.log_file``)."""
        self.models = controller.models
        self._on_close = on_close
        self._closed = False
        self._quit_agreed = False  # Quit asked already (closeEvent must not ask again)
        self.last_status: StatusSnapshot | None = None
        self.model_loading: ModelLoading | None = None  # set while the default model loads
        """The latest status of the open conversation's model."""
        self._statuses: dict[str, StatusSnapshot] = {}
        self._hits = HitAccount(engine.cache) if engine is not None else None

        self.chat_page = ChatPage(controller)
        # The Models and Cache areas come from their own packages; a placeholder stands in
        # when one could not be built (the window must open whatever else fails).
        self.model_manager: QWidget = model_manager or PlaceholderArea(
            "modelManager", "Models", "Local GGUF library, Hub downloads and LoRA adapters."
        )
        self.cache_dashboard: QWidget = cache_dashboard or PlaceholderArea(
            "cacheDashboard", "Cache", "KV cache rows, tiers, counters and the live scheduler."
        )
        self.stack = QStackedWidget()
        for page in (self.chat_page, self.model_manager, self.cache_dashboard):
            self.stack.addWidget(page)

        rail = self._build_rail()
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)
        rl.addWidget(self.stack, 1)
        # Over the work area's top, not in its layout: nothing moves when it comes or goes.
        self.banner = NotificationBanner(right, overlay=True)
        central = QWidget()
        cl = QHBoxLayout(central)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(rail)
        cl.addWidget(right, 1)
        self.setCentralWidget(central)
        self._build_status_bar()

        controller.error_raised.connect(self.show_error)
        controller.info_raised.connect(self.show_info)
        controller.chat_error.connect(self._on_chat_error)
        controller.failure_cleared.connect(self._on_failure_cleared)
        for area in (self.model_manager, self.cache_dashboard):
            for name in ("error_raised", "action_failed"):
                signal = getattr(area, name, None)
                if signal is not None:
                    signal.connect(lambda *args: self.show_error(str(args[-1])))
        controller.conversation_deleted.connect(self._on_conversation_deleted)
        controller.models_changed.connect(self._refresh_status)
        controller.conversation_updated.connect(lambda _cid: self._refresh_status())
        self.models.status_received.connect(self._on_status_received)
        self.models.released.connect(self._on_model_released)
        self.models.opened.connect(self._on_model_opened)
        self.chat_page.current_changed.connect(lambda _cid: self._refresh_status())
        self.chat_page.current_changed.connect(self._on_current_changed)
        self.chat_page.library_requested.connect(self.show_library)
        hints = QApplication.styleHints()
        hints.colorSchemeChanged.connect(self._on_color_scheme_changed)
        # NOTE: a fixed minimum instead of the layout-driven one: the layout would push a new
        # minimum to the platform window whenever content changes (and offscreen/some
        # platforms warn that they cannot propagate size hints).
        layout = self.layout()
        if layout is not None:
            layout.setSizeConstraint(QLayout.SizeConstraint.SetNoConstraint)
        self.setMinimumSize(760, 480)
        self.resize(1280, 820)
        # The "Local server" switch (Settings): the OpenAI-compatible API on this engine.
        self.local_server = LocalServer(engine, self) if engine is not None else None
        # Menus, shortcuts (Ctrl+N, Ctrl+K, Esc …), theme switch and presets: app_actions.py.
        self.app_actions = install_app_actions(self, self)
        if self.local_server is not None:
            restore_local_server(self.local_server, storage)

    # -- construction --------------------------------------------------------------------

    def _build_rail(self) -> QFrame:
        rail = QFrame()
        rail.setObjectName("navRail")
        rail.setFixedWidth(72)
        layout = QVBoxLayout(rail)
        layout.setContentsMargins(8, 14, 8, 14)
        layout.setSpacing(6)
        brand = QLabel("H")
        brand.setObjectName("brandMark")
        brand.setFixedSize(34, 34)
        brand.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(brand, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addSpacing(12)
        self.nav_group = QButtonGroup(self)
        self.nav_buttons: dict[str, QToolButton] = {}
        for i, (key, label) in enumerate(
            (("chat", "Chat"), ("models", "Models"), ("cache", "Cache"))
        ):
            btn = QToolButton()
            btn.setObjectName("navButton")
            btn.setText(label)
            btn.setCheckable(True)
            btn.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextUnderIcon)
            btn.setIconSize(QSize(22, 22))
            btn.setCursor(Qt.CursorShape.PointingHandCursor)
            self.nav_group.addButton(btn, i)
            self.nav_buttons[key] = btn
            layout.addWidget(btn, 0, Qt.AlignmentFlag.AlignHCenter)
        self.nav_buttons["chat"].setChecked(True)
        self.nav_group.idClicked.connect(self.stack.setCurrentIndex)
        self.nav_group.idClicked.connect(lambda _i: self._refresh_icons())
        layout.addStretch(1)
        self._refresh_icons()
        return rail

    def _build_status_bar(self) -> None:
        bar = self.statusBar()
        bar.setSizeGripEnabled(False)
        self.status_model = QLabel("No model loaded")
        self.status_slots = QLabel("Slots –")
        self.status_queue = QLabel("Queue –")
        self.status_hits = QLabel("Cache: hits –")
        for w in (self.status_model, self.status_slots, self.status_queue, self.status_hits):
            w.setObjectName("statusItem")
        bar.addWidget(self.status_model, 1)
        bar.addPermanentWidget(self.status_slots)
        bar.addPermanentWidget(self.status_queue)
        bar.addPermanentWidget(self.status_hits)
        self._refresh_status()

    def _refresh_icons(self) -> None:
        for key, btn in self.nav_buttons.items():
            btn.setIcon(current_icon(key, "text" if btn.isChecked() else "muted"))

    # -- notifications -------------------------------------------------------------------

    def show_error(self, text: str) -> None:
        log.info("notification: %s", text)
        self.banner.show_message(text, kind="error")

    def _on_chat_error(self, cid: str, text: str) -> None:
        """A chat's reply failed: the banner says so while that chat is open and the error
        holds (its card under the message stays with the chat)."""
        log.info("reply failed in %s: %s", cid, text)
        if cid != self.chat_page.current_id:  # a chat in the background: say which
            text = f"“{self.controller.title_of(cid) or 'A chat'}”: {text}"
        self.banner.show_message(text, kind="error", owner=cid)

    def _on_failure_cleared(self, cid: str) -> None:
        if self.banner.owner == cid:
            self.banner.dismiss()

    def _on_model_opened(self, _model_id: str) -> None:
        owner = self.banner.owner
        if owner and self.controller.failure(owner) is None:
            self.banner.dismiss()  # "… was unloaded" or "… not loaded" no longer holds

    def _on_current_changed(self, cid: str) -> None:
        if self.banner.owner and self.banner.owner != cid:
            self.banner.dismiss()  # a chat's error does not follow the user to another

    def show_info(
        self, text: str, *, action: str | None = None, callback: Callable[[], None] | None = None
    ) -> None:
        self.banner.show_message(
            text, kind="info", action=action, callback=callback, timeout_ms=UNDO_MS
        )

    def _on_conversation_deleted(self, cid: str, title: str) -> None:
        def undo() -> None:
            self.controller.undo_delete(cid)
            self.chat_page.open_conversation(cid)

        self.show_info(f"Deleted “{title}”.", action="Undo", callback=undo)

    def attach_model(self, model_id: str) -> None:
        """Chat with ``model_id``, loaded meanwhile (at start in the background): its bridge
        opens through the one owner, as for a model loaded from the Models view."""
        if self.models.open(model_id) is None:
            self.show_error(f"Could not open model {model_id}: it is not loaded")
        sync = getattr(self.model_manager, "sync_loaded", None)
        if sync is not None:
            sync()

    def show_library(self) -> None:
        """Open Models → Library (where models are loaded)."""
        self.nav_buttons["models"].click()
        show_page = getattr(self.model_manager, "show_page", None)
        if show_page is not None:
            show_page("library")

    # -- status --------------------------------------------------------------------------

    def _on_status_received(self, snap: StatusSnapshot) -> None:
        self._statuses[snap.model_id] = snap
        if snap.model_id == self.controller.model_of(self.chat_page.current_id):
            self._refresh_status()

    def _on_model_released(self, model_id: str) -> None:
        self._statuses.pop(model_id, None)
        self._refresh_status()

    def _refresh_status(self) -> None:
        """The open conversation's model (loaded or not), its slots and queue; cache hits."""
        loaded = self.models.ids()
        model_id = self.controller.model_of(self.chat_page.current_id)
        snap = self._statuses.get(model_id) if model_id in loaded else None
        self.last_status = snap
        if self.model_loading is not None and self.model_loading.is_loading:
            pass  # "◌ Loading …" stays until the default model is in (app.ui.startup)
        elif not loaded:
            self.status_model.setText("No model loaded")
        elif model_id in loaded:
            self.status_model.setText(f"● {self.models.label(model_id)}")
        else:
            self.status_model.setText(f"○ {model_id or 'no model'} (not loaded)")
        self.status_model.setToolTip(
            "Loaded: " + ", ".join(loaded) if loaded else "Load a model under Models → Library."
        )
        if snap is None:
            self.status_slots.setText("Slots –")
            self.status_queue.setText("Queue –")
        else:
            self.status_slots.setText(f"Slots {snap.num_busy}/{snap.num_slots} busy")
            self.status_queue.setText(f"Queue {snap.pending_len}")
        totals = self.hit_totals()
        # The same words and figures as the Cache dashboard's headline (one hit accounting).
        self.status_hits.setText(
            f"Cache: hits {totals.percent_text()} · tokens reused: {totals.token_percent_text()}"
        )
        self.status_hits.setToolTip(f"{totals.summary()}.\n{totals.explanation()}")

    def hit_totals(self) -> HitTotals:
        return self._hits.totals() if self._hits is not None else HitTotals()

    # -- theme ---------------------------------------------------------------------------

    def apply_scheme(self, scheme: str) -> None:
        """``light``, ``dark`` or ``system``; redraws icons and the open conversation."""
        app = QApplication.instance()
        assert isinstance(app, QApplication)
        apply_theme(app, scheme)
        self._refresh_icons()
        self.chat_page.refresh_icons()

    def _on_color_scheme_changed(self, _scheme: Qt.ColorScheme) -> None:
        if (self.storage_setting("theme", "system")) == "system":
            self.apply_scheme("system")

    def storage_setting(self, key: str, default: object = None) -> object:
        try:
            return self.storage.get_setting(key, default)
        except StorageError as exc:  # a broken settings row must not break the window
            log.warning("could not read setting %s: %s", key, exc)
            return default

    # -- persistence ---------------------------------------------------------------------

    def restore_session(self) -> None:
        geometry = self.storage_setting("window_geometry")
        if geometry:
            self.restoreGeometry(QByteArray.fromBase64(str(geometry).encode("ascii")))
        splitter = self.storage_setting("chat_splitter")
        self.chat_page.restore_state(splitter if isinstance(splitter, str) else None)
        self.controller.refresh()
        drafts = self.storage_setting(DRAFTS_KEY)
        if isinstance(drafts, dict):  # each chat's unsent message, as it was at the last quit
            self.chat_page.set_drafts({k: v for k, v in drafts.items() if isinstance(v, str)})
        last = self.storage_setting("last_conversation")
        entries = self.controller.catalog.entries()
        ids = [e.id for e in entries]
        if last in ids:
            self.chat_page.open_conversation(last)
        elif ids:
            self.chat_page.open_conversation(ids[0])
        else:
            self.chat_page.open_conversation(None)

    def save_session(self) -> None:
        try:
            self.storage.set_setting(DRAFTS_KEY, self.chat_page.drafts())
            self.storage.set_setting(
                "window_geometry", bytes(self.saveGeometry().toBase64().data()).decode("ascii")
            )
            self.storage.set_setting("chat_splitter", self.chat_page.save_state())
            self.storage.set_setting("last_conversation", self.chat_page.current_id)
        except StorageError as exc:
            log.warning("could not save window state: %s", exc)

    def stopping_replies_is_ok(self, action: str = "Quit") -> bool:
        """Nothing is being written, or the user agreed to stop it (asked once)."""
        cids = self.controller.replies.writing()
        if not cids:
            return True
        titles = [self.controller.title_of(cid) or "a chat" for cid in cids]
        return confirm_stop(
            self, "Quit Hearth?",
            f"A reply is still being written in {writing_words(titles)}. Quitting stops it.", action,
        )  # fmt: skip

    def request_quit(self) -> None:
        """Hearth › Quit (Ctrl+Q): asks first when a reply would stop."""
        if self.stopping_replies_is_ok():
            self._quit_agreed = True
            self.close()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 — Qt override
        # The window manager's close button asks as Quit does; a close from code does not.
        if event.spontaneous() and not self._closed and not self._quit_agreed and not self.stopping_replies_is_ok():
            event.ignore()
            return
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Save layout, stop generations and the bridge, close the engine and database."""
        if self._closed:
            return
        self._closed = True
        self.chat_page.settings_panel.flush()
        self.save_session()
        self.controller.shutdown()
        for area in (self.model_manager, self.cache_dashboard):
            stop = getattr(area, "shutdown", None)
            if stop is not None:
                try:
                    stop()
                except Exception:  # closing must go on; the traceback is logged
                    log.exception("shutting down %s failed", area.objectName())
        if self.local_server is not None:
            self.local_server.shutdown()  # before the engine closes
        self.models.shutdown()  # every bridge stops before the engine frees its model
        if self._on_close is not None:
            self._on_close()
