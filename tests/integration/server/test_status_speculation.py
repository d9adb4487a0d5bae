"""``/hearth/status`` reports speculative decoding: per model whether it is on and the draft
tokens pushed and accepted, per finished request the same counts its reply had."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from app.engine import Engine, ModelConfig
from app.server.app import create_app
from app.server.config import ServerConfig
from app.server.thread import ServerThread
from tests.helpers.forced_drafts import ReplyOracle, always_draft


@pytest.fixture
def engine(tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    always_draft(monkeypatch)  # every decode row drafts, so the counts cannot be zero by luck
    engine = Engine(tmp_path)
    try:
        engine.load_model("tiny", ModelConfig(path=str(tiny_model_path), n_ctx=1024, n_seq_max=2, n_threads=2))
        engine.load_model("plain", ModelConfig(path=str(tiny_model_path), n_ctx=1024, n_seq_max=1, n_threads=2,
                                               speculative=False))  # fmt: skip
        yield engine
    finally:
        engine.close()


@pytest.fixture
def server(engine: Engine) -> Iterator[ServerThread]:
    config = ServerConfig(port=0)
    thread = ServerThread(create_app(engine, config), config)
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


def status(server: ServerThread) -> Any:
    with urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/hearth/status", timeout=30) as resp:
        return json.load(resp)


def test_status_names_the_draft_model_a_model_drafts_with(server: ServerThread, engine: Engine) -> None:
    engine.get_model("tiny").use_draft("plain")  # same weights, so the same vocabulary
    models = {m["id"]: m for m in status(server)["models"]}
    assert models["tiny"]["speculation"]["draft_model"] == "plain"
    engine.unload("plain")  # a draft model that goes away drafts for no one
    models = {m["id"]: m for m in status(server)["models"]}
    assert set(models) == {"tiny"} and models["tiny"]["speculation"]["draft_model"] is None


def test_status_reports_drafted_and_accepted_tokens(server: ServerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    oracle = ReplyOracle(monkeypatch)
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=120)

    def ask() -> str:
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Repeat: one two three, one two three."}],
            max_tokens=40, temperature=0.0,
        )
        assert reply.usage is not None and reply.usage.completion_tokens > 0
        return reply.choices[0].message.content or ""

    first = ask()  # the forced drafts: nearly all rejected
    oracle.known = True
    assert ask() == first  # drafted with the first reply's own tokens: accepted, same reply
    doc = status(server)
    models = {m["id"]: m for m in doc["models"]}
    spec = models["tiny"]["speculation"]
    assert spec["enabled"] is True
    records = [r for r in doc["recent"] if r["model"] == "tiny"][-2:]
    assert len(records) == 2 and records[-1]["accepted_tokens"] > 0
    assert spec["drafted"] == sum(r["drafted_tokens"] for r in records)
    assert 0 < spec["accepted"] == sum(r["accepted_tokens"] for r in records) <= spec["drafted"]
    assert models["plain"]["speculation"] == {
        "enabled": False, "drafted": 0, "accepted": 0, "draft_max": 0, "draft_model": None,
    }  # fmt: skip
    assert spec["draft_model"] is None and spec["draft_max"] == 16  # the setting: ModelConfig's default
    assert all({"num_drafted", "num_accepted", "draft_length"} <= set(slot) for slot in models["tiny"]["slots"])


def test_status_reports_the_draft_length_setting(tiny_model_path: Path, tmp_path: Path) -> None:
    engine = Engine(tmp_path)
    try:
        engine.load_model("short", ModelConfig(path=str(tiny_model_path), n_ctx=512, n_seq_max=1, n_threads=1,
                                               draft_max=3))  # fmt: skip
        config = ServerConfig(port=0)
        thread = ServerThread(create_app(engine, config), config)
        thread.start()
        try:
            spec = status(thread)["models"][0]["speculation"]
        finally:
            thread.stop()
    finally:
        engine.close()
    assert spec == {"enabled": True, "drafted": 0, "accepted": 0, "draft_max": 3, "draft_model": None}
