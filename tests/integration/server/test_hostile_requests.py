"""Requests an attacker (or an unlucky client) sends: none may take the server down (issue 26).

The server runs in a subprocess (``served``), so a request that kills it fails these tests
instead of the suite; each test also checks that the server still answers afterwards.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.integration.server.conftest import Served, start_server

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


# --------------------------------------------------------------------------- cross-origin requests

CHAT = json.dumps({"model": "m", "messages": USER, "max_tokens": 8}).encode()
SIMPLE_BODIES = [  # what a web page may POST without a CORS preflight
    ("text/plain", CHAT),
    ("text/plain;charset=UTF-8", CHAT),
    ("application/x-www-form-urlencoded", b"model=m&messages=Hi"),
    ("multipart/form-data; boundary=xyz", b'--xyz\r\nContent-Disposition: form-data; name="a"\r\n\r\nb\r\n--xyz--'),
]


def _post(served: Served, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(served.base_url.removesuffix("/v1") + path, body, headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def _engine_work(served: Served) -> tuple[int, int]:
    """Tokens the scheduler ever generated, and the requests the server ever began."""
    status = served.get("/hearth/status")
    return sum(m["tokens_generated"] for m in status["models"]), len(status["recent"]) + len(status["requests"])


@pytest.mark.parametrize(("content_type", "body"), SIMPLE_BODIES)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"])
def test_a_web_page_cannot_make_the_server_run_anything(served: Served, content_type: str, body: bytes,
                                                        path: str) -> None:
    """Before: a cross-origin text/plain POST was executed (200) and generated tokens."""
    before = _engine_work(served)
    body = body.replace(b'"m"', json.dumps(served.model_id).encode())
    status, err = _post(served, path, body, {"Content-Type": content_type, "Origin": "https://evil.example"})
    assert status == 403 and err["error"]["code"] == "forbidden_origin", (status, err)
    status, err = _post(served, path, body, {"Content-Type": content_type})  # a non-browser client, same body
    assert status == 415 and err["error"]["code"] == "unsupported_media_type", (status, err)
    json_body = CHAT.replace(b'"m"', json.dumps(served.model_id).encode())
    status, err = _post(served, path, json_body, {"Content-Type": "application/json", "Origin": "null"})
    assert status == 403, (status, err)
    assert _engine_work(served) == before  # nothing generated, no request begun


def test_an_allowed_origin_is_served_with_cors(tiny_model_path: Path, tmp_path: Path) -> None:
    server = start_server(tiny_model_path, tmp_path, "--ctx", "256", "--cors-origin", "https://app.example")
    try:
        body = CHAT.replace(b'"m"', json.dumps(server.model_id).encode())
        status, reply = _post(server, "/v1/chat/completions", body,
                              {"Content-Type": "application/json", "Origin": "https://app.example"})
        assert status == 200 and reply["choices"][0]["finish_reason"] in ("stop", "length")
        status, _ = _post(server, "/v1/chat/completions", body,
                          {"Content-Type": "application/json", "Origin": "https://evil.example"})
        assert status == 403
    finally:
        server.stop()
