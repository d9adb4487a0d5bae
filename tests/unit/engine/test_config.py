"""``ModelConfig``: validated at construction (``InvalidConfig``, code ``invalid_request``),
frozen afterwards, and never handing llama.cpp a context size it would wrap (issue 15, items
4, 5 and 11)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig
from app.engine.config import (
    LLAMA_MAX_SEQ,
    MAX_CTX_TOTAL,
    Markers,
    default_threads,
    request_threads,
)
from app.engine.errors import ContextOverflow, EngineError, InvalidConfig

BAD = [
    {"path": ""}, {"path": None}, {"path": "a\0b"}, {"n_ctx": 0}, {"n_ctx": "4096"},
    {"n_ctx": 4096.0}, {"n_ctx": True}, {"n_seq_max": 0}, {"n_seq_max": LLAMA_MAX_SEQ + 1},
    {"n_batch": -5}, {"n_batch": 10**9}, {"n_gpu_layers": -2}, {"n_gpu_layers": "all"},
    {"n_threads": 0}, {"n_threads": 10**6}, {"n_threads_batch": 0}, {"n_threads_batch": "2"},
    {"n_threads_background": 0}, {"n_threads_background": 2.0},
    {"n_ubatch": 0}, {"n_ubatch": 1024, "n_batch": 512}, {"n_ubatch": 128.0}, {"tier": "ssd"}, {"policy": {"bogus": 1}},
    {"policy": {"min_tokens": -1}}, {"policy": {"min_tokens": "x"}}, {"policy": 5},
    {"prefill_chunk_size": 0}, {"prefill_chunk_size": "big"}, {"prefill_seqs_per_tick": 0},
    {"decode_ticks_between_prefills": -1}, {"thinking_markers": ("<think>",)},
    {"thinking_markers": "<think>"}, {"tool_call_markers": ("", "</t>")}, {"type_k": "q9_9"},
    {"type_v": "q8_0", "flash_attn": False}, {"cache_enabled": "yes"}, {"flash_attn": 1}, {"read_first": "no"},
    {"thinking_signing_key": "secret"}, {"extra": ["x"]},
    # Item 4: the total context is a uint32 in llama.cpp.
    {"n_ctx": 2**30, "n_seq_max": 4}, {"n_ctx": 2**32}, {"n_ctx": 2**24 + 1, "n_seq_max": LLAMA_MAX_SEQ},
]  # fmt: skip


@pytest.mark.parametrize("kw", BAD, ids=[str(sorted(k.items())) for k in BAD])
def test_bad_config_is_invalid_config(kw):
    kw = {"path": "m.gguf", **kw}
    with pytest.raises(InvalidConfig) as err:
        ModelConfig(**kw)
    assert err.value.code == "invalid_request"
    assert isinstance(err.value, EngineError) and isinstance(err.value, ValueError)
    assert "ModelConfig" in str(err.value) or "marker" in str(err.value)


def test_largest_total_context_is_accepted():
    config = ModelConfig(path="m.gguf", n_ctx=2**24, n_seq_max=LLAMA_MAX_SEQ - 1)
    assert config.n_ctx_total <= MAX_CTX_TOTAL


def test_config_is_frozen_and_normalised():
    config = ModelConfig(
        path=Path("m.gguf"), n_batch=512, policy={"min_tokens": 8}, thinking_markers=["<think>", "</think>"],
        extra={"a": 1},
    )  # fmt: skip
    assert config.path == "m.gguf"
    assert config.policy == CachePolicy(min_tokens=8)
    assert config.thinking_markers == Markers("<think>", "</think>")
    assert config.prefill_chunk_size == 128
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.n_ctx = 8  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.extra["b"] = 2  # type: ignore[index]
    assert dataclasses.replace(config, n_ctx=8).n_ctx == 8


def test_n_ctx_is_per_sequence():
    config = ModelConfig(path="m.gguf", n_ctx=1000, n_seq_max=3)
    assert config.n_ctx_per_seq == 1000
    assert config.n_ctx_total == 3000


def test_a_prompt_past_n_ctx_is_context_overflow(tmp_path, tiny_model_path):
    """With a context size llama.cpp really got, the prompt check is the one that fires."""
    config = ModelConfig(path=str(tiny_model_path), n_ctx=300, n_seq_max=3, n_batch=128, n_threads=2,
                         cache_enabled=False)  # fmt: skip
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", config)
        assert model.model_info().context_size == 300
        long = model.tokenize("word " * 400)[:301]
        with pytest.raises(ContextOverflow):
            model.infer(long)
        fits = long[:299]
        stats = model.infer(fits, response_tokens=8).result(timeout=120)
        assert stats.context_full and stats.completion_tokens == 1


def test_n_ubatch_and_n_threads_batch_reach_the_context(tmp_path, tiny_model_path):
    """Issue 24: the physical batch and the batch threads are per-model settings; unset, the
    backend's defaults (min(n_batch, 512), n_threads)."""
    from app.engine.engine import llama_backend_factory

    config = ModelConfig(path=str(tiny_model_path), n_ctx=256, n_seq_max=1, n_batch=256, n_threads=1,
                         n_ubatch=64, n_threads_batch=2, n_threads_background=3)  # fmt: skip
    backend = llama_backend_factory(config)
    try:
        assert (backend.n_ubatch, backend.n_threads_batch, backend.n_threads_background) == (64, 2, 3)
        import llama_cpp

        assert llama_cpp.llama_n_ubatch(backend._ctx) == 64
    finally:
        backend.close()
    plain = llama_backend_factory(ModelConfig(path=str(tiny_model_path), n_ctx=256, n_seq_max=1, n_batch=256, n_threads=1))
    try:
        assert (plain.n_ubatch, plain.n_threads_batch) == (256, 1)
    finally:
        plain.close()


def test_request_threads_is_the_most_threads_a_request_is_read_with(monkeypatch):
    import app.engine.config as config

    assert request_threads(None, None) == default_threads()
    assert request_threads(1, None) == 1 and request_threads(1, 3) == 3 and request_threads(4, 2) == 4
    monkeypatch.setattr(config, "cpu_count", lambda: 32)
    assert default_threads() == 8  # every core, up to 8
    monkeypatch.setattr(config, "cpu_count", lambda: None)
    assert default_threads() == 1


@pytest.mark.parametrize(("type_k", "type_v"), [("q8_0", "bf16"), ("q8_0", "q8_0"), ("q8_0", "f16")])
def test_the_exact_kv_candidates_are_valid_settings(type_k, type_v):
    """The K/V pairs `hearth bench --only KV` times against each other (bf16 V among them)."""
    config = ModelConfig(path="m.gguf", type_k=type_k, type_v=type_v)
    assert (config.type_k, config.type_v) == (type_k, type_v)
