"""The window's menus and keyboard shortcuts, and the app-wide preferences they open.

``install_app_actions(window)`` is the one hook the main window calls. It adds the menu bar
(Hearth · View · Help), binds every key of :data:`app.ui.shortcuts.SHORTCUTS` that belongs to
a window action, applies the stored new-chat settings to the chat controller, and hands the
presets to the chat's settings panel. Esc stops the open conversation's reply; it is enabled
only while that reply runs, so everywhere else Esc keeps its usual meaning (close a popup,
cancel an edit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QDialog, QMainWindow, QMenu, QMessageBox, QToolButton, QWidget

from app.storage import THEMES, ChatPreset, Preferences, Storage, StorageError
from app.ui.chat.adapter_chip import AdapterIndicator
from app.ui.chat.chat_page import ChatPage
from app.ui.chat.controller import ChatController
from app.ui.chat.tools_panel import ToolsSettings
from app.ui.engine_api import EngineApi
from app.ui.memory_settings import MemorySettings, apply_stored_cap
from app.ui.preferences_dialog import THEME_LABELS, PreferencesDialog
from app.ui.server import LocalServer, LocalServerPanel
from app.ui.shortcuts import ShortcutsDialog, shortcut

log = logging.getLogger(__name__)

AREAS = ("chat", "models", "cache")


class ActionsWindow(Protocol):
    """What the actions reach in the main window (``MainWindow`` is one)."""

    @property
    def storage(self) -> Storage: ...
    @property
    def controller(self) -> ChatController: ...
    @property
    def chat_page(self) -> ChatPage: ...
    @property
    def engine(self) -> EngineApi | None: ...
    @property
    def model_manager(self) -> QWidget: ...
    @property
    def local_server(self) -> LocalServer | None: ...
    @property
    def nav_buttons(self) -> dict[str, QToolButton]: ...
    @property
    def log_file(self) -> Path | None: ...
    def show_error(self, text: str) -> None: ...
    def apply_scheme(self, scheme: str) -> None: ...
    def request_quit(self) -> None: ...


class AppActions(QObject):
    """Owns the window's QActions (``actions`` by name) and the Settings dialog."""

    def __init__(self, window: ActionsWindow, widget: QMainWindow) -> None:
        """``window`` is what the actions reach; ``widget`` is the same window as the
        ``QMainWindow`` that holds the menu bar and parents the dialogs."""
        super().__init__(widget)
        self.window = window
        self.widget = widget
        self.prefs = Preferences(window.storage)
        controller = window.controller
        self.builtin = ChatPreset(
            "Built-in", controller.default_system_prompt, controller.default_sampling
        )
        stored = self.prefs.chat_defaults()
        if stored is not None:
            self.apply_defaults(stored)
        apply_stored_cap(window.engine, window.storage)  # Settings › Memory
        self.actions: dict[str, QAction] = {}
        self.dialog: PreferencesDialog | None = None
        self.shortcuts_dialog: ShortcutsDialog | None = None
        self._build_menus()
        panel = window.chat_page.settings_panel
        panel.set_preferences(self.prefs)
        panel.defaults_changed.connect(self.apply_defaults)
        panel.error_raised.connect(window.show_error)
        controller.busy_changed.connect(lambda *_: self._update_stop())
        # The chat header's LoRA chip follows the chat's model and its adapters.
        self.adapter_indicator = AdapterIndicator(
            window.chat_page.adapter_chip, window.engine, lambda: window.controller.model_of(window.chat_page.current_id)
        )
        changed = getattr(window.model_manager, "adapters_changed", None)
        if changed is not None:
            changed.connect(self.adapter_indicator.refresh)
        controller.busy_changed.connect(self.adapter_indicator.refresh)
        window.chat_page.current_changed.connect(self.adapter_indicator.refresh)
        window.chat_page.current_changed.connect(lambda *_: self._update_stop())
        self._update_stop()

    # -- construction ---------------------------------------------------------------------

    def _build_menus(self) -> None:
        bar = self.widget.menuBar()
        bar.setObjectName("menuBar")
        app_menu = bar.addMenu("&Hearth")
        self._add(app_menu, "new_chat", self.new_chat)
        self._add(app_menu, "search", self.focus_search)
        app_menu.addSeparator()
        self._add(app_menu, "settings", self.open_settings, text="Settings…")
        app_menu.addSeparator()
        self._add(app_menu, "quit", self.window.request_quit)

        view = bar.addMenu("&View")
        for name, area in zip(("go_chat", "go_models", "go_cache"), AREAS, strict=True):
            self._add(view, name, self._area_slot(area))
        view.addSeparator()
        themes = view.addMenu("Theme")
        themes.setObjectName("themeMenu")
        group = QActionGroup(self)
        group.setExclusive(True)
        current = self.prefs.theme()
        for scheme in THEMES:
            act = QAction(THEME_LABELS[scheme], self)
            act.setObjectName(f"themeAction_{scheme}")
            act.setCheckable(True)
            act.setChecked(scheme == current)
            act.triggered.connect(lambda _c=False, s=scheme: self.set_theme(s))
            group.addAction(act)
            themes.addAction(act)
            self.actions[f"theme_{scheme}"] = act

        help_menu = bar.addMenu("&Help")
        self._add(help_menu, "shortcuts", self.show_shortcuts, text="Keyboard shortcuts")
        about = help_menu.addAction("About Hearth")
        about.triggered.connect(self._on_about_triggered)

        # Esc has no menu entry: it acts on the open chat, and only while it streams.
        stop = self._action("stop", self.stop_reply)
        stop.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.widget.addAction(stop)

    def _action(self, name: str, slot: Callable[[], object], text: str | None = None) -> QAction:
        s = shortcut(name)
        act = QAction(text or s.label, self)
        act.setObjectName(f"action_{name}")
        act.setShortcut(QKeySequence(s.keys))
        act.triggered.connect(lambda _checked=False: slot())
        self.actions[name] = act
        return act

    def _add(self, menu: QMenu, name: str, slot: Callable[[], object], text: str | None = None) -> None:
        menu.addAction(self._action(name, slot, text))

    def _area_slot(self, area: str) -> Callable[[], None]:
        return lambda: self.show_area(area)

    # -- actions --------------------------------------------------------------------------

    def show_area(self, area: str) -> None:
        self.window.nav_buttons[area].click()

    def new_chat(self) -> None:
        self.show_area("chat")
        self.window.chat_page.new_conversation()

    def focus_search(self) -> None:
        self.show_area("chat")
        field = self.window.chat_page.sidebar.search
        field.setFocus(Qt.FocusReason.ShortcutFocusReason)
        field.selectAll()

    def stop_reply(self) -> None:
        cid = self.window.chat_page.current_id
        if cid and self.window.controller.is_busy(cid):
            self.window.controller.stop(cid)

    def set_theme(self, scheme: str) -> None:
        """Apply ``scheme`` and remember it for the next start."""
        if self.dialog is not None and self.prefs.theme() != scheme:
            self.dialog.choose_theme(scheme)  # keeps the dialog's radios in step; saves
            return
        self._on_theme_chosen(scheme)
        try:
            self.prefs.set_theme(scheme)
        except StorageError as exc:  # the theme still applies; only remembering failed
            self.window.show_error(f"Could not save the theme: {exc}")

    def apply_defaults(self, preset: ChatPreset | None) -> None:
        """New chats start with ``preset`` (None: the built-in settings)."""
        chosen = preset or self.builtin
        self.window.controller.default_system_prompt = chosen.system_prompt
        self.window.controller.default_sampling = chosen.sampling

    def open_settings(self) -> PreferencesDialog:
        if self.dialog is None:
            self.dialog = PreferencesDialog(
                self.prefs, builtin_defaults=self.builtin, parent=self.widget
            )
            self.dialog.theme_chosen.connect(self._on_theme_chosen)
            self.dialog.defaults_changed.connect(self.apply_defaults)
            self.dialog.presets_changed.connect(
                self.window.chat_page.settings_panel.reload_presets
            )
            self.dialog.error_raised.connect(self.window.show_error)
            self.dialog.type_ahead_changed.connect(
                lambda _on: self.window.chat_page.type_ahead.follow_setting()
            )
            self.dialog.finished.connect(self._on_dialog_finished)
            if self.window.local_server is not None:
                panel = LocalServerPanel(self.window.local_server, self.window.storage)
                self.dialog.tabs.addTab(panel, "Local server")
            self.dialog.tabs.addTab(ToolsSettings(self.window.controller.tools), "Tools")
            self.dialog.tabs.addTab(MemorySettings(self.window.engine, self.window.storage), "Memory")
        _present(self.dialog)
        return self.dialog

    def show_shortcuts(self) -> ShortcutsDialog:
        if self.shortcuts_dialog is None:
            self.shortcuts_dialog = ShortcutsDialog(self.widget)
        _present(self.shortcuts_dialog)
        return self.shortcuts_dialog

    # -- slots ----------------------------------------------------------------------------

    def _on_theme_chosen(self, scheme: str) -> None:
        self.actions[f"theme_{scheme}"].setChecked(True)
        self.window.apply_scheme(scheme)

    def _on_dialog_finished(self, _result: int) -> None:
        if self.dialog is not None:
            self.dialog.deleteLater()
            self.dialog = None

    def _on_about_triggered(self) -> None:
        from app import __version__

        QMessageBox.about(
            self.widget,
            "About Hearth",
            f"Hearth {__version__}\nLocal language models that never make you wait twice "
            "for the same prompt."
            + (f"\n\nLog file (attach it to bug reports):\n{self.window.log_file}"
               if self.window.log_file is not None else ""),
        )

    def _update_stop(self) -> None:
        cid = self.window.chat_page.current_id
        self.actions["stop"].setEnabled(bool(cid) and self.window.controller.is_busy(cid or ""))


def _present(dialog: QDialog) -> None:
    """Show a non-modal dialog, or bring it to the front when it is already open."""
    if dialog.isVisible():
        dialog.raise_()
        dialog.activateWindow()
    else:
        dialog.show()


def install_app_actions(window: ActionsWindow, widget: QMainWindow) -> AppActions:
    """Menus, shortcuts and preferences for ``window`` (call once, at the end of its setup)."""
    return AppActions(window, widget)
