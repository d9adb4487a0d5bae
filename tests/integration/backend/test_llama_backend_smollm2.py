"""The same guarantees on the real default model, SmolLM2-135M-Instruct Q4_1."""

from __future__ import annotations

import pytest

from tests.integration.backend.driver import (
    PROMPTS,
    decode,
    first_divergence,
    greedy,
    greedy_together,
    greedy_with_margins,
    prefill,
)

pytestmark = pytest.mark.smollm2

# A top-1/top-2 logit gap this small can flip with the batch's kernel choice.
NEAR_TIE = 0.05


@pytest.fixture(scope="module")
def smol(smollm2_path):
    from app.engine.llama_backend import LlamaBackend

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


def test_batch_of_eight_matches_alone(smol):
    """Same greedy tokens batched as alone, except where the reference itself is a near-tie.

    NOTE: on a quantized model exact equality is not guaranteed: CPU matmul kernels differ
    between 1-row and n-row batches, and activation quantization turns the tiny float
    difference into a visible one. With PROMPTS[0] SmolLM2's 12th token is such a tie (top-2
    logits 19.109 vs 19.094) and flips in the batch. Any divergence must be at a tie like it.
    """
    prompts = {seq: smol.tokenize(text) for seq, text in enumerate(PROMPTS)}
    alone = {seq: greedy_with_margins(smol, seq, p, 12) for seq, p in prompts.items()}
    together = greedy_together(smol, prompts, 12)
    n_exact = 0
    for seq, (tokens, margins) in alone.items():
        at = first_divergence(tokens, together[seq])
        if at is None:
            n_exact += 1
        else:
            assert margins[at] < NEAR_TIE, (seq, at, margins[at])
    assert n_exact >= 6


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


def test_chunked_prefill_and_warm_restore_match_cold_with_flash_attn(smollm2_path):
    from app.engine.llama_backend import LlamaBackend

    with LlamaBackend(str(smollm2_path), n_ctx_per_seq=256, n_seq_max=8, n_batch=256, n_threads=1,
                      flash_attn=True) as backend:
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
