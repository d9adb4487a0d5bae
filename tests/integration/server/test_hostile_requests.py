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

from tests.helpers.llama_threads import LLAMA_THREADS
from tests.helpers.slow_bodies import slow_bodies
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


def _settled_work(served: Served) -> tuple[int, int]:
    """``_engine_work`` once it has stopped moving: the previous test's reply can reach its
    client a moment before the scheduler's counts are final. (The test below failed once
    under load: the counts differed before and after requests that were all refused.)"""
    import time

    last = _engine_work(served)
    for _ in range(50):
        time.sleep(0.1)
        now = _engine_work(served)
        if now == last:
            return now
        last = now
    return last


@pytest.mark.parametrize(("content_type", "body"), SIMPLE_BODIES)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"])
def test_a_web_page_cannot_make_the_server_run_anything(served: Served, content_type: str, body: bytes,
                                                        path: str) -> None:
    """Before: a cross-origin text/plain POST was executed (200) and generated tokens."""
    before = _settled_work(served)
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


# --------------------------------------------------------------------------- connection floods


def _serve_with_fd_limit(model: Path, data_dir: Path, limit: int) -> Served:
    """``hearth serve`` at ``ulimit -n limit`` (set on the child through ``prlimit``)."""
    import subprocess
    import sys

    from tests.integration.server.conftest import ROOT

    args = ["prlimit", f"--nofile={limit}:{limit}", sys.executable, "-m", "app", "--data-dir", str(data_dir),
            "serve", "--port", "0", "--model", str(model), "--threads", str(LLAMA_THREADS), "--ctx", "256"]
    log_path = data_dir / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("hearth serve: model"), log_path.read_text()
    return Served(proc, line.rsplit(" at ", 1)[1].strip(), line.split("'")[1], None, log_path)


def test_half_sent_headers_do_not_lock_other_clients_out(tiny_model_path: Path, tmp_path: Path) -> None:
    """Before: 1,100 connections that never finish their headers, at ``ulimit -n 1024``, locked
    every other client out for as long as they were held, and the log grew by 408 MB of
    ``Too many open files`` tracebacks."""
    import socket
    import time
    from urllib.parse import urlsplit

    server = _serve_with_fd_limit(tiny_model_path, tmp_path, 1024)
    host, port = urlsplit(server.base_url).hostname, urlsplit(server.base_url).port
    assert host is not None and port is not None
    held: list[socket.socket] = []
    try:
        for _ in range(1100):
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: app")
            held.append(s)
        for _ in range(3):  # while all of them are still held open by the attacker
            t0 = time.monotonic()
            with urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/health", timeout=20) as resp:
                assert resp.status == 200 and json.load(resp) == {"status": "ok"}
            assert time.monotonic() - t0 < 20  # a deadline, the urlopen timeout; not a timing check
            body = CHAT.replace(b'"m"', json.dumps(server.model_id).encode())
            status, reply = _post(server, "/v1/chat/completions", body, {"Content-Type": "application/json"})
            assert status == 200, reply
    finally:
        for s in held:
            s.close()
        log = server.stop()
    assert server.log_path is not None and server.log_path.stat().st_size < 256 * 1024, log[-3000:]


def test_slow_bodies_do_not_lock_other_clients_out(tiny_model_path: Path, tmp_path: Path) -> None:
    """260 connections send complete headers with ``Content-Length: 100000``, then a byte of
    body a second, and are opened again as the server closes them. Every normal request made
    meanwhile is served. Before: the cap closed only connections still sending headers, so
    it refused every other client ("connection refused: 394 connections are open"): 0 of
    40 requests got through in a 40 s hold, the first at 57 s (the body deadline)."""
    import time
    from urllib.parse import urlsplit

    server = start_server(tiny_model_path, tmp_path, "--ctx", "256")
    url = urlsplit(server.base_url)
    host, port = url.hostname, url.port
    assert host is not None and port is not None
    body = CHAT.replace(b'"m"', json.dumps(server.model_id).encode())
    try:
        with slow_bodies(host, port, 260) as opened:
            time.sleep(3)  # the 260 are open and sending
            served = 0
            for i in range(20):  # while they are held
                if i % 2:
                    with urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/health", timeout=20) as resp:
                        assert resp.status == 200
                else:
                    status, reply = _post(server, "/v1/chat/completions", body, {"Content-Type": "application/json"})
                    assert status == 200, reply
                served += 1
                time.sleep(0.5)
            assert served == 20 and opened[0] >= 260, opened
    finally:
        log = server.stop()
    assert server.log_path is not None and server.log_path.stat().st_size < 256 * 1024, log[-3000:]
    assert "Traceback" not in log, log[-4000:]


# --------------------------------------------------------------------------- 400/413, never 500

NESTED = b"[" * 100_000 + b"]" * 100_000


def _chat(**fields: Any) -> dict[str, Any]:
    return {"model": "M", "messages": USER, "max_tokens": 2, **fields}


def _tools(description: str) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "description": description, "parameters": {}}}]


BAD_BODIES: list[tuple[str, str, Any]] = [
    ("content", "/v1/chat/completions", _chat(messages=[{"role": "user", "content": "\ud800"}])),
    ("system", "/v1/chat/completions", _chat(messages=[{"role": "system", "content": "a\udfffb"}, *USER])),
    ("content part", "/v1/chat/completions",
     _chat(messages=[{"role": "user", "content": [{"type": "text", "text": "\ud800"}]}])),
    ("tool description", "/v1/chat/completions", _chat(tools=_tools("\udc00"))),
    ("stop", "/v1/chat/completions", _chat(stop=["\ud800"])),
    ("user", "/v1/chat/completions", _chat(user="\ud800")),
    ("model", "/v1/chat/completions", _chat(model="\ud800")),
    ("prompt", "/v1/completions", {"model": "M", "prompt": "\ud800", "max_tokens": 2}),
    ("prompt list", "/v1/completions", {"model": "M", "prompt": ["a\udbff"], "max_tokens": 2}),
    ("input", "/v1/embeddings", {"model": "M", "input": "\ud800"}),
    ("input list", "/v1/embeddings", {"model": "M", "input": ["ok", "\ud800"]}),
    ("token id past the vocabulary", "/v1/completions", {"model": "M", "prompt": [49152], "max_tokens": 2}),
    ("token id past u32", "/v1/completions", {"model": "M", "prompt": [1, 2**40], "max_tokens": 2}),
    ("embedding token id", "/v1/embeddings", {"model": "M", "input": [[49152]]}),
    ("nested arrays", "/v1/chat/completions", NESTED),
    ("nested content", "/v1/chat/completions",
     b'{"model": "M", "messages": [{"role": "user", "content": ' + NESTED + b"}]}"),
    ("a message past the template's bound", "/v1/chat/completions",
     _chat(messages=[{"role": "user", "content": "x" * (6 << 20)}])),
]  # fmt: skip


@pytest.mark.parametrize(("case", "path", "body"), BAD_BODIES, ids=[c for c, _, _ in BAD_BODIES])
def test_bad_bodies_are_openai_shaped_4xx_never_500(hostile_served: Served, case: str, path: str,
                                                     body: Any) -> None:
    """Before: 500 for lone surrogates, out-of-range token ids, deep nesting and the template's
    bound (issue 26, item 7)."""
    model = json.dumps(hostile_served.model_id)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    data = data.replace(b'"M"', model.encode())
    status, reply = _post(hostile_served, path, data, {"Content-Type": "application/json"})
    assert status in (400, 404, 413), (status, reply)
    assert set(reply) == {"error"} and set(reply["error"]) == {"message", "type", "param", "code"}, reply
    assert reply["error"]["type"] == "invalid_request_error", reply


def post_with_content_length_abc(base_url: str) -> tuple[bytes, bytes]:
    """A POST whose ``Content-Length`` is not a number, on a raw socket: (head, body) of the answer."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(base_url)
    assert url.hostname is not None and url.port is not None
    with socket.create_connection((url.hostname, url.port), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: abc\r\n\r\n{}")
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return head, body


def test_a_content_length_that_is_not_a_number_is_an_openai_shaped_400(hostile_served: Served) -> None:
    head, body = post_with_content_length_abc(hostile_served.base_url)
    assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head.lower(), head
    assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def hostile_served(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tiny model behind ``hearth serve`` with the default body limit (8 MiB)."""
    server = start_server(tiny_model_path, tmp_path_factory.mktemp("hostile"), "--ctx", "1024")
    try:
        yield server
    finally:
        log = server.stop()
        assert "Traceback" not in log, log[-4000:]


# --------------------------------------------------------------------------- issue 51: schemas' sizes

HUGE_ARRAY = {"type": "array", "items": {"type": "integer"}, "maxItems": 1_000_000_000}
SCHEMA = "response_format.json_schema.schema"
ARGS = "tools[0].function.parameters"


def _named_tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
            "tool_choice": {"type": "function", "function": {"name": "f"}}}


SIZED_SCHEMAS: list[tuple[str, dict[str, Any], str]] = [
    ("maxItems 10^9 (grew the server to 23.6 GB)", _schema(HUGE_ARRAY), f"{SCHEMA}.maxItems"),
    ("minLength 10^12 (a MemoryError 500)", _schema({"type": "string", "minLength": 10**12}), f"{SCHEMA}.minLength"),
    ("a pattern's {10^9}", _schema({"type": "string", "pattern": "^a{1000000000}$"}), f"{SCHEMA}.pattern"),
    ("maxItems 10^7 (refused after 1.3 s of building)", _schema({**HUGE_ARRAY, "maxItems": 10**7}),
     f"{SCHEMA}.maxItems"),
    ("a nested maxLength", _schema({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10**12}}}),
     f"{SCHEMA}.properties.a.maxLength"),
    ("tool_choice required", _tool({"type": "object", "properties": {"x": HUGE_ARRAY}}),
     f"{ARGS}.properties.x.maxItems"),
    ("a named function", _named_tool({"type": "object", "properties": {"x": HUGE_ARRAY}}),
     f"{ARGS}.properties.x.maxItems"),
    ("a count that is not a count", _schema({"type": "array", "items": {}, "maxItems": -1}), f"{SCHEMA}.maxItems"),
    ("enum: [] (a grammar that did not parse)", _schema({"type": "object", "properties": {"a": {"enum": []}}}),
     f"{SCHEMA}.properties.a.enum"),
]  # fmt: skip


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(x for x in status if x.startswith("VmHWM:"))  # the peak resident set
    return int(line.split()[1])


@pytest.mark.parametrize(("case", "kw", "param"), SIZED_SCHEMAS, ids=[c for c, _, _ in SIZED_SCHEMAS])
def test_a_schema_whose_counts_would_eat_memory_is_a_400_naming_the_field(
        hostile_served: Served, case: str, kw: dict[str, Any], param: str) -> None:
    """Before: the first grew ``hearth serve`` until the OOM killer took it; the second was a
    500 (``MemoryError``); ``tools`` took the same road."""
    import time

    before = _rss_kib(hostile_served.proc.pid)
    t0 = time.monotonic()
    with pytest.raises(openai.BadRequestError) as err:
        hostile_served.client().chat.completions.create(model=hostile_served.model_id, messages=USER, max_tokens=4,
                                                        **kw)
    body = err.value.body
    assert isinstance(body, dict) and body["param"] == param and body["type"] == "invalid_request_error", body
    assert time.monotonic() - t0 < 30  # a deadline (it answers in milliseconds), not a timing check
    # The peak resident set grew by less than 64 MiB: nothing the size of the count was built.
    assert _rss_kib(hostile_served.proc.pid) - before < 64 * 1024, case
    _alive(hostile_served)


def test_schemas_that_used_to_make_a_grammar_that_did_not_parse_run(hostile_served: Served) -> None:
    """A property name with ``"`` or ``\\``, an enum value with them, an empty property name:
    the converter's output did not parse (a 400 saying "the grammar does not parse"), or
    its root was the empty-named property's rule. Now they run, and the reply follows the schema."""
    schema = {"type": "object", "properties": {'say "hi"': {"enum": ['a"b', "c\\d"]}, "": {"type": "boolean"}},
              "required": ['say "hi"', ""], "additionalProperties": False}
    reply = hostile_served.client().chat.completions.create(
        model=hostile_served.model_id, messages=USER, max_tokens=40, temperature=0, **_schema(schema))
    text = reply.choices[0].message.content
    assert text is not None and reply.choices[0].finish_reason == "stop", reply
    value = json.loads(text)
    assert set(value) == {'say "hi"', ""} and value['say "hi"'] in ('a"b', "c\\d") and isinstance(value[""], bool)


def test_counts_above_a_hundred_make_a_grammar_that_parses(hostile_served: Served) -> None:
    """The converter wrote ``maxItems: 150`` as 150 nested optional groups, past the 100
    levels a grammar parser takes: "the grammar does not parse" for any count above ~100."""
    schema = {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "integer"}, "maxItems": 150},
        "name": {"type": "string", "minLength": 1, "maxLength": 300},
        "code": {"type": "string", "pattern": "^[a-z]{1,500}$"}}, "required": ["tags", "name", "code"]}
    reply = hostile_served.client().chat.completions.create(
        model=hostile_served.model_id, messages=USER, max_tokens=8, temperature=0, **_schema(schema))
    assert reply.choices[0].finish_reason in ("stop", "length"), reply
    assert (reply.choices[0].message.content or "").startswith("{"), reply


# --------------------------------------------------------------------------- issue 51: two 500s


def _call_history(arguments: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]


DEEP_ARGUMENTS = '{"a": ' + "[" * 1000 + "]" * 1000 + "}"

FORMER_500S: list[tuple[str, bytes, str | None]] = [
    ("a lone surrogate in an unknown top-level key",
     b'{"model": "M", "messages": [{"role": "user", "content": "Hi"}], "\\ud800": 1}', "\\ud800"),
    ("a lone surrogate in an unknown message key",
     b'{"model": "M", "messages": [{"role": "user", "content": "Hi", "x\\udfff": 1}]}', "messages[0].x\\udfff"),
    ("JSON 1,000 deep in a tool call's arguments", json.dumps(_chat(messages=_call_history(DEEP_ARGUMENTS))).encode(),
     "messages[1].tool_calls[0].function.arguments"),
    ("JSON 65 deep in a tool call's arguments",
     json.dumps(_chat(messages=_call_history("[" * 65 + "]" * 65))).encode(),
     "messages[1].tool_calls[0].function.arguments"),
    ("a lone surrogate escaped in a tool call's arguments",
     json.dumps(_chat(messages=_call_history('{"a": "\\ud800"}'))).encode(),
     "messages[1].tool_calls[0].function.arguments.a"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "body", "param"), FORMER_500S, ids=[c for c, _, _ in FORMER_500S])
def test_former_500s_are_openai_shaped_400s(hostile_served: Served, case: str, body: bytes, param: str | None) -> None:
    """Before: ``UnicodeEncodeError`` while naming the key, ``RecursionError`` reading the
    arguments (the body's depth limit did not reach JSON carried in a string)."""
    data = body.replace(b'"M"', json.dumps(hostile_served.model_id).encode())
    status, reply = _post(hostile_served, "/v1/chat/completions", data, {"Content-Type": "application/json"})
    assert status == 400, (status, reply)
    assert set(reply) == {"error"} and set(reply["error"]) == {"message", "type", "param", "code"}, reply
    assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["param"] == param, reply
    _alive(hostile_served)


def test_arguments_that_are_not_json_are_still_taken_as_text(hostile_served: Served) -> None:
    data = json.dumps(_chat(messages=_call_history("not json {"), max_tokens=2)).encode()
    data = data.replace(b'"M"', json.dumps(hostile_served.model_id).encode())
    status, reply = _post(hostile_served, "/v1/chat/completions", data, {"Content-Type": "application/json"})
    assert status == 200, reply


def test_the_reply_says_which_template_rendered_the_prompt(tmp_path: Path) -> None:
    """A model file whose chat template is ``{{ 10**10**9 }}`` (Jinja: (10**10)**9, 91 digits
    and none of the conversation) answered 200 and nothing said where the prompt came from.
    The reply names the template: the model file's own (``file``), in both reply shapes."""
    from tests.helpers.tiny_model import write_tiny_model

    model = write_tiny_model(tmp_path / "odd-template.gguf", chat_template="{{ 10**10**9 }}")
    server = start_server(model, tmp_path, "--ctx", "256")
    try:
        raw = server.client().chat.completions.with_raw_response.create(model=server.model_id, messages=USER,
                                                                        max_tokens=2)
        assert raw.headers["x-hearth-chat-template"] == "file"
        reply = raw.parse()
        assert reply.usage is not None and reply.usage.prompt_tokens == 91, reply.usage  # a token a digit: no chat
        with server.client().chat.completions.with_streaming_response.create(
                model=server.model_id, messages=USER, max_tokens=2, stream=True) as stream:
            assert stream.headers["x-hearth-chat-template"] == "file"
            assert any("[DONE]" in line for line in stream.iter_lines())
    finally:
        log = server.stop()
    assert "Traceback" not in log, log[-3000:]
