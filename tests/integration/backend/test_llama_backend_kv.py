"""Per-seq KV pack/unpack: a warm restore continues exactly like a cold prefill."""

from __future__ import annotations

import pytest

from app.engine.backend import PrefillOp
from tests.integration.backend.driver import PROMPTS, decode, greedy, prefill


def _warm_continue(backend, seq_id, payload, prompt, n_tokens):
    """Restore, drop the last cell, re-prefill that one token, decode greedily."""
    assert backend.kv_unpack(seq_id, payload)
    assert backend.seq_pos_max(seq_id) == len(prompt) - 1
    backend.seq_rm(seq_id, len(prompt) - 1)
    backend.step([PrefillOp(seq_id, (prompt[-1],), len(prompt) - 1, True)])
    return decode(backend, {seq_id: len(prompt)}, n_tokens)[seq_id]


@pytest.mark.parametrize("flash_attn", [False, True])
def test_pack_unpack_into_another_seq_continues_like_cold(make_backend, flash_attn):
    tiny = make_backend(flash_attn=flash_attn)
    prompt = tiny.tokenize(" ".join(PROMPTS[:4]))
    cold = greedy(tiny, 0, prompt, 20)
    tiny.seq_rm(0)
    prefill(tiny, 0, prompt)
    payload = tiny.kv_pack(0)
    assert len(payload) > 0
    assert _warm_continue(tiny, 5, payload, prompt, 20) == cold


def test_unpack_into_a_context_with_another_n_seq_max(tiny, make_backend):
    prompt = tiny.tokenize(PROMPTS[6] + PROMPTS[0])
    cold = greedy(tiny, 0, prompt, 20)
    tiny.seq_rm(0)
    prefill(tiny, 0, prompt, chunk=7)
    payload = tiny.kv_pack(0)
    other = make_backend(n_seq_max=2, n_batch=64)
    assert other.info.ctx_params_hash == tiny.info.ctx_params_hash
    assert _warm_continue(other, 1, payload, prompt, 20) == cold


def test_unpack_refusals_return_false(tiny, make_backend):
    prompt = tiny.tokenize(PROMPTS[2])
    prefill(tiny, 0, prompt)
    payload = tiny.kv_pack(0)
    assert tiny.kv_unpack(1, b"") is False
    assert tiny.kv_unpack(1, b"\x00garbage" * 10) is False
    assert tiny.kv_unpack(1, payload[: len(payload) // 2]) is False
    assert tiny.seq_pos_max(1) == -1
    f16 = make_backend(type_k="f16", type_v="f16")
    assert f16.info.ctx_params_hash != tiny.info.ctx_params_hash
    assert f16.kv_unpack(0, payload) is False
    no_flash = make_backend(flash_attn=False)  # f16, V stored transposed: another layout
    assert no_flash.info.ctx_params_hash != tiny.info.ctx_params_hash
    assert no_flash.kv_unpack(0, payload) is False


def test_seq_rm_drops_the_tail_only(tiny):
    prompt = tiny.tokenize(PROMPTS[0])
    prefill(tiny, 3, prompt)
    tiny.seq_rm(3, 4)
    assert tiny.seq_pos_max(3) == 3
    tiny.seq_rm(3)
    assert tiny.seq_pos_max(3) == -1
