"""Requests an attacker (or an unlucky client) sends: none may take the server down (issue 26).

The server runs in a subprocess (``served``), so a request that kills it fails these tests
instead of the suite; each test also checks that the server still answers afterwards.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.integration.server.conftest import Served

USER = [{"role": "user", "content": "Hi"}]


def _alive(served: Served) -> None:
    assert served.proc.poll() is None, f"the server died (exit {served.proc.returncode})"
    reply = served.client().chat.completions.create(model=served.model_id, messages=USER, max_tokens=2)
    assert reply.choices[0].finish_reason in ("stop", "length")


def _schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


def _tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
            "tool_choice": "required"}


@pytest.mark.parametrize(("kw", "param", "why"), [
    ({"extra_body": {"grammar": "root ::= [b-a]"}}, "grammar", "the range b-a is empty"),
    (_schema({"type": "string", "pattern": "^[b-a]$"}), "response_format.json_schema.schema", "range b-a is empty"),
    ({"extra_body": {"grammar": "root ::= <|im_end|>"}}, "grammar", "can never be generated"),
    ({"extra_body": {"grammar": 'root ::= "\\x00"'}}, "grammar", "no token of this model can produce"),
    ({"extra_body": {"grammar": 'root ::= "a"{5,2}'}}, "grammar", "maximum below its minimum"),
    (_tool({"type": "object", "properties": {"a": {"type": "string", "pattern": "^[z-a]+$"}}}), "tools",
     "range z-a is empty"),
])  # fmt: skip
def test_a_grammar_llama_cpp_would_abort_on_is_a_named_400(served: Served, kw: dict[str, Any], param: str,
                                                           why: str) -> None:
    """Before the check, the first two ended ``hearth serve`` with SIGABRT (exit -6)."""
    with pytest.raises(openai.BadRequestError) as err:
        served.client().chat.completions.create(model=served.model_id, messages=USER, max_tokens=4, **kw)
    body = err.value.body
    assert isinstance(body, dict) and body["param"] == param and body["code"] == "invalid_grammar", body
    assert body["type"] == "invalid_request_error" and why in body["message"], body
    _alive(served)


def test_a_text_completion_grammar_is_checked_too(served: Served) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        served.client().completions.create(model=served.model_id, prompt="x", max_tokens=4,
                                           extra_body={"grammar": "root ::= <[99999]>"})
    assert "can never be generated" in err.value.body["message"]  # type: ignore[index]
    _alive(served)
