"""Hostile input to the app database (issue #15 item 9): ``bytes`` where text belongs and
unpaired surrogates. Each is refused with a clear ``InvalidTextError`` (a ``StorageError``)
before anything is written, so nothing already stored is lost and export keeps working."""

from __future__ import annotations

import json
import sqlite3

import pytest

from app.storage import InvalidTextError, SamplingSettings, Storage, StorageError

LONE = "bad \ud800 text"


@pytest.fixture
def store(tmp_path):
    s = Storage(tmp_path / "hearth.db")
    yield s
    s.close()


def _snapshot(store: Storage, cid: str) -> tuple[str, str]:
    return store.export_json(cid), store.export_markdown(cid)


def test_bytes_message_is_refused_and_export_still_works(store):
    conv = store.create_conversation("Chat")
    first = store.add_message(conv.id, None, "user", "hello")
    before = _snapshot(store, conv.id)
    with pytest.raises(InvalidTextError, match="message text must be a str, not bytes"):
        store.add_message(conv.id, first.id, "assistant", b"raw bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidTextError, match="thinking text"):
        store.add_message(conv.id, first.id, "assistant", "ok", thinking=b"x")  # type: ignore[arg-type]
    assert _snapshot(store, conv.id) == before
    assert [m.content for m in store.active_branch(conv.id)] == ["hello"]
    doc = json.loads(store.export_json(conv.id))
    assert [m["content"] for m in doc["messages"]] == ["hello"]


@pytest.mark.parametrize(
    "action",
    [
        lambda s, c: s.add_message(c, None, "user", LONE),
        lambda s, c: s.add_message(c, None, "assistant", "fine", thinking=LONE),
        lambda s, c: s.rename_conversation(c, LONE),
        lambda s, c: s.update_conversation(c, system_prompt=LONE),
        lambda s, c: s.update_conversation(
            c, sampling=SamplingSettings(stop_sequences=("\udfff",))
        ),
        lambda s, c: s.create_conversation(LONE),
        lambda s, c: s.set_setting("theme", LONE),
        lambda s, c: s.set_setting("presets", [{"name": "x", "system_prompt": LONE}]),
        lambda s, c: s.search(LONE),
    ],
    ids=[
        "message", "thinking", "title", "system-prompt", "stop-sequence", "new-title",
        "setting", "nested-setting", "search",
    ],
)
def test_lone_surrogate_is_a_clear_error_and_nothing_changes(store, action):
    conv = store.create_conversation("Chat", system_prompt="be kind")
    store.add_message(conv.id, None, "user", "hello")
    store.set_setting("theme", "dark")
    before = (_snapshot(store, conv.id), store.get_conversation(conv.id), store.get_setting("theme"))
    with pytest.raises(InvalidTextError) as info:
        action(store, conv.id)
    assert isinstance(info.value, StorageError) and isinstance(info.value, ValueError)
    assert "unpaired surrogate" in str(info.value)
    after = (_snapshot(store, conv.id), store.get_conversation(conv.id), store.get_setting("theme"))
    assert after == before
    assert len(store.list_conversations()) == 1


def test_valid_surrogate_pairs_and_astral_text_are_stored(store):
    conv = store.create_conversation("emoji 🔥")
    text = "a pair 😀 and CJK 漢字 and RTL עברית"
    store.add_message(conv.id, None, "user", text)
    assert store.active_branch(conv.id)[0].content == text
    assert text in store.export_markdown(conv.id)
    assert json.loads(store.export_json(conv.id))["messages"][0]["content"] == text


def test_an_older_database_with_bytes_and_escaped_surrogates_still_exports(tmp_path):
    """Rows written before the check (a BLOB content, a JSON ``\\ud800`` escape in the
    sampling) are read back as text, and export never fails on them."""
    path = tmp_path / "hearth.db"
    store = Storage(path)
    conv = store.create_conversation("Old chat")
    msg = store.add_message(conv.id, None, "user", "placeholder")
    store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE messages SET content = ? WHERE id = ?", ("héllo".encode(), msg.id))
    db.execute(
        "UPDATE conversations SET sampling = ? WHERE id = ?",
        ('{"stop_sequences": ["\\ud800"]}', conv.id),
    )
    db.commit()
    db.close()

    again = Storage(path)
    try:
        assert again.active_branch(conv.id)[0].content == "héllo"
        md = again.export_markdown(conv.id)
        js = again.export_json(conv.id)
        md.encode("utf-8")
        js.encode("utf-8")
        assert "héllo" in md
        doc = json.loads(js)
        assert doc["messages"][0]["content"] == "héllo"
        assert doc["sampling"]["stop_sequences"] == ["\ufffd"]
    finally:
        again.close()
