"""UI test fixtures: the real window on the tiny generated model, in a temp data dir."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication

from app.storage import SamplingSettings
from app.ui import gui_gc
from app.ui.app import create_window
from app.ui.main_window import MainWindow

# Greedy, short replies; the grammar keeps the random tiny model to plain ASCII words so
# the text renders without font fallbacks.
ASCII_GRAMMAR = "root ::= [a-z] [a-z ]*"
TEST_SAMPLING = SamplingSettings(temperature=0.0, max_tokens=24, grammar=ASCII_GRAMMAR)
TINY_OPTIONS = {"n_ctx": 1024, "n_seq_max": 4, "n_batch": 256}

WindowFactory = Callable[..., MainWindow]


@pytest.fixture(scope="session", autouse=True)
def _gui_gc(qapp: QApplication) -> None:
    """Python's cyclic collector runs on the GUI thread only, as in the app (``app.ui.gui_gc``),
    for the tests that build parts of the window without ``create_window`` too."""
    gui_gc.install(qapp)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "hearth-data"
    path.mkdir()
    return path


@pytest.fixture
def make_window(qtbot: Any, data_dir: Path, tiny_model_path: Path) -> Iterator[WindowFactory]:
    """Build (and at teardown close) real windows: real engine, tiny model, real SQLite."""
    windows: list[MainWindow] = []

    def make(
        path: Path | None = None,
        *,
        sampling: SamplingSettings = TEST_SAMPLING,
        size: tuple[int, int] | None = (1200, 780),
        **kwargs: Any,
    ) -> MainWindow:
        kwargs.setdefault("model_path", tiny_model_path)
        kwargs.setdefault("model_id", "tiny")
        kwargs.setdefault("model_options", dict(TINY_OPTIONS))
        # The Models and Cache areas have their own tests; chat tests keep placeholders.
        kwargs.setdefault("work_areas", False)
        window = create_window(path or data_dir, default_sampling=sampling, **kwargs)
        windows.append(window)
        if size is not None:
            window.resize(*size)
        window.show()
        qtbot.waitExposed(window)
        return window

    yield make
    for window in windows:
        window.close()
        window.deleteLater()
    # Delete the closed windows now: a window left alive keeps its ~220 widgets in the
    # QApplication, and every later theme change and event pass of this worker walks them all
    # (a file late in a worker's run took 100x its time alone).
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture
def smollm2_or_tiny(tiny_model_path: Path) -> tuple[Path, str, SamplingSettings]:
    """The default SmolLM2 model (real language for screenshots) when screenshots are taken
    (``HEARTH_SCREENSHOT_DIR``) and it is installed, else tiny: what these tests check holds
    on either, and SmolLM2 made the type-ahead one take 24 s of CPU instead of 2 s."""
    if not os.environ.get("HEARTH_SCREENSHOT_DIR"):
        return tiny_model_path, "tiny", TEST_SAMPLING
    try:
        from tests.helpers.tiny_model import smollm2_gguf_path

        return (
            smollm2_gguf_path(),
            "SmolLM2-135M-Instruct",
            SamplingSettings(temperature=0.0, max_tokens=120, repetition_penalty=1.1),
        )
    except (FileNotFoundError, ImportError):
        return tiny_model_path, "tiny", TEST_SAMPLING
