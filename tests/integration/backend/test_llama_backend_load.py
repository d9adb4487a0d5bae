"""Loading, metadata, bad input (model files, grammar, templates), embeddings, tokenizer."""

from __future__ import annotations

import ctypes
import hashlib
import math

import llama_cpp
import pytest

from app.engine.backend import PrefillOp, SamplingParams
from app.engine.chat_template import render_chat_template
from app.engine.errors import InvalidGrammar, InvalidRequest, ModelLoadFailed
from app.engine.llama.llama_backend import LlamaBackend
from tests.integration.backend.driver import decode, prefill


def test_info_describes_the_tiny_model(tiny, tiny_model_path):
    info = tiny.info
    assert info.quant_type == "q8_0" and info.quant_bits == 8
    assert info.fingerprint == hashlib.sha256(tiny_model_path.read_bytes()).digest()
    assert info.n_vocab == 49152
    assert info.extra["n_embd"] == 64 and info.extra["architecture"] == "llama"
    assert info.chat_template and "<|im_start|>" in info.chat_template
    assert info.bos_token == "<|im_start|>" and info.eos_token == "<|im_end|>"


def test_ctx_params_hash_ignores_scheduling_knobs():
    base = LlamaBackend.ctx_params_hash("f16", "f16", False)
    assert len(base) == 32
    assert base == LlamaBackend.ctx_params_hash("f16", "f16", False)
    assert base != LlamaBackend.ctx_params_hash("q8_0", "f16", False)
    assert base != LlamaBackend.ctx_params_hash("f16", "f16", True)
    assert base == LlamaBackend.ctx_params_hash("f16", "f16", False, False, True)  # the defaults
    assert base != LlamaBackend.ctx_params_hash("f16", "f16", False, False, False)  # swa_full off
    # The default before issue 24 (q8_0 K+V) and today's (q8_0 K, f16 V) never share rows.
    assert LlamaBackend.ctx_params_hash("q8_0", "q8_0", True) != LlamaBackend.ctx_params_hash("q8_0", "f16", True)


def test_tokenize_round_trip_and_special_tokens(tiny):
    text = "<|im_start|>user\nHéllo, wörld! 🦙<|im_end|>"
    tokens = tiny.tokenize(text, add_special=False)
    assert tokens[0] == 1 and tokens[-1] == 2  # parsed as the special tokens
    assert tiny.detokenize(tokens) == text
    assert tiny.tokenize("<|im_start|>", add_special=False, parse_special=False) != [1]
    assert b"".join(tiny.token_piece(t) for t in tokens).decode() == text
    assert tiny.is_eog(2) and not tiny.is_eog(tokens[1])


@pytest.mark.parametrize("kind", ["missing", "directory", "text", "empty", "truncated", "header_only"])
def test_bad_model_files_raise_model_load_failed(kind, tmp_path, tiny_model_path):
    path = tmp_path / "model.gguf"
    data = tiny_model_path.read_bytes()
    if kind == "directory":
        path.mkdir()
    elif kind == "text":
        path.write_text("this is not a model\n" * 100)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "header_only":
        path.write_bytes(data[:4096])
    with pytest.raises(ModelLoadFailed) as err:
        LlamaBackend(str(path), n_ctx_per_seq=64, n_seq_max=1, n_batch=32, n_threads=1)
    assert err.value.code == "model_load_failed"
    assert str(path) in str(err.value)


def test_quantized_v_cache_without_flash_attn_is_refused(tiny_model_path):
    with pytest.raises(InvalidRequest, match="flash_attn"):
        LlamaBackend(str(tiny_model_path), n_ctx_per_seq=64, n_seq_max=1, n_batch=32, type_v="q8_0",
                     flash_attn=False)


@pytest.mark.parametrize("grammar", ['root ::= ("yes"', "root ::= [a-", "start ::= \"x\"", "root ::= undefined_rule"])
def test_malformed_grammar_is_refused_before_llama_cpp(tiny, grammar):
    with pytest.raises(InvalidGrammar) as err:
        tiny.new_sampler(SamplingParams(grammar=grammar))
    assert err.value.code == "invalid_request"


def test_grammar_constrains_output(tiny):
    sampler = tiny.new_sampler(SamplingParams(grammar='root ::= "yes" | "no"'))
    try:
        prompt = tiny.tokenize("Answer: ")
        prefill(tiny, 0, prompt)
        tokens = decode(tiny, {0: len(prompt)}, 4, {0: sampler})[0]
    finally:
        tiny.free_sampler(sampler)
    end = next(i for i, t in enumerate(tokens) if tiny.is_eog(t))
    assert tiny.detokenize(tokens[:end]) in ("yes", "no")


@pytest.mark.parametrize(
    ("params", "stages"),
    [
        (SamplingParams(), ["greedy"]),
        (SamplingParams(temperature=0.7, seed=1), ["temp", "dist"]),
        (
            SamplingParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.1,
                           grammar='root ::= "a"'),
            ["grammar", "penalties", "top-k", "top-p", "min-p", "temp", "dist"],
        ),
        (SamplingParams(top_k=5, repetition_penalty=1.2), ["penalties", "top-k", "greedy"]),
    ],
)
def test_sampler_chain_follows_the_spec_order(tiny, params, stages):
    sampler = tiny.new_sampler(params)
    try:
        assert sampler.stage_names() == stages
        assert sampler.is_plain_greedy == (stages == ["greedy"])
    finally:
        tiny.free_sampler(sampler)
        tiny.free_sampler(sampler)  # idempotent


def test_bad_sampling_params_are_invalid_requests(tiny):
    for params in (SamplingParams(top_p=0.0), SamplingParams(min_p=2.0), SamplingParams(repetition_penalty=0.0)):
        with pytest.raises(InvalidRequest):
            tiny.new_sampler(params)


def test_chat_template_renders_smollm2_format(tiny):
    text = tiny.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    )
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    no_gen = tiny.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert no_gen.endswith("<|im_start|>user\nHi<|im_end|>\n")


@pytest.mark.parametrize(
    "template",
    [
        "{{ messages.__class__.__mro__[1].__subclasses__() }}",
        "{{ ''.__class__.__base__.__subclasses__() }}",
        "{% set x = messages.append(1) %}{{ x }}",
        "{{ raise_exception('no system role, please') }}",
        "{% for m in messages %}{{ m['content'] + 1 }}{% endfor %}",
        "{% if %}",
        "{% for i in range(99999) %}{% for j in range(99999) %}{{ 'x' * 9999 }}{% endfor %}{% endfor %}",
    ],
)
def test_hostile_or_broken_templates_are_invalid_requests(template):
    with pytest.raises(InvalidRequest):
        render_chat_template(template, [{"role": "user", "content": "x"}])


def test_template_helpers_are_available():
    text = render_chat_template(
        "{{ bos_token }}{{ strftime_now('%Y') | length }}{{ tools | tojson }}{{ eos_token }}",
        [], bos_token="<s>", eos_token="</s>", tools=[{"name": "f"}],
    )
    assert text == '<s>4[{"name": "f"}]</s>'


def test_embeddings_have_n_embd_floats(tiny):
    tokens = tiny.tokenize("an embedding of this sentence")
    vec = tiny.embed(tokens)
    assert len(vec) == 64 and all(math.isfinite(x) for x in vec)
    assert tiny.embed(tokens) == vec
    assert tiny.embed(tiny.tokenize("something else entirely")) != vec


def test_out_of_vocabulary_ids_are_invalid_requests(tiny):
    for call in (
        lambda: tiny.detokenize([5, 49152]),
        lambda: tiny.token_piece(-1),
        lambda: tiny.embed([1, 10**6]),
        lambda: tiny.step([PrefillOp(0, (1, 2, 99999), 0, True)]),
        lambda: tiny.verify(0, [1, 2], [70000]),
    ):
        with pytest.raises(InvalidRequest, match="outside the vocabulary"):
            call()


def test_out_of_range_seq_ids_are_invalid_requests(tiny):
    for call in (
        lambda: tiny.seq_rm(8),
        lambda: tiny.kv_pack(-1),
        lambda: tiny.kv_unpack(99, b"x"),
        lambda: tiny.step([PrefillOp(8, (1, 2), 0, True)]),
        lambda: tiny.verify(8, [1, 2], [3]),
    ):
        with pytest.raises(InvalidRequest, match="seq id"):
            call()


def test_close_is_idempotent(monkeypatch, make_backend, tiny_lora_path):
    """close() frees every native handle exactly once (both contexts and the adapters before
    the model), and a second close() frees nothing: a double free would crash llama.cpp.
    (``monkeypatch`` first: it stays in place through the factory's closing of the backend.)"""
    freed: list[tuple[str, int | None]] = []

    def recording(name: str):
        real = getattr(llama_cpp, name)

        def free(handle):
            entry = (name, ctypes.cast(handle, ctypes.c_void_p).value)
            if entry not in freed:  # a second free is recorded, not done: it would crash
                real(handle)
            freed.append(entry)

        return free

    for name in ("llama_free", "llama_model_free", "llama_adapter_lora_free"):
        monkeypatch.setattr(llama_cpp, name, recording(name))
    backend = make_backend()
    backend.embed([1, 2, 3])  # the embeddings context, made on first use
    adapter = backend.load_adapter(str(tiny_lora_path))
    backend.close()
    kinds = [name for name, _ in freed]
    assert sorted(kinds) == ["llama_adapter_lora_free", "llama_free", "llama_free", "llama_model_free"]
    assert kinds[-1] == "llama_model_free" and len(set(freed)) == 4  # each handle once, model last
    assert adapter.is_closed
    backend.close()
    assert len(freed) == 4  # nothing freed twice


@pytest.mark.smollm2
def test_a_context_too_large_for_memory_is_refused_not_retried_in_f16(smollm2_path, caplog):
    """1M tokens x 16 sequences of SmolLM2 would need ~290 GB of q8_0/f16 KV: llama.cpp
    refuses the context, and the load fails then — it used to be retried with an f16 cache,
    larger still and not exact (the f16 fallback is for heads q8_0 cannot hold)."""
    caplog.set_level("WARNING")
    with pytest.raises(ModelLoadFailed, match="could not create a context"):
        LlamaBackend(str(smollm2_path), n_ctx_per_seq=1 << 20, n_seq_max=16, n_batch=512, n_threads=1)
    assert "using f16" not in caplog.text


def test_heads_q8_0_cannot_hold_get_an_f16_cache(tmp_path):
    """Heads of 16 values are half a q8_0 block: llama.cpp refuses a q8_0 cache, and the
    model loads with f16 K and V instead of failing."""
    from tests.helpers.tiny_model import LlamaShape, write_tiny_model

    path = write_tiny_model(tmp_path / "heads16.gguf", shape=LlamaShape(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128))
    with LlamaBackend(str(path), n_ctx_per_seq=256, n_seq_max=1, n_batch=64, n_threads=1) as backend:
        assert (backend.type_k, backend.type_v) == ("f16", "f16")
        prefill(backend, 0, backend.tokenize("A hearth is the floor of a fireplace."))
