"""The log file under the data dir, for bug reports: ``<data dir>/logs/hearth.log``.

Rotated by size (``logging.handlers.RotatingFileHandler``): at ``MAX_BYTES`` the file moves
to ``hearth.log.1`` (and ``.1`` to ``.2`` …), keeping ``BACKUPS`` old files, so the folder
never holds more than ~8 MiB. Everything the app logs at INFO and above goes there as well as
to stderr. A data dir that cannot hold the file (read-only, full) costs the file, never the
app: a warning on stderr says so.
"""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler
from pathlib import Path

LOG_DIR = "logs"
LOG_NAME = "hearth.log"
MAX_BYTES = 2 << 20
BACKUPS = 3
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s]: %(message)s"

log = logging.getLogger(__name__)


def log_path(data_dir: Path) -> Path:
    return data_dir / LOG_DIR / LOG_NAME


def install(data_dir: Path, *, max_bytes: int = MAX_BYTES, backups: int = BACKUPS) -> Path | None:
    """Send the root logger's records (INFO and above) to the data dir's rotated log file.

    Idempotent per file; returns its path, or None when it cannot be opened."""
    path = log_path(data_dir)
    root = logging.getLogger()
    for handler in root.handlers:
        if isinstance(handler, RotatingFileHandler) and Path(handler.baseFilename) == path.resolve():
            return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    except OSError as exc:
        log.warning("no log file in %s: %s", path.parent, exc)
        return None
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(logging.INFO)
    root.addHandler(handler)
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)
    return path


def uninstall(data_dir: Path) -> None:
    """Close and remove the handler of ``data_dir``'s log file (tests, a window closing)."""
    path = log_path(data_dir).resolve()
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, RotatingFileHandler) and Path(handler.baseFilename) == path:
            root.removeHandler(handler)
            handler.close()
