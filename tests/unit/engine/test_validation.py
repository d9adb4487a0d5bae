"""``app.engine.validation``: what the Model boundary accepts, in the form the engine uses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.engine.errors import AdapterLoadFailed, InvalidRequest
from app.engine.validation import (
    MAX_ADAPTER_SCALE,
    adapter_sha256,
    check_adapter_scale,
    check_chat_request,
    check_text,
    check_tokens,
    parse_options,
)


def test_tokens_accept_ints_and_numpy_ints_only():
    assert check_tokens([1, np.int32(2), np.int64(3)], 10) == [1, 2, 3]
    assert type(check_tokens(np.array([4, 5]), 10)[0]) is int
    assert check_tokens((), 10) == []
    for bad in ([-1], [10], [2**32], [1.0], ["1"], [None], [True], "12", b"12", None, 5, {1: 2}):
        with pytest.raises(InvalidRequest):
            check_tokens(bad, 10)


def test_text_must_encode_as_utf8():
    assert check_text("héllo ✓") == "héllo ✓"
    for bad in ("a\ud800b", b"bytes", None, 5):
        with pytest.raises(InvalidRequest):
            check_text(bad)


@pytest.mark.parametrize("scale", [math.nan, math.inf, -math.inf, MAX_ADAPTER_SCALE, -1e300, "1", None, True])
def test_adapter_scale_refuses_what_llama_or_the_fingerprint_cannot_hold(scale):
    with pytest.raises(InvalidRequest):
        check_adapter_scale(scale)


def test_adapter_scale_accepts_finite_numbers():
    assert check_adapter_scale(0) == 0.0
    assert check_adapter_scale(np.float32(0.5)) == 0.5
    assert check_adapter_scale(-2.5) == -2.5


def test_adapter_sha256_missing_directory_and_unreadable(tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"GGUF")
    assert len(adapter_sha256(tmp_path / "a.gguf")) == 32
    for bad in (tmp_path / "missing", tmp_path, "", None, 3, "x\0y"):
        with pytest.raises(AdapterLoadFailed):
            adapter_sha256(bad)


def test_options_defaults_and_conversions():
    opts = parse_options({}, 64)
    assert opts.response_tokens == 64 and opts.sampling.is_greedy and opts.stop_sequences == ()
    opts = parse_options(
        {"stop_sequences": ("a", "b"), "parent_key": "ab" * 32, "thinking_budget_tokens": 0, "top_p": 1}, 4
    )
    assert opts.stop_sequences == ("a", "b") and opts.parent_key == b"\xab" * 32
    assert opts.thinking_budget_tokens is None and opts.sampling.top_p == 1.0
    assert parse_options({"stop_sequences": None, "grammar": ""}, 4).sampling.grammar is None


@pytest.mark.parametrize(
    "opts",
    [
        {"temperature": math.nan}, {"temperature": -1}, {"temperature": "0.5"}, {"top_p": 0},
        {"top_p": math.nan}, {"min_p": 2}, {"repetition_penalty": math.inf}, {"top_k": -1},
        {"top_k": 2**31}, {"top_k": 1.5}, {"seed": 2**32}, {"seed": -1}, {"response_tokens": 0},
        {"response_tokens": "5"}, {"response_tokens": 10**30}, {"stop_sequences": "stop"},
        {"stop_sequences": 5}, {"stop_sequences": ["ok", None]}, {"parent_key": "zz"},
        {"parent_key": b"short"}, {"parent_key": 7}, {"thinking": "maybe"},
        {"thinking_budget_tokens": "abc"}, {"grammar": 5}, {"grammar": "\ud800"},
        {"session_id": 5}, {"ignore_eos": "yes"}, {"nope": 1}, {1: 2},
    ],
)  # fmt: skip
def test_bad_options_are_invalid_request(opts):
    with pytest.raises(InvalidRequest):
        parse_options(opts, 4)


def test_chat_request_shape():
    messages, tools = check_chat_request({"messages": [{"role": "user", "content": "hi"}], "system": "be brief"})
    assert messages[0] == {"role": "system", "content": "be brief"} and tools is None
    for bad in (
        None, [], {"messages": "hi"}, {"messages": [1]}, {"messages": [], "tools": "x"},
        {"messages": [{"role": "user", "content": ["\ud800"]}]},
    ):  # fmt: skip
        with pytest.raises(InvalidRequest):
            check_chat_request(bad)
