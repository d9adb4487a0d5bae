"""What the Library remembers across restarts: the folders and files the user added, and the
file each model was loaded from (so a chat whose model is not loaded can offer to load it
again, or say where its file was when it is gone). Kept in the app's settings table. No Qt.
"""

from __future__ import annotations

import logging
from pathlib import Path

from app.models.library import ModelLibrary
from app.storage import Storage, StorageError

log = logging.getLogger(__name__)

FOLDERS_KEY = "library.folders"
FILES_KEY = "library.files"
MODEL_FILES_KEY = "library.model_files"


def _paths(storage: Storage, key: str) -> list[str]:
    try:
        value = storage.get_setting(key, [])
    except StorageError as exc:
        log.warning("could not read %s: %s", key, exc)
        return []
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def remembered_library(storage: Storage, models_dir: Path) -> ModelLibrary:
    """The Library of ``models_dir`` with the folders and files added in earlier runs; each
    later addition or removal is remembered."""

    def remember(library: ModelLibrary) -> None:
        storage.set_setting(FOLDERS_KEY, [str(p) for p in library.added_dirs])
        storage.set_setting(FILES_KEY, [str(p) for p in library.added_files])

    return ModelLibrary(
        models_dir, _paths(storage, FOLDERS_KEY), extra_files=_paths(storage, FILES_KEY), on_change=remember
    )


class ModelFiles:
    """Model id → the file it was last loaded from."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def _all(self) -> dict[str, str]:
        try:
            value = self.storage.get_setting(MODEL_FILES_KEY, {})
        except StorageError as exc:
            log.warning("could not read the models' files: %s", exc)
            return {}
        return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}

    def get(self, model_id: str) -> Path | None:
        path = self._all().get(model_id)
        return Path(path) if path else None

    def remember(self, model_id: str, path: str | Path) -> None:
        files = self._all()
        text = str(Path(path).absolute())
        if files.get(model_id) != text:
            files[model_id] = text
            try:
                self.storage.set_setting(MODEL_FILES_KEY, files)
            except StorageError as exc:
                log.warning("could not remember the file of %s: %s", model_id, exc)
