"""The same guarantees on the real default model, SmolLM2-135M-Instruct Q4_1."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.backend import PrefillOp
from tests.integration.backend.driver import PROMPTS, decode, greedy, prefill

pytestmark = pytest.mark.smollm2


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


def test_batch_of_eight_equals_alone_bit_for_bit(smol):
    """A sequence decoded in a batch of eight computes exactly what it computes alone.

    NOTE: this used to hold only "except at near-ties" (a unified KV buffer and an f16 V cache
    let the batch's shape pick other attention kernels; SmolLM2 diverged at top-2 gaps up to
    0.116 on one CPU). With one KV stream per sequence and a q8_0 KV cache (issue 12) the
    logits are bit-identical, so that is what is asserted.
    """
    prompts = {seq: smol.tokenize(text) for seq, text in enumerate(PROMPTS)}
    alone = {seq: _logits_alone(smol, seq, p, 12) for seq, p in prompts.items()}
    together = _logits_together(smol, prompts, 12)
    for seq in prompts:
        assert len(together[seq]) == len(alone[seq]) == 12
        for step, (a, b) in enumerate(zip(alone[seq], together[seq], strict=True)):
            assert np.array_equal(a, b), (seq, step, float(np.abs(a - b).max()))


def _logits_alone(backend, seq, prompt, n):
    backend.seq_rm(seq)
    prefill(backend, seq, prompt)
    out = []
    for i in range(n):
        out.append(backend.seq_logits(seq))
        decode(backend, {seq: len(prompt) + i}, 1)
    return out


def _logits_together(backend, prompts, n):
    for seq in prompts:
        backend.seq_rm(seq)
    backend.step([PrefillOp(seq, tuple(p), 0, True) for seq, p in prompts.items()])
    out: dict[int, list] = {seq: [] for seq in prompts}
    for i in range(n):
        for seq in prompts:
            out[seq].append(backend.seq_logits(seq))
        decode(backend, {seq: len(p) + i for seq, p in prompts.items()}, 1)
    return out


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
    from app.engine.llama_backend import LlamaBackend

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


def test_default_kv_types_give_the_same_logits_however_the_prompt_is_run(smollm2_path):
    """The default KV cell types (q8_0 K and V) keep llama.cpp's CPU flash-attention kernel on
    its one-chunk path for every ubatch shape: a 560-token prompt prefilled in one batch, in
    chunks of 128, 64 or 7, or prefilled to 460 and then fed one token a tick (as decode rows
    are, past the 512 cells where f16 K+V would switch to split-KV) ends on bit-identical
    logits. With f16 K and V these differ (tiled vs one-chunk vs split-KV accumulation)."""
    from app.engine.llama_backend import LlamaBackend

    with LlamaBackend(str(smollm2_path), n_ctx_per_seq=1024, n_seq_max=2, n_batch=512, n_threads=2) as backend:
        assert (backend.type_k, backend.type_v) == ("q8_0", "q8_0")
        prompt = backend.tokenize(" ".join(PROMPTS) * 12)[:560]
        assert len(prompt) == 560

        def run(chunk: int | None, one_by_one_from: int | None = None):
            backend.seq_rm(1)
            head = prompt if one_by_one_from is None else prompt[:one_by_one_from]
            prefill(backend, 1, head, chunk=chunk)
            for pos in range(len(head), len(prompt)):
                backend.step([PrefillOp(1, (prompt[pos],), pos, True)])
            return backend.seq_logits(1)

        whole = run(512)  # one ubatch of 512 rows, then 48
        for how, logits in [("128", run(128)), ("64", run(64)), ("7", run(7)), ("one by one", run(128, 460))]:
            assert np.array_equal(whole, logits), (how, float(np.abs(whole - logits).max()))
