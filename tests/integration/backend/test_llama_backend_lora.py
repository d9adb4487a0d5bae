"""LoRA adapters: scale 1 changes greedy output, scale 0 (or detaching) restores it exactly."""

from __future__ import annotations

import pytest

from app.engine.errors import AdapterLoadFailed, InvalidRequest
from tests.helpers.tiny_model import LlamaShape, write_lora
from tests.integration.backend.driver import PROMPTS, greedy


def test_lora_changes_output_and_scale_zero_restores_it(tiny, tiny_lora_path):
    prompt = tiny.tokenize(PROMPTS[0])
    base = greedy(tiny, 0, prompt, 20)
    adapter = tiny.load_adapter(str(tiny_lora_path))
    assert len(adapter.sha256) == 32
    tiny.set_adapters([(adapter, 1.0)])
    adapted = greedy(tiny, 0, prompt, 20)
    assert adapted != base
    tiny.set_adapters([(adapter, 0.0)])
    assert greedy(tiny, 0, prompt, 20) == base
    tiny.set_adapters([(adapter, 1.0)])
    assert greedy(tiny, 0, prompt, 20) == adapted
    tiny.set_adapters([])
    assert greedy(tiny, 0, prompt, 20) == base


def test_free_adapter_detaches_it_and_is_idempotent(tiny, tiny_lora_path):
    prompt = tiny.tokenize(PROMPTS[1])
    base = greedy(tiny, 0, prompt, 12)
    adapter = tiny.load_adapter(str(tiny_lora_path))
    tiny.set_adapters([(adapter, 1.0)])
    tiny.free_adapter(adapter)
    tiny.free_adapter(adapter)
    assert greedy(tiny, 0, prompt, 12) == base
    with pytest.raises(InvalidRequest):
        tiny.set_adapters([(adapter, 1.0)])


def test_adapter_also_applies_to_embeddings(tiny, tiny_lora_path):
    tokens = tiny.tokenize(PROMPTS[2])
    base = tiny.embed(tokens)
    adapter = tiny.load_adapter(str(tiny_lora_path))
    tiny.set_adapters([(adapter, 1.0)])
    assert tiny.embed(tokens) != base
    tiny.set_adapters([(adapter, 0.0)])
    assert tiny.embed(tokens) == base


def test_foreign_shape_lora_is_refused(tiny, foreign_lora_path):
    with pytest.raises(AdapterLoadFailed) as err:
        tiny.load_adapter(str(foreign_lora_path))
    assert err.value.code == "adapter_load_failed"
    assert str(foreign_lora_path) in str(err.value)


def test_other_architecture_lora_is_refused(tiny, tmp_path):
    path = write_lora(tmp_path / "qwen.gguf", arch="qwen2", shape=LlamaShape(64, 2, 4, 2, 128))
    with pytest.raises(AdapterLoadFailed):
        tiny.load_adapter(str(path))


@pytest.mark.parametrize("content", [None, b"not a gguf at all", b"GGUF\x03\x00\x00\x00"])
def test_bad_adapter_files_are_refused(tiny, tmp_path, content):
    path = tmp_path / "adapter.gguf"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(AdapterLoadFailed):
        tiny.load_adapter(str(path))
    assert greedy(tiny, 0, tiny.tokenize("still fine"), 2)  # the model keeps serving
