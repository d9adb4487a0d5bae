"""Per-conversation settings: a preset picker, then the system prompt and sampling form.

Edits are saved shortly after they stop (debounced) through ``settings_edited``. With
:class:`~app.storage.Preferences` attached (``set_preferences``), the panel also offers the
saved presets, "Save as preset…" and "Use for new chats".
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.storage import ChatPreset, Conversation, Preferences, SamplingSettings, StorageError
from app.ui.chat.overflow_box import OverflowBox
from app.ui.chat.sampling_form import ChatSettingsForm, section
from app.ui.chat.tools_panel import ChatToolsBox
from app.ui.widgets.elided import ElidedComboBox

log = logging.getLogger(__name__)

CUSTOM = "Custom"


class SettingsPanel(QScrollArea):
    settings_edited = Signal(str, str, object)  # conversation id, system prompt, SamplingSettings
    defaults_changed = Signal(object)  # ChatPreset: the new settings for new chats
    type_ahead_edited = Signal(str, bool)  # conversation id, read its drafts ahead
    error_raised = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("settingsScroll")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setMinimumWidth(260)
        self._cid: str | None = None
        self._prefs: Preferences | None = None
        body = QWidget()
        body.setObjectName("settingsPanel")
        layout = QVBoxLayout(body)
        layout.setContentsMargins(16, 16, 16, 16)
        layout.setSpacing(8)
        title = QLabel("Conversation settings")
        title.setObjectName("panelTitle")
        layout.addWidget(title)

        self.preset_box = QWidget()
        pl = QVBoxLayout(self.preset_box)
        pl.setContentsMargins(0, 0, 0, 0)
        pl.setSpacing(6)
        pl.addWidget(section("PRESET"))
        self.preset_picker = ElidedComboBox()
        self.preset_picker.setObjectName("presetPicker")
        self.preset_picker.setToolTip("Apply a saved system prompt and sampling to this chat.")
        pl.addWidget(self.preset_picker)
        buttons = QHBoxLayout()
        self.save_preset_button = _small_button("Save as preset…", "savePresetButton")
        self.make_default_button = _small_button("Use for new chats", "makeDefaultButton")
        self.make_default_button.setToolTip("New chats start with this system prompt and sampling.")
        buttons.addWidget(self.save_preset_button)
        buttons.addWidget(self.make_default_button)
        buttons.addStretch(1)
        pl.addLayout(buttons)
        self.preset_box.hide()
        layout.addWidget(self.preset_box)

        self.form = ChatSettingsForm()
        layout.addWidget(self.form)
        self.overflow = OverflowBox()  # this chat's overflow policy (app.ui.chat.overflow_box)
        layout.addWidget(self.overflow)
        self.type_ahead = QCheckBox("Read my message while I type it")
        self.type_ahead.setObjectName("typeAheadCheck")
        self.type_ahead.setToolTip(
            "Type-ahead: the model reads your message as you write it, so the reply starts "
            "sooner after Enter (the reply is the same). Never for remote models."
        )
        self.type_ahead.toggled.connect(self._on_type_ahead_toggled)
        layout.addWidget(section("TYPING"))
        layout.addWidget(self.type_ahead)
        self.tools = ChatToolsBox()  # the MCP servers this chat may use (app.ui.chat.tools_panel)
        layout.addWidget(self.tools)
        layout.addStretch(1)
        self.setWidget(body)
        # Never narrower than what the form needs: the scroll area does not scroll sideways,
        # so anything wider than its viewport would be cut off at the right edge.
        self.preset_box.show()
        need = body.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width() + 2
        self.preset_box.hide()
        self.setMinimumWidth(max(260, need))
        # The fields, under the names the rest of the app and the tests use.
        f = self.form
        self.system_prompt, self.temperature, self.top_k = f.system_prompt, f.temperature, f.top_k
        self.top_p, self.min_p, self.repetition_penalty = f.top_p, f.min_p, f.repetition_penalty
        self.seed, self.max_tokens, self.stop_strings = f.seed, f.max_tokens, f.stop_strings
        self.json_mode, self.grammar, self.thinking = f.json_mode, f.grammar, f.thinking
        self.thinking_budget = f.thinking_budget

        self._save_timer = QTimer(self)
        self._save_timer.setSingleShot(True)
        self._save_timer.setInterval(300)
        self._save_timer.timeout.connect(self._emit_settings)
        self.form.edited.connect(self._on_edited)
        self.preset_picker.activated.connect(self._on_preset_activated)
        self.save_preset_button.clicked.connect(self._on_save_preset_clicked)
        self.make_default_button.clicked.connect(self.use_for_new_chats)

    # -- public ---------------------------------------------------------------------------

    def set_preferences(self, prefs: Preferences | None) -> None:
        """Offer ``prefs``' presets here (None hides the preset row)."""
        self._prefs = prefs
        self.preset_box.setVisible(prefs is not None)
        self.reload_presets()

    def load(self, conv: Conversation | None) -> None:
        self.flush()
        self._cid = conv.id if conv else None
        self.setEnabled(conv is not None)
        self.tools.show_chat(self._cid)
        if conv is None:
            return
        self.form.load(conv.system_prompt, conv.sampling)
        self._show_matching_preset()

    def set_type_ahead(self, on: bool) -> None:
        """Show whether this chat reads drafts ahead (no ``type_ahead_edited``)."""
        self.type_ahead.blockSignals(True)
        self.type_ahead.setChecked(on)
        self.type_ahead.blockSignals(False)

    def _on_type_ahead_toggled(self, on: bool) -> None:
        if self._cid is not None:
            self.type_ahead_edited.emit(self._cid, on)

    def sampling(self) -> SamplingSettings:
        return self.form.sampling()

    def flush(self) -> None:
        """Save pending edits now (before switching conversation or sending)."""
        if self._save_timer.isActive():
            self._save_timer.stop()
            self._emit_settings()

    def reload_presets(self) -> None:
        """Re-read the presets (after the Settings dialog changed them)."""
        self.preset_picker.blockSignals(True)
        try:
            self.preset_picker.clear()
            self.preset_picker.addItem(CUSTOM)
            for preset in self._presets():
                self.preset_picker.addItem(preset.name)
        finally:
            self.preset_picker.blockSignals(False)
        self._show_matching_preset()

    def apply_preset(self, name: str) -> bool:
        """Put the preset's system prompt and sampling into this chat's settings."""
        preset = self._prefs.preset(name) if self._prefs is not None else None
        if preset is None or self._cid is None:
            return False
        self.form.load(preset.system_prompt, preset.sampling)
        self._show_matching_preset()
        self._save_timer.stop()
        self._emit_settings()
        return True

    def save_as_preset(self, name: str) -> ChatPreset | None:
        """Save the form as a preset called ``name`` (replacing one of the same name)."""
        if self._prefs is None:
            return None
        try:
            preset = self._prefs.save_preset(
                ChatPreset(name, self.form.system_prompt_text(), self.form.sampling())
            )
        except (ValueError, StorageError) as exc:
            self.error_raised.emit(f"Could not save the preset: {exc}")
            return None
        self.reload_presets()
        return preset

    def use_for_new_chats(self) -> ChatPreset | None:
        """Make this form the settings every new chat starts with."""
        if self._prefs is None:
            return None
        try:
            preset = self._prefs.set_chat_defaults(
                self.form.system_prompt_text(), self.form.sampling()
            )
        except StorageError as exc:
            self.error_raised.emit(f"Could not save the defaults: {exc}")
            return None
        self.defaults_changed.emit(preset)
        return preset

    # -- internals ------------------------------------------------------------------------

    def _presets(self) -> list[ChatPreset]:
        return self._prefs.presets() if self._prefs is not None else []

    def _show_matching_preset(self) -> None:
        """Select the preset these settings equal, or "Custom"."""
        prompt, sampling = self.form.system_prompt_text(), self.form.sampling()
        names = [
            p.name
            for p in self._presets()
            if p.system_prompt == prompt and p.sampling == sampling
        ]
        index = self.preset_picker.findText(names[0]) if names else 0
        self.preset_picker.setCurrentIndex(max(index, 0))

    def _on_preset_activated(self, index: int) -> None:
        if index > 0:
            self.apply_preset(self.preset_picker.itemText(index))

    def _on_save_preset_clicked(self) -> None:
        current = self.preset_picker.currentText()
        name, ok = QInputDialog.getText(
            self, "Save as preset", "Name:", text="" if current == CUSTOM else current
        )
        if ok and name.strip():
            self.save_as_preset(name)

    def _on_edited(self) -> None:
        if self._cid is not None:
            self._show_matching_preset()
            self._save_timer.start()

    def _emit_settings(self) -> None:
        if self._cid is not None:
            self.settings_edited.emit(
                self._cid, self.form.system_prompt_text(), self.form.sampling()
            )


def _small_button(text: str, name: str) -> QPushButton:
    b = QPushButton(text)
    b.setObjectName(name)
    b.setProperty("class", "secondary")
    b.setCursor(Qt.CursorShape.PointingHandCursor)
    return b
