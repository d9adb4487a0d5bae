"""A message's way from the controller to the engine goes one way and reads the chat once
(docs/architecture.md, "A message's way"): the chat is read, the request submitted, then the
message stored; on the fake engine (byte-level tokens)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.storage import Storage, StorageError
from app.ui.bridges import ModelBridges
from app.ui.chat.controller import ChatController
from tests.helpers.fake_engine import FakeEngine

CONFIG = SimpleNamespace(path="/x/fake.gguf", n_ctx=4096, n_seq_max=4)
READS = ("get_conversation", "active_branch", "path_to", "documents", "get_setting")


@pytest.fixture
def chat(qtbot, tmp_path):
    engine = FakeEngine(tmp_path)
    model = engine.load_model("fake", CONFIG)
    storage = Storage(tmp_path / "app.db")
    models = ModelBridges(None)
    models.open("fake", model)
    controller = ChatController(storage, models, default_model_id="fake")
    yield controller, storage, model
    controller.shutdown()
    models.shutdown()
    engine.close()


def _trace(monkeypatch, storage: Storage, model, log: list[str]) -> None:
    """Note each read of the database, the message's storing and the engine's request."""
    for name in (*READS, "add_message"):
        real = getattr(storage, name)
        monkeypatch.setattr(storage, name, lambda *a, _real=real, _name=name, **kw: log.append(_name) or _real(*a, **kw))
    for name in ("infer", "continue_session"):
        real = getattr(model, name)
        monkeypatch.setattr(model, name, lambda *a, _real=real, **kw: log.append("engine") or _real(*a, **kw))


def _done(qtbot, controller: ChatController, cid: str) -> None:
    qtbot.waitUntil(lambda: not controller.is_busy(cid), timeout=10_000)


def test_a_message_reads_the_chat_once_and_reaches_the_engine_before_it_is_stored(chat, qtbot, monkeypatch):
    controller, storage, model = chat
    conv = controller.new_conversation()
    assert conv is not None
    log: list[str] = []
    _trace(monkeypatch, storage, model, log)
    assert controller.send(conv.id, "hello")
    assert log.count("get_conversation") == 1 and log.count("active_branch") == 1
    assert "path_to" not in log and log.count("documents") == 1
    assert log.index("engine") < log.index("add_message")  # the engine reads while it is stored
    assert log.index("active_branch") < log.index("engine")
    _done(qtbot, controller, conv.id)
    branch = controller.branch(conv.id)
    assert [m.role for m in branch] == ["user", "assistant"] and branch[0].content == "hello"
    assert controller.title_of(conv.id) == "hello"  # named after its first message
    assert controller.catalog.entries()[0].title == "hello"

    # The chat page reads the chat once for its checks and hands that read on: no other read.
    turn = controller.read_turn(conv.id)
    assert turn is not None and not turn.unanswered
    log.clear()
    assert controller.send(conv.id, "and then?", turn)
    assert [name for name in log if name in ("get_conversation", "active_branch", "path_to")] == []
    assert log.index("engine") < log.index("add_message")
    assert model.calls[-1][0] == "continue_session"  # the sticky session goes on
    _done(qtbot, controller, conv.id)
    assert [m.content for m in controller.branch(conv.id)][2] == "and then?"


def test_a_message_that_cannot_be_stored_withdraws_its_request(chat, qtbot, monkeypatch):
    controller, storage, model = chat
    conv = controller.new_conversation()
    assert conv is not None
    errors: list[str] = []
    controller.error_raised.connect(errors.append)
    streams = []
    infer = model.infer
    monkeypatch.setattr(model, "infer", lambda *a, **kw: streams.append(infer(*a, **kw)) or streams[-1])

    def refuse(*a, **kw):
        raise StorageError("disk I/O error")

    monkeypatch.setattr(storage, "add_message", refuse)
    assert not controller.send(conv.id, "hello")
    assert errors == ["Could not save the message: disk I/O error"]
    assert not controller.is_busy(conv.id) and controller.failed == {}
    qtbot.waitUntil(lambda: bool(streams) and streams[0].done.is_set(), timeout=10_000)
    monkeypatch.undo()
    assert controller.branch(conv.id) == []  # nothing stored, no reply kept
