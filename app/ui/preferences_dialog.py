"""Settings…: the theme (system / light / dark), what new chats start with, and presets.

Every change applies at once and is kept in the app database through
:class:`~app.storage.Preferences`, so it survives a restart: the theme on click, the new-chat
settings shortly after an edit stops (and when the dialog closes), a preset on Delete.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.conversation.type_ahead import TypeAheadSetting
from app.storage import THEMES, ChatPreset, Preferences, SamplingSettings, StorageError
from app.ui.chat.sampling_form import ChatSettingsForm, section

THEME_LABELS = {"system": "Follow the system", "light": "Light", "dark": "Dark"}


class PreferencesDialog(QDialog):
    theme_chosen = Signal(str)
    defaults_changed = Signal(object)  # ChatPreset | None (None: back to the built-in ones)
    presets_changed = Signal()
    type_ahead_changed = Signal(bool)  # read drafts ahead while they are typed, app-wide
    error_raised = Signal(str)

    def __init__(
        self,
        prefs: Preferences,
        *,
        builtin_defaults: ChatPreset,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("preferencesDialog")
        self.setWindowTitle("Settings")
        self.prefs = prefs
        self._builtin = builtin_defaults
        self.tabs = QTabWidget()
        self.tabs.addTab(self._build_appearance(), "Appearance")
        self.tabs.addTab(self._build_new_chats(), "New chats")
        self.tabs.addTab(self._build_presets(), "Presets")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        # NOTE: no layout-driven minimum pushed to the platform window (offscreen warns).
        layout.setSizeConstraint(QVBoxLayout.SizeConstraint.SetNoConstraint)
        layout.addWidget(buttons)
        self.resize(460, 560)
        self._save_timer = QTimer(self)
        self._save_timer.setSingleShot(True)
        self._save_timer.setInterval(300)
        self._save_timer.timeout.connect(self.save_defaults)
        self.defaults_form.edited.connect(self._save_timer.start)
        self.finished.connect(lambda _r: self.flush())

    # -- pages ----------------------------------------------------------------------------

    def _build_appearance(self) -> QWidget:
        page = QWidget()
        v = QVBoxLayout(page)
        v.addWidget(section("THEME"))
        self.theme_group = QButtonGroup(self)
        self.theme_buttons: dict[str, QRadioButton] = {}
        current = self.prefs.theme()
        for scheme in THEMES:
            b = QRadioButton(THEME_LABELS[scheme])
            b.setObjectName(f"theme_{scheme}")
            b.setChecked(scheme == current)
            self.theme_group.addButton(b)
            self.theme_buttons[scheme] = b
            b.toggled.connect(lambda on, s=scheme: self._on_theme_toggled(on, s))
            v.addWidget(b)
        v.addStretch(1)
        return page

    def _build_new_chats(self) -> QWidget:
        self.defaults_form = ChatSettingsForm()
        stored = self.prefs.chat_defaults()
        start = stored or self._builtin
        self.defaults_form.load(start.system_prompt, start.sampling)
        self.reset_button = QPushButton("Back to the built-in settings")
        self.reset_button.setObjectName("resetDefaultsButton")
        self.reset_button.clicked.connect(self.reset_defaults)
        note = QLabel("A new chat starts with these. Chats you already have keep their own.")
        note.setObjectName("caption")
        note.setWordWrap(True)
        self.type_ahead = QCheckBox("Read my message while I type it (type-ahead)")
        self.type_ahead.setObjectName("typeAheadDefault")
        self.type_ahead.setToolTip(
            "While you write, the model already reads your message, so the reply starts "
            "sooner after Enter; the reply is the same. Never for remote models. "
            "A chat's own settings can turn it off for that chat."
        )
        try:
            self.type_ahead.setChecked(TypeAheadSetting(self.prefs.storage).default())
        except StorageError:
            self.type_ahead.setChecked(True)
        self.type_ahead.toggled.connect(self.set_type_ahead)
        body = QWidget()
        v = QVBoxLayout(body)
        v.addWidget(note)
        v.addWidget(self.type_ahead)
        v.addWidget(self.defaults_form)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.reset_button)
        v.addLayout(row)
        v.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(body)
        return scroll

    def _build_presets(self) -> QWidget:
        page = QWidget()
        v = QVBoxLayout(page)
        note = QLabel(
            "A preset is a system prompt with its sampling. Save one from a chat's Settings "
            "panel (“Save as preset…”); pick it there to apply it."
        )
        note.setObjectName("caption")
        note.setWordWrap(True)
        self.preset_list = QListWidget()
        self.preset_list.setObjectName("presetList")
        self.delete_preset_button = QPushButton("Delete")
        self.delete_preset_button.setObjectName("deletePresetButton")
        self.delete_preset_button.clicked.connect(self._on_delete_clicked)
        self.preset_list.currentRowChanged.connect(
            lambda row: self.delete_preset_button.setEnabled(row >= 0)
        )
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.delete_preset_button)
        v.addWidget(note)
        v.addWidget(self.preset_list, 1)
        v.addLayout(row)
        self.reload_presets()
        return page

    # -- actions --------------------------------------------------------------------------

    def choose_theme(self, scheme: str) -> None:
        try:
            self.prefs.set_theme(scheme)
        except StorageError as exc:
            self.error_raised.emit(f"Could not save the theme: {exc}")
        self.theme_buttons[scheme].setChecked(True)
        self.theme_chosen.emit(scheme)

    def _on_theme_toggled(self, on: bool, scheme: str) -> None:
        if on and self.prefs.theme() != scheme:
            self.choose_theme(scheme)

    def save_defaults(self) -> None:
        self._save_timer.stop()
        form = self.defaults_form
        try:
            preset = self.prefs.set_chat_defaults(form.system_prompt_text(), form.sampling())
        except StorageError as exc:
            self.error_raised.emit(f"Could not save the settings for new chats: {exc}")
            return
        self.defaults_changed.emit(preset)

    def set_type_ahead(self, on: bool) -> None:
        try:
            TypeAheadSetting(self.prefs.storage).set_default(on)
        except StorageError as exc:
            self.error_raised.emit(f"Could not save the type-ahead setting: {exc}")
            return
        self.type_ahead_changed.emit(on)

    def reset_defaults(self) -> None:
        self._save_timer.stop()
        try:
            self.prefs.reset_chat_defaults()
        except StorageError as exc:
            self.error_raised.emit(f"Could not reset the settings for new chats: {exc}")
            return
        self.defaults_form.load(self._builtin.system_prompt, self._builtin.sampling)
        self.defaults_changed.emit(None)

    def delete_preset(self, name: str) -> None:
        try:
            self.prefs.delete_preset(name)
        except StorageError as exc:
            self.error_raised.emit(f"Could not delete the preset: {exc}")
            return
        self.reload_presets()
        self.presets_changed.emit()

    def reload_presets(self) -> None:
        self.preset_list.clear()
        for p in self.prefs.presets():
            self.preset_list.addItem(p.name)
        self.delete_preset_button.setEnabled(self.preset_list.currentRow() >= 0)

    def flush(self) -> None:
        """Save an edit of the new-chat settings that is still waiting."""
        if self._save_timer.isActive():
            self.save_defaults()

    def _on_delete_clicked(self) -> None:
        item = self.preset_list.currentItem()
        if item is not None:
            self.delete_preset(item.text())


def builtin_preset(system_prompt: str, sampling: SamplingSettings) -> ChatPreset:
    return ChatPreset("Built-in", system_prompt, sampling)
