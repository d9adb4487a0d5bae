"""Models view fixtures: a real Engine, a ModelLibrary in a temp dir, a HubClient pointed at
the local Hub server, and a factory for shown ``ModelManager`` widgets (closed at teardown)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before pytest-qt creates the app
from PySide6.QtWidgets import QApplication, QWidget

from app.engine import Engine
from app.models.hub import HubClient
from app.models.library import ModelLibrary
from app.ui.models import ModelManager
from app.ui.theme import apply_theme
from tests.helpers.hub_server import HubServer, make_gguf_bytes

REPO = "acme/Tiny-Chat-GGUF"
Q8_FILE = "tiny-Q8_0.gguf"
Q4_FILE = "tiny-Q4_K_M.gguf"

ManagerFactory = Callable[..., ModelManager]


@pytest.fixture(autouse=True)
def _no_ambient_hub_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests must not pick up a developer's token, endpoint or token file."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("app.models.hub._stored_token", lambda: None)


@pytest.fixture
def hub_server(tiny_model_path: Path) -> Iterator[HubServer]:
    """The tiny chat model as a Q8_0 file (slowed down so progress can be watched)."""
    with HubServer() as server:
        server.add_repo(
            REPO,
            {Q8_FILE: tiny_model_path.read_bytes(),
             Q4_FILE: make_gguf_bytes(seed=4, n_floats=32 * 1024), "README.md": b"# tiny\n"},
            downloads=12_345, likes=42, last_modified="2025-03-01T08:30:00.000Z",
        )
        server.add_repo("acme/Other-GGUF", {"other-Q4_0.gguf": make_gguf_bytes(seed=5)},
                        downloads=321, likes=3)
        server.set_fault(REPO, Q8_FILE, chunk_size=256 * 1024, chunk_delay=0.06)
        yield server


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    e = Engine(tmp_path / "data")
    yield e
    e.close()


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    return d


@pytest.fixture
def make_manager(
    qtbot: Any, engine: Engine, models_dir: Path, tmp_path: Path
) -> Iterator[ManagerFactory]:
    managers: list[ModelManager] = []

    def make(
        *,
        extra_dirs: tuple[Path, ...] = (),
        include_default: bool = False,
        endpoint: str = "http://127.0.0.1:9",
        settings: Any = None,
        size: tuple[int, int] = (1180, 760),
        theme: str = "light",
        engine: Engine = engine,
    ) -> ModelManager:
        apply_theme(QApplication.instance(), theme)  # type: ignore[arg-type]
        library = ModelLibrary(models_dir, extra_dirs, include_default=include_default)
        hub = HubClient(endpoint, models_dir=models_dir, downloads_dir=tmp_path / "partial",
                        backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=10.0)
        mm = ModelManager(engine, library, hub, settings)
        managers.append(mm)
        mm.resize(*size)
        mm.show()
        qtbot.waitExposed(mm)
        wait_idle(qtbot, mm)
        return mm

    yield make
    for mm in managers:
        mm.shutdown()
        mm.close()
        mm.deleteLater()


def wait_idle(qtbot: Any, mm: ModelManager, timeout: int = 60_000) -> None:
    """Until no worker job (scan, Hub query, engine call) is outstanding."""
    qtbot.waitUntil(
        lambda: mm.io_runner.num_pending == 0 and mm.engine_runner.num_pending == 0
        and not mm.adapters_page.is_applying,
        timeout=timeout,
    )


def snap(widget: QWidget, name: str) -> Path | None:
    """Save a screenshot to ``HEARTH_SCREENSHOT_DIR`` when it is set."""
    out = os.environ.get("HEARTH_SCREENSHOT_DIR")
    if not out:
        return None
    path = Path(out) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    QApplication.sendPostedEvents()  # pending layout requests, so the shot shows the final layout
    QApplication.processEvents()
    assert widget.grab().save(str(path)), path
    return path
