"""Tool calls with a model whose chat template renders ``tools`` itself (native mode).

A tiny model with a Hermes/Qwen-style template: the tools go through the template, calls
come back inside ``<tool_call>`` tags, and an assistant message's ``tool_calls`` and a
``tool`` message are rendered by the template on the next turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.tiny_model import write_tiny_model
from tests.integration.server.conftest import Served, start_server

TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags.<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}{% for message in messages %}{% if message.role == 'system' %}{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant
{% if message.content %}{{ message.content }}
{% endif %}{% for call in message.tool_calls %}<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Oslo"]}},
    "required": ["city"]}}}


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("native-tools")
    model = write_tiny_model(folder / "tiny-tools.gguf", chat_template=TEMPLATE)
    server = start_server(model, folder, "--ctx", "1024")
    try:
        yield server
    finally:
        server.stop()


def _chat(served: Served, messages: list[dict[str, Any]], **kw: Any) -> Any:
    return served.client().chat.completions.create(model=served.model_id, messages=messages, temperature=0,
                                                   max_tokens=kw.pop("max_tokens", 200), **kw)


def test_native_template_round_trip(native: Served) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    plain = _chat(native, messages, max_tokens=1)
    first = _chat(native, messages, tools=[WEATHER], tool_choice="required")
    assert first.usage.prompt_tokens > plain.usage.prompt_tokens + 40  # the template rendered the tools
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] in ("Paris", "London", "Oslo")
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 19}'})
    second = _chat(native, messages, tools=[WEATHER], tool_choice="none", max_tokens=8)
    assert second.choices[0].message.tool_calls is None
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + first.usage.completion_tokens
