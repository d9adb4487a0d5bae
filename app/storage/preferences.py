"""App-wide preferences kept in the database's settings table: the theme, the settings a
new chat starts with, and named presets (a system prompt plus sampling). No Qt.

Every value is read afresh from the database, so two windows (or a restart) always agree;
writes go through :meth:`Storage.set_setting`, which refuses bad text before writing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.storage.errors import StorageError
from app.storage.records import SamplingSettings
from app.storage.storage import Storage

THEMES = ("system", "light", "dark")
THEME_KEY = "theme"
DEFAULTS_KEY = "chat_defaults"
PRESETS_KEY = "chat_presets"
MAX_PRESET_NAME = 60


@dataclass(frozen=True, slots=True)
class ChatPreset:
    """A named starting point for a conversation: its system prompt and sampling."""

    name: str
    system_prompt: str = ""
    sampling: SamplingSettings = field(default_factory=SamplingSettings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "system_prompt": self.system_prompt,
            "sampling": self.sampling.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: object) -> ChatPreset | None:
        """A stored preset, or None when the stored value is not one (skipped, not fatal)."""
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return None
        prompt = data.get("system_prompt", "")
        sampling = data.get("sampling")
        try:
            return cls(
                name=data["name"],
                system_prompt=prompt if isinstance(prompt, str) else "",
                sampling=SamplingSettings.from_dict(sampling if isinstance(sampling, dict) else None),
            )
        except (TypeError, ValueError):
            return None


class Preferences:
    """Theme, new-chat defaults and presets of one app database."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    # -- theme ----------------------------------------------------------------------------

    def theme(self) -> str:
        """``system``, ``light`` or ``dark`` (anything else stored reads as ``system``)."""
        value = self._get(THEME_KEY, "system")
        return value if value in THEMES else "system"

    def set_theme(self, scheme: str) -> None:
        if scheme not in THEMES:
            raise ValueError(f"unknown theme {scheme!r}; expected one of {', '.join(THEMES)}")
        self.storage.set_setting(THEME_KEY, scheme)

    # -- new-chat defaults ------------------------------------------------------------------

    def chat_defaults(self) -> ChatPreset | None:
        """What a new conversation starts with, once the user has set it (else None)."""
        return ChatPreset.from_dict(self._get(DEFAULTS_KEY, None))

    def set_chat_defaults(self, system_prompt: str, sampling: SamplingSettings) -> ChatPreset:
        preset = ChatPreset("Default", system_prompt, sampling)
        self.storage.set_setting(DEFAULTS_KEY, preset.to_dict())
        return preset

    def reset_chat_defaults(self) -> None:
        self.storage.delete_setting(DEFAULTS_KEY)

    # -- presets --------------------------------------------------------------------------

    def presets(self) -> list[ChatPreset]:
        """Saved presets, sorted by name (case-insensitive)."""
        stored = self._get(PRESETS_KEY, [])
        found = [ChatPreset.from_dict(p) for p in stored] if isinstance(stored, list) else []
        return sorted((p for p in found if p is not None), key=lambda p: p.name.casefold())

    def preset(self, name: str) -> ChatPreset | None:
        key = name.strip().casefold()
        return next((p for p in self.presets() if p.name.casefold() == key), None)

    def save_preset(self, preset: ChatPreset) -> ChatPreset:
        """Add ``preset``, replacing one with the same name (case-insensitive)."""
        name = " ".join(preset.name.split())
        if not name:
            raise ValueError("a preset needs a name")
        if len(name) > MAX_PRESET_NAME:
            raise ValueError(f"a preset name has at most {MAX_PRESET_NAME} characters")
        preset = ChatPreset(name, preset.system_prompt, preset.sampling)
        kept = [p for p in self.presets() if p.name.casefold() != name.casefold()]
        self._put_presets([*kept, preset])
        return preset

    def delete_preset(self, name: str) -> bool:
        """Remove the preset called ``name``; False when there was none."""
        presets = self.presets()
        kept = [p for p in presets if p.name.casefold() != name.strip().casefold()]
        if len(kept) == len(presets):
            return False
        self._put_presets(kept)
        return True

    # -- helpers --------------------------------------------------------------------------

    def _put_presets(self, presets: list[ChatPreset]) -> None:
        self.storage.set_setting(PRESETS_KEY, [p.to_dict() for p in presets])

    def _get(self, key: str, default: object) -> Any:
        try:
            return self.storage.get_setting(key, default)
        except StorageError:
            # NOTE: a broken settings row must not stop the app from opening; the default
            # is shown and the next save rewrites the row.
            return default
