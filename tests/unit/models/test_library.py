"""The local GGUF catalogue: metadata read from headers, broken files listed, never raised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import pytest

from app.models.library import (
    GGUFFormatError,
    ModelLibrary,
    estimate_memory,
    quant_from_file_type,
    quant_from_filename,
    read_entry,
    read_gguf_header,
)
from tests.unit.models.conftest import write_base_model


@pytest.fixture
def library_dir(tmp_path: Path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    return d


def test_default_model_is_listed_out_of_the_box(library_dir: Path, smollm2_path: Path) -> None:
    entries = ModelLibrary(library_dir).scan()

    assert len(entries) == 1
    e = entries[0]
    assert e.is_default and e.broken is None
    assert e.path == smollm2_path
    assert e.architecture == "llama"
    assert e.quant == "q4_1"
    assert e.context_length == 8192
    assert e.has_chat_template
    assert e.size_label == "135M"
    assert 130_000_000 < (e.num_params or 0) < 140_000_000
    assert e.size_bytes == smollm2_path.stat().st_size
    assert (e.n_layer, e.n_head_kv, e.head_dim_k, e.head_dim_v) == (30, 3, 64, 64)


def test_estimate_memory_is_weights_plus_kv_in_the_default_cell_types(smollm2_path: Path) -> None:
    from app.engine.config import DEFAULT_TYPE_K, DEFAULT_TYPE_V
    from app.models import library

    assert (library.DEFAULT_TYPE_K, library.DEFAULT_TYPE_V) == (DEFAULT_TYPE_K, DEFAULT_TYPE_V)
    e = read_entry(smollm2_path)
    # 30 layers · 3 kv heads · (64 dims of q8_0 K, 34 bytes a block of 32 + 64 of f16 V), for
    # 4096 cells in each of 2 seqs (what llama.cpp allocates: tests/integration/models/test_memory_kind.py)
    per_cell = 30 * 3 * (64 * 34 // 32 + 64 * 2)
    assert estimate_memory(e, n_ctx=4096, n_seq_max=2) == e.size_bytes + per_cell * 4096 * 2
    with pytest.raises(ValueError):
        estimate_memory(e, n_ctx=0, n_seq_max=1)


def test_broken_files_are_listed_with_a_reason(library_dir: Path) -> None:
    good = write_base_model(library_dir / "good-F32.gguf")
    data = good.read_bytes()
    (library_dir / "cut-header.gguf").write_bytes(data[:100])
    (library_dir / "cut-weights.gguf").write_bytes(data[:-10])
    (library_dir / "garbage.gguf").write_bytes(b"this is not a model at all" * 10)
    (library_dir / "empty.gguf").write_bytes(b"")

    entries = {e.path.name: e for e in ModelLibrary(library_dir, include_default=False).scan()}

    assert entries["good-F32.gguf"].broken is None
    assert "truncated" in (entries["cut-header.gguf"].broken or "")
    assert "truncated" in (entries["cut-weights.gguf"].broken or "")
    assert "not a GGUF" in (entries["garbage.gguf"].broken or "")
    assert "empty" in (entries["empty.gguf"].broken or "")
    assert entries["cut-weights.gguf"].size_bytes == len(data) - 10


def _symlink_loop(path: Path) -> Path:
    path.symlink_to(path.name)  # opening it fails with ELOOP, for root too
    return path


def _directory(path: Path) -> Path:
    path.mkdir()  # EISDIR
    return path


def _under_a_file(path: Path) -> Path:
    parent = write_base_model(path.parent / "a-file.gguf")
    return parent / path.name  # ENOTDIR: its "directory" is a file


@pytest.mark.parametrize("make", [_symlink_loop, _directory, _under_a_file])
def test_unreadable_file_is_broken_not_an_exception(library_dir: Path, make: Any) -> None:
    """An OSError while reading is a broken entry that says "unreadable", never an exception.
    Made in ways root meets too: CI runs as root, and root reads a ``chmod 0`` file (the
    permission error takes the same path, ``read_entry``'s OSError branch)."""
    entry = read_entry(make(library_dir / "locked.gguf"))
    assert entry.broken is not None and "unreadable" in entry.broken


def test_header_reader_agrees_with_gguf_reader(tmp_path: Path) -> None:
    path = write_base_model(tmp_path / "m.gguf", chat_template="{{ messages }}")
    ours = read_gguf_header(path)
    ref = gguf.GGUFReader(path)

    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    assert [t.shape for t in ours.tensors] == [tuple(int(d) for d in t.shape) for t in ref.tensors]
    assert [t.num_elements for t in ours.tensors] == [int(t.n_elements) for t in ref.tensors]
    assert ours.data_offset == ref.data_offset
    for key in ("general.architecture", "llama.block_count", "tokenizer.chat_template"):
        assert ours.metadata[key] == ref.fields[key].contents()


def test_header_reader_rejects_non_gguf(tmp_path: Path) -> None:
    p = tmp_path / "x.gguf"
    p.write_bytes(b"GGUF" + b"\xff" * 40)
    with pytest.raises(GGUFFormatError):
        read_gguf_header(p)


def test_scan_finds_nested_files_and_user_dirs(tmp_path: Path) -> None:
    models, extra = tmp_path / "models", tmp_path / "extra"
    (models / "acme--Tiny-GGUF").mkdir(parents=True)
    (models / ".downloads").mkdir()
    extra.mkdir()
    write_base_model(models / "acme--Tiny-GGUF" / "tiny-Q8_0.gguf", file_type=None)
    write_base_model(models / ".downloads" / "hidden.gguf")
    write_base_model(extra / "mine-F32.gguf")
    (models / "notes.txt").write_text("not a model")

    lib = ModelLibrary(models, include_default=False)
    assert [e.name for e in lib.scan()] == ["tiny-Q8_0"]
    assert lib.scan()[0].quant == "q8_0"  # no general.file_type: taken from the name

    lib.add_dir(extra)
    lib.add_dir(extra)
    assert sorted(e.name for e in lib.scan()) == ["mine-F32", "tiny-Q8_0"]
    lib.remove_dir(extra)
    assert [e.name for e in lib.scan()] == ["tiny-Q8_0"]
    ModelLibrary(models, [extra], include_default=False).scan()  # extra_dirs in the constructor


def test_rescan_rereads_only_changed_files(library_dir: Path) -> None:
    path = write_base_model(library_dir / "m-F32.gguf")
    lib = ModelLibrary(library_dir, include_default=False)
    first = lib.scan()[0]
    assert lib.scan()[0] is first
    path.write_bytes(path.read_bytes()[:50])
    assert lib.scan()[0].broken is not None
    path.unlink()
    assert lib.scan() == []


def test_adapters_are_flagged(library_dir: Path) -> None:
    from tests.unit.models.conftest import write_adapter

    write_adapter(library_dir / "lora.gguf")
    (entry,) = ModelLibrary(library_dir, include_default=False).scan()
    assert entry.is_adapter and entry.broken is None


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "q4_1"),
        ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "q4_k_m"),
        ("qwen2.5-0.5b-instruct-q5_k_s.gguf", "q5_k_s"),
        ("model-IQ2_XXS.gguf", "iq2_xxs"),
        ("Phi-3-mini-4k-instruct-fp16.gguf", "f16"),
        ("gemma-2b-BF16.gguf", "bf16"),
        ("Q8_0/big-00001-of-00002.gguf", "q8_0"),
        ("model-f16-Q6_K.gguf", "q6_k"),
        ("plain.gguf", None),
    ],
)
def test_quant_from_filename(name: str, quant: str | None) -> None:
    assert quant_from_filename(name) == quant


def test_quant_from_file_type() -> None:
    assert quant_from_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_1)) == "q4_1"
    assert quant_from_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M)) == "q4_k_m"
    assert quant_from_file_type(int(gguf.LlamaFileType.ALL_F32)) == "f32"
    assert quant_from_file_type(9999) is None
    assert quant_from_file_type(None) is None
