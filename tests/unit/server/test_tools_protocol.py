"""Tool-call parsing and streaming hold-back, and request parsing that names bad fields."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.server.errors import ApiError
from app.server.messages import ToolSpec
from app.server.protocol import parse_chat, parse_completion, parse_embedding
from app.server.tools import CallSplitter, parse_calls

TOOLS = (ToolSpec("get_weather", "", {"type": "object"}),)


def test_parse_calls_reads_blocks_and_the_text_before_them() -> None:
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    parsed = parse_calls(text, TOOLS)
    assert parsed.content == "Let me check."
    (call,) = parsed.calls
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Oslo"}


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',  # not an offered function
    "<tool_call>{not json</tool_call>",
    '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call> and then some prose',
])
def test_a_reply_that_is_not_a_clean_call_stays_text(text: str) -> None:
    parsed = parse_calls(text, TOOLS)
    assert parsed.calls == () and parsed.content == text


def test_splitter_streams_text_and_holds_what_may_be_a_call() -> None:
    s = CallSplitter()
    out = [s.feed(p) for p in ["Hello <to", "ol", "_call>{", '"x": 1}']]
    assert out == ["Hello ", "", "", ""]
    assert s.in_call and s.text.endswith('{"x": 1}')
    s2 = CallSplitter()
    assert s2.feed("a <tool") == "a "
    assert s2.feed("box> b") == "<toolbox> b"
    assert s2.rest() == ""


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}


def _param(body: dict[str, Any], parse: Any = parse_chat) -> str | None:
    with pytest.raises(ApiError) as err:
        parse(body)
    return err.value.param


def test_chat_parsing_defaults_and_limits() -> None:
    req = parse_chat(chat(max_tokens=5, stop="END", seed=2**40 + 3, temperature=0))
    assert req.sampling.max_tokens == 5 and req.sampling.stop == ("END",)
    assert req.sampling.seed == 3 and req.sampling.temperature == 0.0
    assert req.tool_choice == "none" and req.format_kind == "text"
    assert parse_chat(chat(max_completion_tokens=7, max_tokens=5)).sampling.max_tokens == 7


@pytest.mark.parametrize(("body", "param"), [
    (chat(stream_options={"include_usage": True}), "stream_options"),
    (chat(stop=["a", ""]), "stop"),
    (chat(seed="x"), "seed"),
    (chat(max_tokens=0), "max_tokens"),
    (chat(messages=[{"role": "assistant"}]), "messages[0].content"),
    (chat(messages=[{"role": "tool", "content": "x"}]), "messages[0].tool_call_id"),
    (chat(tools=[{"type": "retrieval"}]), "tools[0].type"),
    (chat(tools=[{"type": "function", "function": {"name": "a"}}],
          tool_choice={"type": "function", "function": {"name": "b"}}), "tool_choice"),
    (chat(response_format={"type": "json_schema", "json_schema": {"schema": {}}}), "response_format.json_schema.name"),
    ({"messages": []}, "model"),
])
def test_chat_parsing_names_the_bad_field(body: dict[str, Any], param: str) -> None:
    assert _param(body) == param


def test_completion_and_embedding_parsing() -> None:
    assert parse_completion({"model": "m", "prompt": [1, 2, 3]}).prompt == (1, 2, 3)
    assert parse_completion({"model": "m", "prompt": "x"}).sampling.max_tokens == 16
    assert _param({"model": "m", "prompt": ["a", "b"]}, parse_completion) == "prompt"
    assert _param({"model": "m", "prompt": "a", "echo": True}, parse_completion) == "echo"
    emb = parse_embedding({"model": "m", "input": ["a", [1, 2]], "encoding_format": "base64"})
    assert emb.inputs == ("a", (1, 2)) and emb.base64
    assert _param({"model": "m", "input": "a", "dimensions": 8}, parse_embedding) == "dimensions"
