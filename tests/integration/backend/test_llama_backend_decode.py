"""One llama_decode per tick over many sequences gives the same greedy tokens as each alone."""

from __future__ import annotations

import pytest

from app.engine.backend import DecodeOp, Prefilled, PrefillOp, Sampled, SamplingParams
from app.engine.errors import ContextOverflow, DecodeFailed, NBatchTooSmall
from tests.integration.backend.driver import PROMPTS, decode, greedy, greedy_together, prefill

N_TOKENS = 24


def test_tiny_model_greedy_output_is_not_one_token_repeated(tiny):
    tokens = greedy(tiny, 0, tiny.tokenize(PROMPTS[0]), 48)
    assert len(set(tokens)) >= 8, tokens
    assert len(set(tokens[-16:])) >= 3, "greedy output collapsed into a loop"


def test_eight_sequences_in_one_batch_match_each_alone(tiny):
    prompts = {seq: tiny.tokenize(text) for seq, text in enumerate(PROMPTS)}
    alone = {seq: greedy(tiny, 0, p, N_TOKENS) for seq, p in prompts.items()}
    together = greedy_together(tiny, prompts, N_TOKENS)
    assert together == alone
    assert len({tuple(t) for t in alone.values()}) == len(PROMPTS)  # prompts matter


def test_staggered_admission_matches_alone(tiny):
    """A seq that joins while others decode (prefill + decode rows in one tick) is unaffected."""
    p0, p1 = tiny.tokenize(PROMPTS[1]), tiny.tokenize(PROMPTS[2])
    alone0, alone1 = greedy(tiny, 0, p0, 16), greedy(tiny, 1, p1, 16)
    tiny.seq_rm(0)
    tiny.seq_rm(1)
    prefill(tiny, 0, p0)
    first = decode(tiny, {0: len(p0)}, 5)[0]
    # seq 1's whole prompt rides in the same tick as seq 0's sixth decode row
    res = tiny.step([DecodeOp(0, None, len(p0) + 5, True), PrefillOp(1, tuple(p1), 0, True)])
    assert isinstance(res[0], Sampled) and isinstance(res[1], Prefilled)
    rest = decode(tiny, {0: len(p0) + 6, 1: len(p1)}, 10)
    assert first + [res[0].token] + rest[0] == alone0[:16]
    assert rest[1] == alone1[:10]


@pytest.mark.parametrize("flash_attn", [False, True])
def test_chunked_prefill_equals_unchunked(make_backend, flash_attn):
    backend = make_backend(flash_attn=flash_attn)
    prompt = backend.tokenize(" ".join(PROMPTS))
    assert len(prompt) > 64
    assert greedy(backend, 2, prompt, N_TOKENS, chunk=16) == greedy(backend, 2, prompt, N_TOKENS)


def test_verify_accepts_the_greedy_continuation(tiny):
    prompt = tiny.tokenize(PROMPTS[3])
    expected = greedy(tiny, 0, prompt, 7)
    assert tiny.verify(1, prompt, expected[:6]) == (6, expected[6])
    wrong = [*expected[:3], (expected[3] + 1) % 1000, *expected[4:6]]
    assert tiny.verify(1, prompt, wrong) == (3, expected[3])
    assert tiny.verify(1, prompt, []) == (0, expected[0])
    assert tiny.seq_pos_max(1) == -1  # verify leaves the seq empty


def test_verify_across_several_batches(make_backend):
    backend = make_backend(n_batch=16)
    prompt = backend.tokenize(" ".join(PROMPTS[:5]))
    assert len(prompt) > 32
    expected = greedy(backend, 0, prompt, 20, chunk=16)
    assert backend.verify(1, prompt, expected[:19]) == (19, expected[19])


def test_seeded_sampling_is_reproducible_and_differs_from_greedy(tiny):
    prompt = tiny.tokenize(PROMPTS[5])
    params = SamplingParams(temperature=1.5, top_k=40, top_p=0.95, min_p=0.01, repetition_penalty=1.1, seed=42)

    def sample_run() -> list[int]:
        sampler = tiny.new_sampler(params)
        try:
            tiny.seq_rm(0)
            prefill(tiny, 0, prompt)
            return decode(tiny, {0: len(prompt)}, 16, {0: sampler})[0]
        finally:
            tiny.free_sampler(sampler)

    first = sample_run()
    assert sample_run() == first
    assert first != greedy(tiny, 0, prompt, 16)


def test_tick_larger_than_n_batch_is_refused(make_backend):
    backend = make_backend(n_batch=8)
    with pytest.raises(NBatchTooSmall):
        backend.step([PrefillOp(0, tuple(range(10, 19)), 0, True)])


def test_position_past_the_per_seq_context_is_refused(make_backend):
    backend = make_backend(n_ctx_per_seq=32)
    with pytest.raises(ContextOverflow):
        backend.step([PrefillOp(0, tuple(range(10, 43)), 0, True)])


def test_llama_decode_failure_is_a_typed_error_and_the_backend_keeps_serving(tiny):
    prompt = tiny.tokenize(PROMPTS[0])
    prefill(tiny, 0, prompt)
    with pytest.raises(DecodeFailed) as err:  # positions restart at 0 in a seq that holds them
        tiny.step([PrefillOp(0, tuple(prompt), 0, True)])
    assert err.value.rc < 0 and err.value.code == "decode_failed"
    assert greedy(tiny, 0, prompt, 4) == greedy(tiny, 1, prompt, 4)


def test_decode_without_logits_is_a_scheduler_bug(tiny):
    with pytest.raises(RuntimeError, match="no logits"):
        tiny.step([DecodeOp(3, None, 0, True)])


def test_before_runs_right_before_llama_decode_after_the_thread_switch(tiny, monkeypatch):
    """``decode(before=...)`` (the scheduler's ``on_reading``s) runs after every other native
    call of the tick, switching llama.cpp's threads back from a type-ahead tick included, and
    right before the ``llama_decode``: a thread it wakes then finds the GIL released there."""
    import llama_cpp

    calls: list[str] = []
    set_threads, llama_decode = llama_cpp.llama_set_n_threads, llama_cpp.llama_decode
    monkeypatch.setattr(llama_cpp, "llama_set_n_threads",
                        lambda *a: calls.append("threads") or set_threads(*a))  # fmt: skip
    monkeypatch.setattr(llama_cpp, "llama_decode", lambda *a: calls.append("decode") or llama_decode(*a))
    tiny.n_threads_background = tiny.n_threads + 1  # a type-ahead tick switches the threads
    prompt = tuple(tiny.tokenize(PROMPTS[0]))
    ops = [PrefillOp(0, prompt[:8], 0, False)]
    tiny.decode(ops, tiny.sample(ops), background=True, before=lambda: calls.append("before"))
    assert calls == ["threads", "before", "decode"]
    calls.clear()
    ops = [PrefillOp(0, prompt[8:12], 8, True)]
    tiny.decode(ops, tiny.sample(ops), before=lambda: calls.append("before"))
    assert calls == ["threads", "before", "decode"]
