"""The Library names a model's memory type from its metadata, as the engine finds it at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import Engine, ModelConfig
from app.engine.backend import REUSE_WORDS
from app.models.library import read_entry
from tests.helpers.tiny_families import ensure_tiny_family


@pytest.mark.parametrize(
    ("family", "kind"), [("mamba2", "recurrent"), ("lfm2", "hybrid"), ("gemma3", "sliding_window"), ("llama", "attention")]
)
def test_the_library_and_the_engine_agree_on_the_memory_type(tmp_path: Path, assets_dir, tiny_model_path, family, kind):
    path = tiny_model_path if family == "llama" else ensure_tiny_family(family, assets_dir)
    assert read_entry(path).memory_kind == kind
    with Engine(tmp_path / "data") as engine:
        model = engine.load_model("m", ModelConfig(path=str(path), n_ctx=256, n_seq_max=1, n_threads=2))
        info = model.model_info()
        assert info.memory == kind
        assert info.memory_reuse == REUSE_WORDS[kind]
