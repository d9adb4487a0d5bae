"""Screenshots the UI tests write for a reviewer: ``<HEARTH_SCREENSHOT_DIR>/<name>.png``."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtWidgets import QApplication, QWidget


def screenshot(widget: QWidget, name: str) -> Path | None:
    """Save ``widget.grab()`` when ``HEARTH_SCREENSHOT_DIR`` is set; return the path."""
    folder = os.environ.get("HEARTH_SCREENSHOT_DIR")
    if not folder:
        return None
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    QApplication.sendPostedEvents()  # pending layout requests, so the shot shows the final layout
    QApplication.processEvents()
    assert widget.grab().save(str(path)), path
    return path
