"""The Library names a model's memory type from its metadata, as the engine finds it at load."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from app.engine import Engine, ModelConfig
from app.engine.backend import REUSE_WORDS
from app.models.library import estimate_kv, memory_words, read_entry
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


MIB_LINE = re.compile(r"^(llama_kv_cache|llama_memory_recurrent): size =\s+([0-9.]+) MiB")


@pytest.mark.parametrize("family", ["llama", "mamba2", "lfm2", "gemma3", "smollm2"])
def test_the_librarys_memory_estimate_is_what_llama_cpp_allocates(
    tmp_path: Path, assets_dir, tiny_model_path, smollm2_path, family, caplog
):
    """The Library's estimate of a model's memory (attention KV in the default cell types,
    q8_0 K + f16 V, plus each sequence's recurrent state) against the sizes llama.cpp logs
    when it allocates them, for every memory type. Before, the estimate assumed f16 K and V
    in every layer and no recurrent state: 1.3 × the llama KV, 8 × the lfm2 memory, 0 for
    mamba2's."""
    paths = {"llama": tiny_model_path, "smollm2": smollm2_path}
    path = paths.get(family) or ensure_tiny_family(family, assets_dir)
    entry = read_entry(path)
    caplog.set_level(logging.DEBUG, logger="app.engine.llama_cpp")
    with Engine(tmp_path / "data") as engine:
        engine.load_model("m", ModelConfig(path=str(path), n_ctx=1024, n_seq_max=2, n_threads=2, cache_enabled=False))
    logged = [MIB_LINE.match(r.getMessage()) for r in caplog.records if r.name == "app.engine.llama_cpp"]
    allocated_mib = sum(float(m.group(2)) for m in logged if m)
    assert any(logged), "llama.cpp logged no memory size"
    assert estimate_kv(entry, 1024, 2) / 2**20 == pytest.approx(allocated_mib, abs=0.006, rel=0.01)
    assert memory_words(entry, 1024, 2) != "model memory (unknown layout)"
