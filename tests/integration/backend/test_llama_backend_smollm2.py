"""The same guarantees on the real default model, SmolLM2-135M-Instruct Q4_1 (the bit-identical
batching and chunking checks run on it and on the tiny model in ``test_exact_kv.py``)."""

from __future__ import annotations

import pytest

from tests.integration.backend.driver import PROMPTS, decode, greedy, prefill

pytestmark = pytest.mark.smollm2


@pytest.fixture(scope="module")
def smol(smollm2_path):
    from app.engine.llama.llama_backend import LlamaBackend

    backend = LlamaBackend(str(smollm2_path), n_ctx_per_seq=256, n_seq_max=8, n_batch=256, n_threads=1)
    yield backend
    backend.close()


def test_info_reads_the_quant_and_template(smol):
    assert smol.info.quant_type == "q4_1" and smol.info.quant_bits == 4
    assert smol.info.n_ctx_train == 8192
    assert "<|im_start|>" in (smol.info.chat_template or "")


def test_greedy_chat_answer_mentions_paris(smol):
    text = smol.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    )
    tokens = greedy(smol, 0, smol.tokenize(text, add_special=False), 24)
    end = next((i for i, t in enumerate(tokens) if smol.is_eog(t)), len(tokens))
    assert "Paris" in smol.detokenize(tokens[:end])


def _chunked_and_warm_match_cold(backend) -> None:
    prompt = backend.tokenize(" ".join(PROMPTS[:4]))
    cold = greedy(backend, 0, prompt, 12)
    assert greedy(backend, 1, prompt, 12, chunk=16) == cold
    backend.seq_rm(1)
    prefill(backend, 1, prompt, chunk=16)
    payload = backend.kv_pack(1)
    assert backend.kv_unpack(6, payload)
    backend.seq_rm(6, len(prompt) - 1)
    prefill(backend, 6, prompt[-1:], pos=len(prompt) - 1)
    assert decode(backend, {6: len(prompt)}, 12)[6] == cold


def test_chunked_prefill_and_warm_restore_match_cold(smol):
    _chunked_and_warm_match_cold(smol)


def test_chunked_prefill_and_warm_restore_match_cold_without_flash_attn(smollm2_path):
    """The same with flash attention off (an f16 V cache then): ``smol`` runs with it on, the
    default since the q8_0 KV cache (this test used to pass flash_attn=True explicitly, which
    left the off path untested once the default changed)."""
    from app.engine.llama.llama_backend import LlamaBackend

    with LlamaBackend(str(smollm2_path), n_ctx_per_seq=256, n_seq_max=8, n_batch=256, n_threads=1,
                      flash_attn=False, type_k="f16", type_v="f16") as backend:
        _chunked_and_warm_match_cold(backend)


def test_smollm2_shaped_lora_changes_output_and_scale_zero_restores(smol, foreign_lora_path):
    prompt = smol.tokenize(PROMPTS[3])
    base = greedy(smol, 0, prompt, 10)
    adapter = smol.load_adapter(str(foreign_lora_path))
    try:
        smol.set_adapters([(adapter, 1.0)])
        assert greedy(smol, 0, prompt, 10) != base
        smol.set_adapters([(adapter, 0.0)])
        assert greedy(smol, 0, prompt, 10) == base
    finally:
        smol.free_adapter(adapter)
    assert greedy(smol, 0, prompt, 10) == base
