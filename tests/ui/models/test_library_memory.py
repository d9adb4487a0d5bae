"""The Library names each model's memory type and what the cache can reuse for it (issue 28)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.tiny_families import ensure_tiny_family
from tests.ui.models.conftest import snap


@pytest.mark.parametrize(("family", "words"), [
    ("mamba2", "recurrent: reuse from checkpoints at turn boundaries"),
    ("lfm2", "hybrid (recurrent + attention): reuse from checkpoints"),
    ("gemma3", "sliding window"),
])
def test_the_details_name_the_memory_type(qtbot, make_manager, models_dir: Path, assets_dir, family, words):
    path = models_dir / f"tiny-{family}-Q8_0.gguf"
    os.symlink(ensure_tiny_family(family, assets_dir), path)
    mm = make_manager()
    lib = mm.library_page
    qtbot.waitUntil(lambda: lib.select_path(path), timeout=5000)
    assert words in lib.reuse_label.text().lower()
    snap(mm, f"models-library-memory-{family}")
