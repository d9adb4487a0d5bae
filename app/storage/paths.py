"""Where Hearth keeps its files: ``HEARTH_DATA_DIR`` or the platform's user data dir."""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP_DIR_NAME = "hearth"
DATABASE_FILE = "hearth.db"


def data_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Return (and create) the data directory.

    Order: an explicit ``override``, the ``HEARTH_DATA_DIR`` environment variable, then the
    platform's user data dir (``$XDG_DATA_HOME/hearth`` or ``~/.local/share/hearth`` on
    Linux, ``~/Library/Application Support/hearth`` on macOS, ``%APPDATA%\\hearth`` on
    Windows).
    """
    if override is not None:
        path = Path(override)
    elif os.environ.get("HEARTH_DATA_DIR"):
        path = Path(os.environ["HEARTH_DATA_DIR"])
    else:
        path = _platform_data_dir() / APP_DIR_NAME
    path = path.expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def database_path(base: str | os.PathLike[str] | None = None) -> Path:
    """The app database inside :func:`data_dir`."""
    return data_dir(base) / DATABASE_FILE


def _platform_data_dir() -> Path:
    home = Path.home()
    if sys.platform == "darwin":
        return home / "Library" / "Application Support"
    if sys.platform.startswith("win"):
        return Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
    xdg = os.environ.get("XDG_DATA_HOME")
    return Path(xdg) if xdg else home / ".local" / "share"
