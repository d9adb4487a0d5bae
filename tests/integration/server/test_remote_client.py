"""``app.remote.client`` (what a remote model's chat uses) against a real ``hearth serve``."""

from __future__ import annotations

import threading

from app.engine.events import Done, Error, Event, Token
from app.remote.client import RemoteClient
from app.remote.endpoint import RemoteEndpoint
from tests.integration.server.conftest import Served, wait_until

MESSAGES = [{"role": "user", "content": "Name three colours."}]


def _collect(client: RemoteClient, params: dict[str, object], stop_after: int = 0) -> list[Event]:
    events: list[Event] = []
    enough = threading.Event()

    def on_event(event: Event) -> None:
        events.append(event)
        if stop_after and sum(isinstance(e, Token) for e in events) >= stop_after:
            enough.set()

    stream = client.chat(MESSAGES, params, on_event)
    if stop_after:
        assert enough.wait(120), events
        stream.cancel()
    stream.join(120)
    assert stream.done.is_set()
    return events


def test_a_streamed_reply_is_the_servers_reply_token_by_token(served: Served) -> None:
    client = RemoteClient(RemoteEndpoint(served.base_url, served.model_id))
    assert client.models() == [served.model_id]
    events = _collect(client, {"temperature": 0, "max_tokens": 12})
    tokens = [e.text for e in events if isinstance(e, Token)]
    assert len(tokens) > 1  # streamed, not one block
    (done,) = [e for e in events if isinstance(e, Done)]
    expected = served.client().chat.completions.create(
        model=served.model_id, messages=MESSAGES, temperature=0, max_tokens=12)  # type: ignore[arg-type]
    assert "".join(tokens) == expected.choices[0].message.content
    assert expected.usage is not None
    assert (done.stats.prompt_tokens, done.stats.completion_tokens) == (
        expected.usage.prompt_tokens, expected.usage.completion_tokens)
    assert done.stats.cache_hit_kind == "cold" and not done.stats.cancelled


def test_cancel_hangs_up_and_the_server_frees_the_request(served: Served) -> None:
    client = RemoteClient(RemoteEndpoint(served.base_url, served.model_id))
    events = _collect(client, {"temperature": 0, "max_tokens": 900}, stop_after=3)
    (done,) = [e for e in events if isinstance(e, Done)]
    assert done.stats.cancelled and done.stats.finish_reason == "cancelled"
    assert not any(isinstance(e, Error) for e in events)
    wait_until(lambda: not served.get("/hearth/status")["requests"])
    assert served.get("/hearth/status")["recent"][-1]["state"] == "cancelled"


def test_an_unknown_model_is_a_clear_error(served: Served) -> None:
    client = RemoteClient(RemoteEndpoint(served.base_url, "no-such-model"))
    (error,) = _collect(client, {"max_tokens": 4})
    assert isinstance(error, Error)
    assert "does not offer the model 'no-such-model'" in error.reason and "404" in error.reason
