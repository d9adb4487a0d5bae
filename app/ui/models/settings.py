"""Per-model load settings (n_ctx, n_seq_max, n_batch, n_gpu_layers, threads, attention, chat format), remembered by
model path in any dict-like store; ``JsonSettingsStore`` is the default, a JSON file in the
data dir. No Qt here.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, MutableMapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from app.chat_formats import CUSTOM, FORMATS

log = logging.getLogger(__name__)

SETTINGS_FILE = "model_load_settings.json"


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """How one model file is loaded. ``n_threads`` 0 means llama.cpp's default;
    ``n_threads_background`` (type-ahead's reading while nothing else runs) 0 means every core;
    ``flash_attn`` False is the Library's "Faster prefill, not bit-identical" choice
    (``ModelConfig.flash_attn``, docs/design.md §3)."""

    n_ctx: int = 4096
    n_seq_max: int = 4
    n_batch: int = 512
    n_gpu_layers: int = 0
    n_threads: int = 0
    n_threads_background: int = 0
    flash_attn: bool = True
    chat_format: str = ""
    """The chat format chosen in the Library: "" automatic (the file's template, else the format
    its architecture and vocabulary call for), a built-in format's name (``app.chat_formats``)
    or "custom" (``chat_template``, a pasted template, checked in the template sandbox)."""
    chat_template: str = ""

    @classmethod
    def from_mapping(cls, raw: object, default: LoadSettings | None = None) -> LoadSettings:
        """Read a stored dict, ignoring unknown keys and keeping defaults for bad values (a
        value of another type than the field's: a number for a flag, a flag for a number)."""
        base = default or cls()
        if not isinstance(raw, dict):
            return base
        values = asdict(base)
        for f in fields(cls):
            v = raw.get(f.name)
            if base.fits(f.name, v):
                values[f.name] = v
        return cls(**values)

    def fits(self, name: str, value: object) -> bool:
        """Does ``value`` have field ``name``'s type: a flag for a flag, a whole number for a
        number (Python's ``bool`` is an ``int``, so each is checked both ways)?"""
        if isinstance(getattr(self, name), str):
            return isinstance(value, str)
        return isinstance(value, int) and isinstance(value, bool) == isinstance(getattr(self, name), bool)

    def to_mapping(self) -> dict[str, int | bool | str]:
        return asdict(self)

    def chat_template_override(self) -> str | None:
        """``ModelConfig.chat_template`` for this choice (None: automatic)."""
        fmt = FORMATS.get(self.chat_format)
        if fmt is not None:
            return fmt.template
        if self.chat_format == CUSTOM and self.chat_template.strip():
            return self.chat_template
        return None


def settings_key(path: Path | str) -> str:
    """The store key of a model file: its absolute path."""
    return str(Path(path).expanduser().absolute())


class JsonSettingsStore(MutableMapping[str, object]):
    """A dict persisted to a JSON file on every change (atomic replace).

    A missing or corrupt file starts empty (logged); a failed write is logged and the value
    kept in memory, so a read-only data dir never breaks loading models.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._data: dict[str, object] = {}
        try:
            raw = json.loads(self.path.read_text())
            if isinstance(raw, dict):
                self._data = raw
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            log.warning("ignoring unreadable model settings %s: %s", self.path, e)

    def __getitem__(self, key: str) -> object:
        return self._data[key]

    def __setitem__(self, key: str, value: object) -> None:
        self._data[key] = value
        self._save()

    def __delitem__(self, key: str) -> None:
        del self._data[key]
        self._save()

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def _save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(self._data, indent=1, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError as e:
            log.warning("could not save model settings to %s: %s", self.path, e)


def default_for(context_length: int | None) -> LoadSettings:
    """Defaults for a model: 4096 tokens, or its trained context when that is smaller."""
    n_ctx = 4096 if not context_length else max(256, min(4096, context_length))
    return LoadSettings(n_ctx=n_ctx)


def load_settings_for(
    store: MutableMapping[str, object], path: Path | str, context_length: int | None = None
) -> LoadSettings:
    return LoadSettings.from_mapping(store.get(settings_key(path)), default_for(context_length))


def save_settings_for(
    store: MutableMapping[str, object], path: Path | str, settings: LoadSettings
) -> None:
    store[settings_key(path)] = settings.to_mapping()
    flush = getattr(store, "flush", None) or getattr(store, "sync", None)
    if callable(flush):
        flush()
