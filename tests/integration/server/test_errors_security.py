"""Bad requests get OpenAI-shaped errors that name the field; the security defaults hold."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.integration.server.conftest import ROOT, Served, start_server

USER = [{"role": "user", "content": "Hi"}]


def _error(served: Served, exc_type: type[openai.APIStatusError], **kw: Any) -> dict[str, Any]:
    kw.setdefault("messages", USER)
    kw.setdefault("model", served.model_id)
    with pytest.raises(exc_type) as err:
        served.client().chat.completions.create(max_tokens=2, **kw)
    body = err.value.body
    assert isinstance(body, dict) and set(body) == {"message", "type", "param", "code"}, body
    return body


@pytest.mark.parametrize(("kw", "param"), [
    ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
    ({"logprobs": True}, "logprobs"),
    ({"n": 2}, "n"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": "Hi", "name": "bob"}]}, "messages[0].name"),
])
def test_unsupported_fields_are_named(served: Served, kw: dict[str, Any], param: str) -> None:
    body = _error(served, openai.BadRequestError, **kw)
    assert body["param"] == param and body["code"] == "unsupported_parameter"
    assert param.split(".")[-1].split("[")[0] in body["message"]


@pytest.mark.parametrize(("kw", "param"), [
    ({"temperature": 5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "Hi"}]}, "messages[0].role"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
])
def test_bad_values_are_named(served: Served, kw: dict[str, Any], param: str) -> None:
    body = _error(served, openai.BadRequestError, **kw)
    assert body["param"] == param and body["code"] == "invalid_value"


def test_unknown_model_is_404(served: Served) -> None:
    body = _error(served, openai.NotFoundError, model="gpt-4o")
    assert body["code"] == "model_not_found" and body["param"] == "model"
    with pytest.raises(openai.NotFoundError):
        served.client().embeddings.create(model="nope", input="x")


def test_a_path_as_model_is_not_opened(served: Served, tiny_model_path: Path) -> None:
    """Models are ids of loaded models; the server never opens a file a request names."""
    body = _error(served, openai.NotFoundError, model=str(tiny_model_path))
    assert body["code"] == "model_not_found"


def test_oversize_body_is_413(served: Served) -> None:
    big = [{"role": "user", "content": "x" * 70_000}]  # the fixture's limit is 64 KiB
    body = _error(served, openai.APIStatusError, messages=big)
    assert body["code"] == "request_too_large" and "65536" in body["message"]


def test_prompt_longer_than_the_context_is_413(served: Served) -> None:
    long = [{"role": "user", "content": "word " * 1500}]  # ~1,500 tokens; the context is 1,024
    body = _error(served, openai.APIStatusError, messages=long)
    assert body["code"] == "prompt_too_long" and "1024" in body["message"]


def test_invalid_json_is_400(served: Served) -> None:
    req = urllib.request.Request(served.base_url + "/chat/completions", b"{not json", {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 400
    assert json.load(err.value)["error"]["code"] == "invalid_json"


def test_foreign_host_header_is_refused(served: Served) -> None:
    """DNS rebinding: a page on evil.example that resolves to 127.0.0.1 cannot use the API."""
    req = urllib.request.Request(served.base_url + "/models", headers={"Host": "evil.example:8642"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 403


@pytest.mark.parametrize("host", ["LOCALHOST", "LocalHost", "localhost.", "127.0.0.1", "[::1]"])
def test_loopback_host_names_are_served_in_any_case(served: Served, host: str) -> None:
    """Host names are case-insensitive: ``Host: LOCALHOST:port`` was refused with a 403."""
    port = served.base_url.rsplit(":", 1)[1].split("/")[0]
    req = urllib.request.Request(served.base_url + "/models", headers={"Host": f"{host}:{port}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200 and json.load(resp)["data"]


def test_no_cors_headers_by_default(served: Served) -> None:
    req = urllib.request.Request(served.base_url + "/models", headers={"Origin": "https://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as err:  # a page's request is refused outright (issue 26)
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 403 and err.value.headers.get("access-control-allow-origin") is None


def test_api_key_is_required_and_checked(tiny_model_path: Path, tmp_path: Path) -> None:
    served = start_server(tiny_model_path, tmp_path, "--ctx", "512", api_key="s3cret-key")
    try:
        ok = served.client().chat.completions.create(model=served.model_id, messages=USER, max_tokens=2)
        assert ok.choices[0].message.content is not None
        with pytest.raises(openai.AuthenticationError) as err:
            served.client(api_key="s3cret-kez").models.list()
        assert err.value.body["code"] == "invalid_api_key"  # type: ignore[index]
        req = urllib.request.Request(served.base_url + "/models")  # no Authorization at all
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(req, timeout=30)
        assert missing.value.code == 401
        with urllib.request.urlopen(served.base_url.removesuffix("/v1") + "/health", timeout=30) as resp:
            assert resp.status == 200
    finally:
        served.stop()


def test_public_address_without_a_key_refuses_to_start(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app", "--data-dir", str(tmp_path), "serve", "--host", "0.0.0.0"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 2
    assert "API key" in result.stderr


def test_model_by_its_library_name(tiny_model_path: Path, tmp_path: Path) -> None:
    """``--model`` takes a GGUF path or the name of a model in the library (data dir/models)."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "my-tiny.gguf").write_bytes(tiny_model_path.read_bytes())
    served = start_server(Path("my-tiny"), tmp_path, "--ctx", "512")
    try:
        assert served.model_id == "my-tiny"
        assert [m.id for m in served.client().models.list().data] == ["my-tiny"]
    finally:
        served.stop()
    result = subprocess.run(
        [sys.executable, "-m", "app", "--data-dir", str(tmp_path), "serve", "--model", "no-such-model"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0
    assert "no file or library model named 'no-such-model'" in result.stderr and "my-tiny" in result.stderr
