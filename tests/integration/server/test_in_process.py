"""The server inside another program (as the app's "Local server" runs it): models come and
go under it while clients are connected."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from app.engine import Engine, ModelConfig
from app.server.app import create_app
from app.server.config import ServerConfig
from app.server.thread import ServerThread


@pytest.fixture
def running(tiny_model_path: Path, tmp_path: Path) -> Iterator[tuple[Engine, ServerThread]]:
    engine = Engine(tmp_path)
    engine.load_model("tiny", ModelConfig(path=str(tiny_model_path), n_ctx=1024, n_seq_max=2, n_threads=2))
    config = ServerConfig(port=0)
    server = ServerThread(create_app(engine, config), config)
    server.start()
    try:
        yield engine, server
    finally:
        server.stop()
        engine.close()


def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=120)


def test_unloading_the_model_mid_stream_ends_it_with_an_error_then_404(
    running: tuple[Engine, ServerThread],
) -> None:
    engine, server = running
    stream = client(server).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "A long story, please."}], max_tokens=900, stream=True,
    )
    chunks = iter(stream)
    for _ in range(3):
        next(chunks)
    engine.unload("tiny")
    with pytest.raises(openai.APIError) as err:
        for _ in chunks:
            pass
    assert "unloaded" in str(err.value)
    with pytest.raises(openai.NotFoundError) as missing:
        client(server).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}])
    assert missing.value.body["code"] == "model_not_found"  # type: ignore[index]
    assert client(server).models.list().data == []


def test_a_model_loaded_later_is_served_at_once(
    running: tuple[Engine, ServerThread], tiny_model_path: Path
) -> None:
    engine, server = running
    engine.load_model("tiny-2", ModelConfig(path=str(tiny_model_path), n_ctx=512, n_seq_max=1, n_threads=2))
    assert {m.id for m in client(server).models.list().data} == {"tiny", "tiny-2"}
    reply = client(server).chat.completions.create(model="tiny-2", messages=[{"role": "user", "content": "Hi"}],
                                                   max_tokens=3, temperature=0)
    assert reply.model == "tiny-2" and reply.usage.completion_tokens <= 3  # type: ignore[union-attr]


def test_stopping_the_server_ends_open_streams_and_frees_the_port(
    running: tuple[Engine, ServerThread],
) -> None:
    engine, server = running
    stream = client(server).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "A long story, please."}], max_tokens=900, stream=True,
    )
    chunks = iter(stream)
    next(chunks)
    server.stop()
    with pytest.raises(openai.APIError):
        for _ in chunks:
            pass
    model = engine.get_model("tiny")
    deadline = time.monotonic() + 60
    while model.status() != "idle" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert model.status() == "idle"  # the request was cancelled, not left generating
    with pytest.raises(openai.APIConnectionError):
        client(server).models.list()


def test_the_cache_writer_waits_while_a_request_is_prepared(
    running: tuple[Engine, ServerThread], monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the route's start to its admission (template, tokens, ``infer``) the request is
    on its way (``Model.arriving``): queued saves are held back meanwhile (issue 24, B9)."""
    import app.server.routes_chat as routes

    engine, server = running
    held: list[bool] = []
    render = routes.build_chat_prompt

    def spy(*args: object, **kw: object) -> object:
        held.append(bool(engine.cache._hold.holders))
        return render(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(routes, "build_chat_prompt", spy)
    assert not engine.cache._hold.holders
    client(server).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert held == [True]
