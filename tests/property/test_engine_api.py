"""Property-based: the engine API under random and hostile arguments (issue 15, acceptance).

Hypothesis draws sequences of calls — prompts with any token ids and types, any option names
and values, adapter loads and scales, sticky sessions and continuations, cancels, chat
requests, configs, calls after an unload — and runs them on the tiny model. Properties:

- every call returns normally or raises an ``EngineError`` whose code is documented (docs/design.md §1,
  plus ``cancelled`` for requests of an unloaded model), within a hang guard;
- afterwards the engine still serves a valid greedy request with the same reply as before,
  and no sequence is left taken.

The examples are derandomized (the same on every machine) and bounded; set
``HEARTH_PROPERTY_EXAMPLES`` to run more and ``HEARTH_PROPERTY_RANDOM=1`` for new ones.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig
from app.engine.errors import EngineError
from app.engine.events import TokenId
from app.engine.validation import _OPTION_KEYS

DOCUMENTED_CODES = {
    "no_session", "sticky_busy", "busy", "not_supported", "not_found", "invalid_request",
    "context_overflow", "n_batch_too_small", "model_load_failed", "adapter_load_failed",
    "grammar_failed", "cancelled",
}  # fmt: skip
HANG_S = 60.0  # a hang guard per call (a healthy call takes milliseconds), not a timing check
N_VOCAB = 49152
N_SEQ = 3
EXAMPLES = int(os.environ.get("HEARTH_PROPERTY_EXAMPLES", "40"))
PROPERTY_SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, database=None,
    derandomize=not os.environ.get("HEARTH_PROPERTY_RANDOM"),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)  # fmt: skip


# --------------------------------------------------------------------------- strategies

hostile_ints = st.sampled_from([-1, -(2**31), N_VOCAB, N_VOCAB + 1, 2**31 - 1, 2**31, 2**32, 2**63, 10**9, 10**30])
valid_ids = st.integers(0, N_VOCAB - 1)
token_like = st.one_of(
    valid_ids, valid_ids, valid_ids, hostile_ints, st.floats(allow_nan=True), st.booleans(), st.none(),
    st.text(max_size=3), st.binary(max_size=3),
)
token_lists = st.one_of(
    st.lists(valid_ids, min_size=1, max_size=40),
    st.lists(token_like, max_size=12),
    st.just([]), st.none(), st.text(max_size=8), st.integers(), st.dictionaries(st.integers(0, 9), st.integers(0, 9)),
)
weird_text = st.one_of(
    st.text(max_size=20), st.just("\ud800"), st.just("a\udfffb"), st.just("\x00"), st.just("€" * 5),
)
any_value = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), hostile_ints,
    st.floats(allow_nan=True, allow_infinity=True), weird_text, st.binary(max_size=40),
    st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=4),
    st.sampled_from(["enabled", "disabled", "ab" * 32, "root ::= \"x\"", "root ::= ", "{"]),
)
option_names = st.one_of(st.sampled_from(sorted(_OPTION_KEYS)), st.sampled_from(["temprature", "max_tokens", "", "n"]))
options = st.dictionaries(option_names, any_value, max_size=4).map(
    # bounded replies keep an example short (the tiny model's context is 256 tokens anyway)
    lambda d: {**d, "response_tokens": d["response_tokens"]} if "response_tokens" in d else {**d, "response_tokens": 4}
)
scales = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-4, 4), st.integers(-3, 3), st.sampled_from([0.0, 1.0, 2**31, -(2**31), 1e300]),
    st.text(max_size=3), st.none(), st.booleans(),
)
session_ids = st.one_of(st.sampled_from(["s1", "s2", "s3"]), weird_text, st.integers(), st.none())
chat_requests = st.one_of(
    st.fixed_dictionaries({"messages": st.lists(st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "tool"]), "content": weird_text}), max_size=4)}),
    st.dictionaries(st.sampled_from(["messages", "system", "tools"]), any_value, max_size=3),
    any_value,
)


@dataclass
class World:
    """What an example did, so it can be undone before the health check."""

    model: Any
    lora: Path
    prompt: list[int]
    handles: list[int] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)


def _act_infer(tokens: Any, opts: dict[str, Any], sid: Any) -> Callable[[World], Any]:
    def act(w: World) -> Any:
        if isinstance(sid, str):
            w.sessions.add(sid)
        params = dict(opts)
        if sid is not None:
            params["session_id"] = sid
        return w.model.infer(tokens, **params)

    return act


def _act_valid_session_turn(sid: str, extra: list[int], cont: bool) -> Callable[[World], Any]:
    def act(w: World) -> Any:
        w.sessions.add(sid)
        if cont:
            return w.model.continue_session(extra, session_id=sid, response_tokens=3)
        return w.model.infer(w.prompt + extra, session_id=sid, response_tokens=3)

    return act


def _act_cancel(tokens: list[int], opts: dict[str, Any]) -> Callable[[World], Any]:
    def act(w: World) -> Any:
        stream = w.model.infer(tokens, **opts)
        stream.cancel()
        w.model.cancel(stream.ref)  # twice: idempotent
        return stream

    return act


def _act_adapter(scale: Any, unload_after: bool) -> Callable[[World], Any]:
    def act(w: World) -> Any:
        handle = w.model.load_adapter(str(w.lora))
        w.handles.append(handle)
        w.model.set_adapter_scale(handle, scale)
        if unload_after:
            w.model.unload_adapter(handle)
            w.model.unload_adapter(handle)  # idempotent

    return act


actions = st.one_of(
    st.builds(_act_infer, token_lists, options, session_ids),
    st.builds(_act_infer, st.lists(valid_ids, min_size=1, max_size=30), options, st.none()),
    st.builds(_act_valid_session_turn, st.sampled_from(["s1", "s2"]), st.lists(valid_ids, max_size=5), st.booleans()),
    st.builds(_act_cancel, st.lists(valid_ids, min_size=1, max_size=30), st.just({"response_tokens": 50})),
    st.builds(_act_adapter, scales, st.booleans()),
    st.builds(lambda t, o: lambda w: w.model.prefill_only(t, **o), token_lists, options),
    st.builds(lambda t: lambda w: w.model.complete(t, response_tokens=2), weird_text),
    st.builds(lambda t: lambda w: w.model.tokenize(t), st.one_of(weird_text, any_value)),
    st.builds(lambda t: lambda w: w.model.detokenize(t), token_lists),
    st.builds(lambda t: lambda w: w.model.embed(t), token_lists),
    st.builds(lambda r: lambda w: w.model.apply_chat_template(r), chat_requests),
    st.builds(lambda p, c, k: lambda w: w.model.verify(p, c, k), token_lists, token_lists, any_value),
    st.builds(lambda s: lambda w: w.model.end_session(s), session_ids),
    st.builds(lambda r: lambda w: w.model.cancel(r), any_value),
    st.builds(lambda h, s: lambda w: w.model.set_adapter_scale(h, s), any_value, scales),
    st.builds(lambda h: lambda w: w.model.unload_adapter(h), any_value),
    st.builds(lambda p: lambda w: w.model.load_adapter(p), st.one_of(weird_text, st.sampled_from(["/", "/nonexistent.gguf", "/etc/passwd"]))),
    st.just(lambda w: (w.model.status(), w.model.model_info(), w.model.cache_key_meta(), w.model.list_adapters())),
    st.just(lambda w: w.model.evict()),
)


# --------------------------------------------------------------------------- running calls


def run_bounded(fn: Callable[[], Any]) -> tuple[str, Any]:
    """Run ``fn`` (and wait for a stream's end) on a worker; ("ok"|"error"|"raw", detail)."""
    out: list[tuple[str, Any]] = []

    def work() -> None:
        try:
            result = fn()
            if hasattr(result, "result") and hasattr(result, "ref"):
                result = result.result(timeout=HANG_S)
            out.append(("ok", result))
        except EngineError as exc:
            out.append(("error", exc))
        except BaseException as exc:  # noqa: BLE001 — what this suite looks for
            out.append(("raw", exc))

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(HANG_S * 2)
    if worker.is_alive():
        return "hang", None
    return out[0]


def check_outcome(kind: str, detail: Any, what: str) -> None:
    event(f"{kind}: {detail.code}" if kind == "error" else kind)  # --hypothesis-show-statistics
    assert kind != "hang", f"{what}: no answer within {HANG_S * 2:.0f} s"
    assert kind != "raw", f"{what}: raw {type(detail).__name__}: {detail!r}"
    if kind == "error":
        assert detail.code in DOCUMENTED_CODES, f"{what}: undocumented code {detail.code!r} ({detail})"


def greedy_ids(model: Any, prompt: list[int]) -> list[int]:
    stream = model.infer(prompt, response_tokens=12)
    ids = [e.id for e in stream if isinstance(e, TokenId)]
    stream.result(timeout=HANG_S)
    return ids


def wait_all_seqs_free(model: Any) -> None:
    deadline = time.monotonic() + HANG_S
    while model.model_info().available_seqs != N_SEQ and time.monotonic() < deadline:
        time.sleep(0.01)
    info = model.model_info()
    assert info.available_seqs == N_SEQ, f"seqs left taken: {info.available_seqs} of {N_SEQ} free"


# --------------------------------------------------------------------------- fixtures


def tiny_config(path: Path, **kw: Any) -> ModelConfig:
    kw.setdefault("n_ctx", 256)
    kw.setdefault("n_seq_max", N_SEQ)
    kw.setdefault("n_batch", 128)
    kw.setdefault("n_threads", 2)
    kw.setdefault("tier", "disk")
    kw.setdefault("policy", CachePolicy(min_tokens=8, cold_min_tokens=64, cold_max_tokens=10**6,
                                        continued_interval=64, boundary_trim_tokens=4,
                                        boundary_align_tokens=32))
    return ModelConfig(path=str(path), **kw)


@pytest.fixture(scope="module")
def served(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Any, list[int], list[int]]]:
    engine = Engine(tmp_path_factory.mktemp("property") / "data")
    model = engine.load_model("tiny", tiny_config(tiny_model_path))
    prompt = model.tokenize("The reply this model gives before and after the hostile calls:")
    baseline = greedy_ids(model, prompt)
    assert len(baseline) == 12
    yield engine, model, prompt, baseline
    engine.close()


# --------------------------------------------------------------------------- properties


@PROPERTY_SETTINGS
@given(steps=st.lists(actions, min_size=1, max_size=6))
def test_hostile_calls_fail_cleanly_and_the_engine_keeps_serving(served, tiny_lora_path, steps):
    _, model, prompt, baseline = served
    world = World(model, tiny_lora_path, prompt)
    try:
        for i, step in enumerate(steps):
            kind, detail = run_bounded(lambda step=step: step(world))
            check_outcome(kind, detail, f"step {i}")
    finally:
        for handle in world.handles:
            check_outcome(*run_bounded(lambda h=handle: model.unload_adapter(h)), "unload_adapter")
        for sid in world.sessions:
            check_outcome(*run_bounded(lambda s=sid: model.end_session(s)), "end_session")
    assert model.list_adapters() == []
    assert greedy_ids(model, prompt) == baseline
    wait_all_seqs_free(model)


def _mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly plausible values, sometimes anything at all."""
    return st.one_of(valid, valid, valid, any_value)


config_kwargs = st.fixed_dictionaries({}, optional={
    "n_ctx": _mostly(st.integers(1, 2048)),
    "n_seq_max": _mostly(st.integers(1, 300)),
    "n_batch": _mostly(st.integers(1, 1024)),
    "n_gpu_layers": _mostly(st.integers(-2, 2)),
    "n_threads": _mostly(st.one_of(st.none(), st.integers(0, 4))),
    "tier": _mostly(st.sampled_from(["ram", "ram_file", "disk", "ssd"])),
    "policy": _mostly(st.dictionaries(st.sampled_from(["min_tokens", "cold_min_tokens", "bogus"]), st.integers(-1, 100))),
    "thinking_markers": _mostly(st.one_of(st.none(), st.tuples(weird_text, weird_text))),
    "prefill_chunk_size": _mostly(st.one_of(st.none(), st.integers(0, 300))),
    "prefill_seqs_per_tick": _mostly(st.one_of(st.none(), st.integers(0, 4))),
    "decode_ticks_between_prefills": _mostly(st.integers(-1, 3)),
    "cache_enabled": _mostly(st.booleans()),
    "flash_attn": _mostly(st.booleans()),
    "type_k": _mostly(st.sampled_from(["f16", "q8_0", "q4_0", "q9"])),
    "type_v": _mostly(st.sampled_from(["f16", "q8_0", "q4_0", "q9"])),
})


@settings(PROPERTY_SETTINGS, max_examples=max(EXAMPLES // 2, 10))
@given(kw=config_kwargs)
def test_any_config_is_valid_or_invalid_config_and_valid_small_ones_load(served, tiny_model_path, kw):
    engine, model, prompt, baseline = served
    kind, detail = run_bounded(lambda: ModelConfig(path=str(tiny_model_path), **kw))
    check_outcome(kind, detail, f"ModelConfig({kw!r})")
    if kind == "ok":
        config = detail
        if config.n_ctx_total <= 4096 and config.n_gpu_layers == 0 and (config.n_threads or 2) <= 4:
            loaded = run_bounded(lambda: engine.load_model("other", config))
            check_outcome(*loaded, f"load_model({kw!r})")
            if loaded[0] == "ok":
                try:
                    check_outcome(*run_bounded(lambda: loaded[1].complete("Hi", response_tokens=2)), "complete")
                finally:
                    engine.unload("other")
    assert greedy_ids(model, prompt) == baseline


@settings(PROPERTY_SETTINGS, max_examples=max(EXAMPLES // 4, 5))
@given(steps=st.lists(actions, min_size=1, max_size=5))
def test_calls_after_unload_are_clear_errors(served, tiny_model_path, tiny_lora_path, steps):
    engine, model, prompt, baseline = served
    gone = engine.load_model("gone", tiny_config(tiny_model_path, cache_enabled=False))
    engine.unload("gone")
    world = World(gone, tiny_lora_path, prompt)
    for i, step in enumerate(steps):
        kind, detail = run_bounded(lambda step=step: step(world))
        check_outcome(kind, detail, f"after unload, step {i}")
    assert greedy_ids(model, prompt) == baseline

