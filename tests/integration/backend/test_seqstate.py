"""app.cache.blobs.seqstate on real llama.cpp states: parse, one-stream payloads, cut, split, concat."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from app.cache.blobs import seqstate
from app.cache.blobs.seqstate import UnknownLayout
from app.cache.blobs.state_buffers import StateMemory
from app.engine.backend import PrefillOp
from tests.integration.backend.driver import PROMPTS, decode, prefill

GGML_TYPE_F16 = 1
GGML_TYPE_Q8_0 = 8


def _long_prompt(backend):
    return backend.tokenize(" ".join(PROMPTS))


def _warm_logits_and_tokens(backend, seq_id, payload, prompt, n_tokens):
    """Load ``payload`` (holding prompt[:-1] or all of prompt), prefill the rest, decode."""
    assert backend.kv_unpack(seq_id, payload)
    held = backend.seq_pos_max(seq_id) + 1
    backend.seq_rm(seq_id, min(held, len(prompt) - 1))
    start = min(held, len(prompt) - 1)
    backend.step([PrefillOp(seq_id, tuple(prompt[start:]), start, True)])
    logits = backend.seq_logits(seq_id)
    return logits, decode(backend, {seq_id: len(prompt)}, n_tokens)[seq_id]


def test_a_packed_state_is_one_stream_and_every_byte_is_accounted_for(make_backend):
    backend = make_backend(n_seq_max=4)
    prompt = _long_prompt(backend)
    prefill(backend, 2, prompt, chunk=16)
    payload = backend.kv_pack(2)
    st = seqstate.parse(payload)
    assert (st.n_stream, st.n_cells, st.v_trans) == (1, len(prompt), False)
    assert list(seqstate.positions(payload, st)) == list(range(len(prompt)))
    assert {s.type for s in st.k} == {GGML_TYPE_Q8_0}  # the default cell types: q8_0 K, f16 V
    assert {s.type for s in st.v} == {GGML_TYPE_F16}
    assert len(st.k) == len(st.v) == 2
    # header + cell count + per cell (meta + K/V rows) + v_trans/n_layer + per-layer headers
    assert len(payload) == 12 + 4 + st.bytes_per_cell * st.n_cells + 8 + 12 * 4


def test_a_state_packed_into_memory_used_before_is_the_same_bytes_and_loads(make_backend):
    backend = make_backend(n_seq_max=4)
    prompt = _long_prompt(backend)
    prefill(backend, 2, prompt, chunk=16)
    fresh = bytes(backend.kv_pack(2))
    pool = StateMemory()
    first = backend.kv_pack(2, into=pool.lend)
    memory = first.obj
    assert isinstance(memory, bytearray) and first.readonly
    assert bytes(first) == fresh
    del first
    backend.seq_rm(2, len(prompt) // 2)  # a shorter state into the same memory
    again = backend.kv_pack(2, into=pool.lend)
    assert again.obj is memory
    assert seqstate.parse(again).n_cells == len(prompt) // 2
    assert bytes(again) == bytes(seqstate.cut(fresh, len(prompt) // 2))
    head = seqstate.cut(again, 7, into=pool.lend)  # a cold save's head, cut into the other buffer
    assert head.readonly and head.obj is not memory
    assert bytes(head) == bytes(seqstate.cut(fresh, 7))
    loader = make_backend(n_seq_max=2)
    assert loader.kv_unpack(1, again)
    assert loader.seq_pos_max(1) == len(prompt) // 2 - 1


@pytest.mark.parametrize("n_seq_max", [1, 8])
def test_a_state_saved_under_four_streams_loads_under_one_and_eight(make_backend, n_seq_max):
    saver = make_backend(n_seq_max=4)
    prompt = _long_prompt(saver)
    prefill(saver, 3, prompt)
    cold_logits = saver.seq_logits(3)
    cold = decode(saver, {3: len(prompt)}, 12)[3]
    saver.seq_rm(3)
    prefill(saver, 3, prompt)
    payload = saver.kv_pack(3)
    loader = make_backend(n_seq_max=n_seq_max)
    assert loader.info.ctx_params_hash == saver.info.ctx_params_hash
    logits, warm = _warm_logits_and_tokens(loader, n_seq_max - 1, payload, prompt, 12)
    assert warm == cold
    assert np.array_equal(logits, cold_logits)


def test_split_then_concat_gives_back_the_same_bytes(make_backend):
    backend = make_backend(n_seq_max=2)
    prompt = _long_prompt(backend)
    prefill(backend, 1, prompt, chunk=7)
    payload = bytes(backend.kv_pack(1))
    n = len(prompt)
    parts = seqstate.split(payload, [0, 16, 32, n])
    assert [seqstate.parse(p).n_cells for p in parts] == [16, 16, n - 32]
    assert seqstate.concat(parts) == payload
    assert seqstate.concat(parts, n_stream=3) == seqstate.to_streams(payload, 3)


def test_a_cut_state_continues_exactly_like_a_cold_prefill_of_that_prefix(make_backend):
    backend = make_backend(n_seq_max=4)
    prompt = _long_prompt(backend)
    k = 25
    prefill(backend, 0, prompt[:k])
    cold_logits = backend.seq_logits(0)
    cold = decode(backend, {0: k}, 12)[0]
    backend.seq_rm(1)
    prefill(backend, 1, prompt)  # the whole prompt in one batch; only its head is reused
    head = seqstate.cut(backend.kv_pack(1), k)
    assert seqstate.parse(head).n_cells == k
    logits, warm = _warm_logits_and_tokens(backend, 2, head, prompt[:k], 12)
    assert warm == cold
    assert np.array_equal(logits, cold_logits)


def test_seq_cp_copies_a_head_across_streams(make_backend):
    backend = make_backend(n_seq_max=4)
    prompt = _long_prompt(backend)
    k = 30
    prefill(backend, 0, prompt[:k])
    cold = decode(backend, {0: k}, 10)[0]
    prefill(backend, 1, prompt)
    backend.seq_cp(1, 3, k)
    assert backend.seq_pos_max(3) == k - 1
    backend.seq_rm(3, k - 1)
    backend.step([PrefillOp(3, (prompt[k - 1],), k - 1, True)])
    assert decode(backend, {3: k}, 10)[3] == cold


def test_transposed_v_cuts_and_concatenates_too(make_backend):
    backend = make_backend(n_seq_max=2, flash_attn=False)  # f16, V stored transposed
    prompt = _long_prompt(backend)
    prefill(backend, 0, prompt)
    payload = bytes(backend.kv_pack(0))
    st = seqstate.parse(payload)
    assert st.v_trans and all(s.transposed and s.type == GGML_TYPE_F16 for s in st.v)
    parts = seqstate.split(payload, [0, 10, len(prompt)])
    assert seqstate.concat(parts) == payload
    head = seqstate.cut(payload, 10)
    assert backend.kv_unpack(1, head)
    assert backend.seq_pos_max(1) == 9


def test_what_is_not_a_state_is_refused(make_backend):
    backend = make_backend(n_seq_max=2)
    prompt = _long_prompt(backend)
    prefill(backend, 0, prompt)
    payload = bytes(backend.kv_pack(0))
    for bad in (b"", b"\x00garbage" * 10, payload[:-1], payload + b"\x00", payload[: len(payload) // 2]):
        with pytest.raises(UnknownLayout):
            seqstate.parse(bad)
    wrong_magic = b"\x00" + payload[1:]
    with pytest.raises(UnknownLayout):
        seqstate.parse(wrong_magic)


def test_cells_out_of_position_order_are_never_cut(make_backend):
    backend = make_backend(n_seq_max=2)
    prompt = _long_prompt(backend)
    prefill(backend, 0, prompt)
    payload = bytearray(backend.kv_pack(0))
    st = seqstate.parse(payload)
    first, second = st.meta_offset, st.meta_offset + st.cell_meta_size
    struct.pack_into("<i", payload, first, 1)  # swap the positions of cells 0 and 1
    struct.pack_into("<i", payload, second, 0)
    assert not seqstate.is_in_order(payload, seqstate.parse(payload))
    with pytest.raises(UnknownLayout):
        seqstate.cut(bytes(payload), 5)
    with pytest.raises(UnknownLayout):
        seqstate.concat([bytes(payload)])


def test_pieces_that_do_not_follow_each_other_are_not_concatenated(make_backend):
    backend = make_backend(n_seq_max=2)
    prompt = _long_prompt(backend)
    prefill(backend, 0, prompt)
    parts = seqstate.split(bytes(backend.kv_pack(0)), [0, 8, 16, 24])
    with pytest.raises(UnknownLayout):
        seqstate.concat([parts[0], parts[2]])
    f16 = make_backend(n_seq_max=2, type_k="f16", type_v="f16")
    prefill(f16, 0, prompt)
    other = seqstate.split(bytes(f16.kv_pack(0)), [0, 8, 16])
    with pytest.raises(UnknownLayout):
        seqstate.concat([parts[0], other[1]])
