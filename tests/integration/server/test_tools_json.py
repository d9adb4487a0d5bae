"""Tool calls and JSON output through the ``openai`` client against ``hearth serve``.

The tiny model's template (SmolLM2's) knows nothing about tools, so this is the generic mode:
the tools go into the system message and a forced ``tool_choice`` is held to a grammar.
Random weights write whatever the grammar allows, which makes these checks of the
machinery: a valid call to an offered function, arguments valid against its schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.server.conftest import Served, start_server

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Oslo"]}},
            "required": ["city"],
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"]}}}


def _chat(served: Served, messages: list[dict[str, Any]], **kw: Any) -> Any:
    return served.client().chat.completions.create(
        model=served.model_id, messages=messages, temperature=0, max_tokens=kw.pop("max_tokens", 200), **kw
    )


def test_tool_call_round_trip(served: Served) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = _chat(served, messages, tools=[WEATHER, CLOCK], tool_choice="required")
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in ("get_weather", "get_time")
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert args["city"] in ("Paris", "London", "Oslo")
    else:
        assert isinstance(args["utc"], bool)

    # The client runs the tool and sends the whole conversation back, as agents do.
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 21})})
    second = _chat(served, messages, tools=[WEATHER, CLOCK], tool_choice="none", max_tokens=12)
    assert second.choices[0].message.content
    assert not second.choices[0].message.tool_calls
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + first.usage.completion_tokens


def test_named_tool_choice_streams_the_call(served: Served) -> None:
    chunks = list(served.client().chat.completions.create(
        model=served.model_id, temperature=0, max_tokens=200, stream=True,
        messages=[{"role": "user", "content": "Time?"}], tools=[WEATHER, CLOCK],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    ))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "get_time" and calls[0].index == 0
    assert isinstance(json.loads(calls[0].function.arguments)["utc"], bool)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_json_schema_output_validates(served: Served) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                               "sure": {"type": "boolean"}},
              "required": ["answer", "sure"], "additionalProperties": False}
    reply = _chat(served, [{"role": "user", "content": "Is the sky blue? Answer in JSON."}],
                  response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}})
    assert reply.choices[0].finish_reason == "stop"
    data = json.loads(reply.choices[0].message.content)
    assert data["answer"] in ("yes", "no") and isinstance(data["sure"], bool) and set(data) == {"answer", "sure"}


def test_json_schema_with_a_remote_ref_is_refused(served: Served) -> None:
    import openai

    schema = {"$ref": "https://example.com/schema.json"}
    with pytest.raises(openai.BadRequestError) as err:
        _chat(served, [{"role": "user", "content": "x"}],
              response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert err.value.body["param"] == "response_format.json_schema.schema.$ref"  # type: ignore[index]
    assert "local references" in err.value.body["message"]  # type: ignore[index]


@pytest.mark.smollm2
def test_json_object_mode_on_smollm2(smollm2_path: Path, tmp_path: Path) -> None:
    """A real model closes its object: the reply parses as one JSON object."""
    served = start_server(smollm2_path, tmp_path, "--ctx", "1024")
    try:
        question = 'What is the capital of France? Reply with a JSON object like {"capital": "..."}.'
        reply = _chat(served, [{"role": "user", "content": question}], response_format={"type": "json_object"},
                      max_tokens=100)
        assert reply.choices[0].finish_reason == "stop"
        assert json.loads(reply.choices[0].message.content) == {"capital": "Paris"}
    finally:
        served.stop()
