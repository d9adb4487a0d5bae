"""The remote-model client against Hearth's own server, started in a subprocess."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.events import Done, Error, Event, Token
from app.remote.client import RemoteClient, RemoteError
from app.remote.endpoint import EndpointError, RemoteEndpoint
from tests.integration.server.conftest import Served, start_server, wait_until

KEY = "remote-test-key"


@pytest.fixture(scope="module")
def remote(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = start_server(tiny_model_path, tmp_path_factory.mktemp("remote"), "--ctx", "1024", api_key=KEY)
    try:
        yield server
    finally:
        server.stop()


def endpoint(served: Served, **kw: object) -> RemoteEndpoint:
    return RemoteEndpoint(served.base_url, served.model_id, api_key=kw.pop("api_key", KEY), **kw)  # type: ignore[arg-type]


def collect(client: RemoteClient, messages: list[dict[str, str]], **params: object) -> list[Event]:
    events: list[Event] = []
    stream = client.chat(messages, params, events.append)
    assert stream.done.wait(300)
    return events


def test_endpoint_validation() -> None:
    with pytest.raises(EndpointError):
        RemoteEndpoint("ftp://host/v1", "m")
    with pytest.raises(EndpointError):
        RemoteEndpoint("http://host/v1", " ")
    ep = RemoteEndpoint("http://10.0.0.5:8642/v1/", "llama")
    assert ep.base_url == "http://10.0.0.5:8642/v1" and ep.name == "llama @ 10.0.0.5"
    assert ep.model_id == "remote:llama @ 10.0.0.5"
    assert RemoteEndpoint.from_json(ep.to_json()) == ep


def test_lists_models_and_streams_a_reply_like_the_server_gives_it(remote: Served) -> None:
    client = RemoteClient(endpoint(remote))
    assert client.models() == [remote.model_id]
    messages = [{"role": "user", "content": "Hello there"}]
    events = collect(client, messages, max_tokens=10, temperature=0)
    assert isinstance(events[-1], Done)
    text = "".join(e.text for e in events if isinstance(e, Token))
    direct = remote.client().chat.completions.create(model=remote.model_id, messages=messages,  # type: ignore[arg-type]
                                                     max_tokens=10, temperature=0)
    assert text == direct.choices[0].message.content
    stats = events[-1].stats
    assert stats.completion_tokens == direct.usage.completion_tokens  # type: ignore[union-attr]
    assert stats.prompt_tokens == direct.usage.prompt_tokens  # type: ignore[union-attr]
    assert stats.cache_hit_kind == "cold" and stats.finish_key is None


def test_cancel_stops_the_remote_request(remote: Served) -> None:
    client = RemoteClient(endpoint(remote))
    got_tokens = threading.Event()
    events: list[Event] = []

    def on_event(event: Event) -> None:
        events.append(event)
        if isinstance(event, Token):
            got_tokens.set()

    stream = client.chat([{"role": "user", "content": "Tell a long story"}], {"max_tokens": 900}, on_event)
    assert got_tokens.wait(120)
    stream.cancel()
    assert stream.done.wait(60)
    assert isinstance(events[-1], Done) and events[-1].stats.cancelled
    wait_until(lambda: not remote.get("/hearth/status")["requests"])
    assert remote.get("/hearth/status")["recent"][-1]["state"] == "cancelled"


def test_errors_arrive_as_error_events(remote: Served) -> None:
    bad_key = collect(RemoteClient(endpoint(remote, api_key="wrong")), [{"role": "user", "content": "x"}])
    assert isinstance(bad_key[-1], Error) and bad_key[-1].code == "invalid_api_key"
    unknown = RemoteClient(RemoteEndpoint(remote.base_url, "no-such-model", api_key=KEY))
    events = collect(unknown, [{"role": "user", "content": "x"}])
    assert isinstance(events[-1], Error) and events[-1].code == "model_not_found"
    with pytest.raises(RemoteError):
        RemoteClient(endpoint(remote, api_key="wrong")).models()
    nobody = RemoteClient(RemoteEndpoint("http://127.0.0.1:9/v1", "m"))
    events = collect(nobody, [{"role": "user", "content": "x"}])
    assert isinstance(events[-1], Error) and events[-1].code == "remote_unreachable"
