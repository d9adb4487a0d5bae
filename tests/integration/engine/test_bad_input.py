"""Hostile arguments at the Model boundary, on real llama.cpp (issue 15, items 1, 2, 3 and 5).

Every bad call fails alone, at the call, with an ``EngineError`` and the code docs/design.md §1 lists; no
sequence leaks, no batch fails with it, no scale reaches llama.cpp or a cache key; afterwards
the model answers exactly as before.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig
from app.engine.errors import EngineError, InvalidRequest
from app.engine.events import TokenId

# A hang guard only (a healthy call takes milliseconds): not a timing assertion.
HANG_S = 120


def _config(path: Path, **kw: Any) -> ModelConfig:
    kw.setdefault("n_ctx", 256)
    kw.setdefault("n_seq_max", 4)
    kw.setdefault("n_batch", 128)
    kw.setdefault("n_threads", 2)
    kw.setdefault("cache_enabled", False)
    return ModelConfig(path=str(path), **kw)


def _ids(model: Any, tokens: list[int], n: int = 8) -> list[int]:
    return [e.id for e in model.infer(tokens, response_tokens=n) if isinstance(e, TokenId)]


@pytest.fixture
def engine(tmp_path):
    e = Engine(tmp_path / "data")
    yield e
    e.close()


@pytest.mark.parametrize("bad", [-1, 2**32, 2**40, 10**9, 49152])
def test_bad_token_id_leaks_no_seq(engine, tiny_model_path, bad):
    """Item 1: n_seq_max bad prompts used to leak every seq; the next valid request hung."""
    model = engine.load_model("m", _config(tiny_model_path))
    prompt = model.tokenize("Hello there")
    for _ in range(model.config.n_seq_max + 2):
        with pytest.raises(InvalidRequest):
            model.infer([1, 2, bad])
    assert model.model_info().available_seqs == model.config.n_seq_max
    stats = model.infer(prompt, response_tokens=4).result(timeout=HANG_S)
    assert stats.completion_tokens >= 1


def test_one_bad_request_fails_alone(engine, tiny_model_path):
    """Item 2: a token id of 10**9 in one prompt used to fail every request of its tick."""
    model = engine.load_model("m", _config(tiny_model_path, n_seq_max=8, n_batch=256))
    prompts = [model.tokenize(f"Request number {i} says") for i in range(8)]
    solo = [_ids(model, p) for p in prompts]
    streams = [model.infer(p, response_tokens=8) for p in prompts[:4]]
    with pytest.raises(InvalidRequest, match="outside the vocabulary"):
        model.infer([*prompts[4], 10**9], response_tokens=8)
    streams += [model.infer(p, response_tokens=8) for p in prompts[4:]]
    got = [[e.id for e in s if isinstance(e, TokenId)] for s in streams]
    assert got == solo


@pytest.mark.parametrize("scale", [math.nan, math.inf, -math.inf, 1e300, "1.0", None, True])
def test_bad_adapter_scale_never_reaches_llama_or_the_cache(tmp_path, tiny_model_path, tiny_lora_path, scale):
    """Item 3: ``set_adapter_scale(h, nan)`` used to reach llama.cpp (every reply became token
    0) while saves stayed keyed under the healthy scale, then were served as exact hits."""
    policy = CachePolicy(min_tokens=4, cold_min_tokens=10**6, cold_max_tokens=2 * 10**6)
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", _config(tiny_model_path, cache_enabled=True, policy=policy, tier="disk"))
        ref = engine.load_model("ref", _config(tiny_model_path))
        handle = model.load_adapter(str(tiny_lora_path))
        ref.load_adapter(str(tiny_lora_path))
        fingerprint = model.cache_key_meta()["fingerprint"]
        prompt = model.tokenize("A conversation the cache will keep after a hostile scale.")
        expected = _ids(ref, prompt)
        assert len(set(expected)) > 1

        with pytest.raises(InvalidRequest):
            model.set_adapter_scale(handle, scale)
        assert model.list_adapters()[0]["scale"] == 1.0
        assert model.cache_key_meta()["fingerprint"] == fingerprint
        assert _ids(model, prompt) == expected  # served while the bad scale was "set"
        model.prefill_only(prompt)  # a save made while the bad scale was "set"

        engine.cache.flush()
        model.set_adapter_scale(handle, 1.0)
        stats = model.infer(prompt, response_tokens=8)
        assert [e.id for e in stats if isinstance(e, TokenId)] == expected
        assert stats.result().cache_hit_kind == "exact"


def _bad_calls(model: Any, tmp: Path, prompt: list[int]) -> list[tuple[str, Any, str]]:
    (tmp / "adapter_dir").mkdir(exist_ok=True)
    (tmp / "empty.gguf").write_bytes(b"")
    (tmp / "text.gguf").write_text("not a gguf")
    return [
        ("tokens str", lambda: model.infer("Hello"), "invalid_request"),
        ("tokens None", lambda: model.infer(None), "invalid_request"),
        ("token None", lambda: model.infer([1, None]), "invalid_request"),
        ("token float", lambda: model.infer([1, 2.5]), "invalid_request"),
        ("token bool", lambda: model.infer([True]), "invalid_request"),
        ("prefill tokens str", lambda: model.prefill_only("abc"), "invalid_request"),
        ("stop_sequences=5", lambda: model.infer(prompt, stop_sequences=5), "invalid_request"),
        ("stop_sequences=[5]", lambda: model.infer(prompt, stop_sequences=[5]), "invalid_request"),
        ("parent_key='zz'", lambda: model.infer(prompt, parent_key="zz"), "invalid_request"),
        ("parent_key short", lambda: model.infer(prompt, parent_key=b"\0" * 5), "invalid_request"),
        ("thinking_budget 'abc'", lambda: model.infer(prompt, thinking_budget_tokens="abc"), "invalid_request"),
        ("grammar=5", lambda: model.infer(prompt, grammar=5), "invalid_request"),
        ("temperature nan", lambda: model.infer(prompt, temperature=math.nan), "invalid_request"),
        ("repetition_penalty inf", lambda: model.infer(prompt, repetition_penalty=math.inf), "invalid_request"),
        ("top_k 2**40", lambda: model.infer(prompt, top_k=2**40), "invalid_request"),
        ("seed -1", lambda: model.infer(prompt, seed=-1), "invalid_request"),
        ("session_id list", lambda: model.infer(prompt, session_id=["x"]), "invalid_request"),
        ("response_tokens 'many'", lambda: model.infer(prompt, response_tokens="many"), "invalid_request"),
        ("unknown option", lambda: model.infer(prompt, temprature=0.5), "invalid_request"),
        ("tokenize(5)", lambda: model.tokenize(5), "invalid_request"),
        ("tokenize(surrogate)", lambda: model.tokenize("\ud800"), "invalid_request"),
        ("complete(None)", lambda: model.complete(None), "invalid_request"),
        ("detokenize(['a'])", lambda: model.detokenize(["a"]), "invalid_request"),
        ("detokenize([-1])", lambda: model.detokenize([-1]), "invalid_request"),
        ("embed([2**32])", lambda: model.embed([2**32]), "invalid_request"),
        ("verify k='x'", lambda: model.verify(prompt, [1], "x"), "invalid_request"),
        ("continue suffix str", lambda: model.continue_session("ab", session_id="s"), "invalid_request"),
        ("end_session([])", lambda: model.end_session([]), "invalid_request"),
        ("chat surrogate", lambda: model.apply_chat_template(
            {"messages": [{"role": "user", "content": "\udfff"}]}), "invalid_request"),
        ("chat system 5", lambda: model.apply_chat_template({"messages": [], "system": 5}), "invalid_request"),
        ("chat message str", lambda: model.apply_chat_template({"messages": ["hi"]}), "invalid_request"),
        ("adapter missing", lambda: model.load_adapter(str(tmp / "missing.gguf")), "adapter_load_failed"),
        ("adapter directory", lambda: model.load_adapter(str(tmp / "adapter_dir")), "adapter_load_failed"),
        ("adapter empty file", lambda: model.load_adapter(str(tmp / "empty.gguf")), "adapter_load_failed"),
        ("adapter text file", lambda: model.load_adapter(str(tmp / "text.gguf")), "adapter_load_failed"),
        ("adapter path None", lambda: model.load_adapter(None), "adapter_load_failed"),
        ("adapter path NUL", lambda: model.load_adapter("a\0b"), "adapter_load_failed"),
        ("scale of handle 'x'", lambda: model.set_adapter_scale("x", 1.0), "invalid_request"),
        ("unload handle []", lambda: model.unload_adapter([]), "invalid_request"),
        ("scale of unknown handle", lambda: model.set_adapter_scale(999, 1.0), "not_found"),
    ]


def test_bad_arguments_raise_engine_errors_with_codes(engine, tiny_model_path, tmp_path):
    """Item 5: each of these raised a raw TypeError/ValueError/AttributeError/OSError."""
    model = engine.load_model("m", _config(tiny_model_path))
    prompt = model.tokenize("The same answer before and after")
    before = _ids(model, prompt)
    raw: list[str] = []
    wrong: list[str] = []
    for name, call, code in _bad_calls(model, tmp_path, prompt):
        try:
            result = call()
            if hasattr(result, "result"):
                result.result(timeout=HANG_S)
        except EngineError as exc:
            if exc.code != code:
                wrong.append(f"{name}: {exc.code} ({exc})")
        except Exception as exc:  # noqa: BLE001 — the failure this test is about
            raw.append(f"{name}: {type(exc).__name__}: {exc}")
        else:
            wrong.append(f"{name}: no error")
    assert raw == []
    assert wrong == []
    assert model.model_info().available_seqs == model.config.n_seq_max
    assert _ids(model, prompt) == before
