"""The reads the chat view repeats (a conversation, a setting, the shown branch) come from
memory until the next write, and every kind of write is seen by the next read."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.storage import SamplingSettings, Storage


@pytest.fixture
def store(tmp_path):
    s = Storage(tmp_path / "hearth.db")
    yield s
    s.close()


def _count_selects(store: Storage) -> list[str]:
    from sqlalchemy import event

    seen: list[str] = []
    event.listen(
        store._engine,  # noqa: SLF001 — counting the statements is the point
        "before_cursor_execute",
        lambda _c, _cur, statement, *_a: seen.append(statement),
    )
    return seen


def test_repeated_reads_do_not_reach_the_database(store):
    conv = store.create_conversation("Chat")
    u = store.add_message(conv.id, None, "user", "hello")
    store.add_message(conv.id, u.id, "assistant", "hi")
    store.set_setting("overflow/x", "drop_oldest")
    first = (store.get_conversation(conv.id), store.branch_with_siblings(conv.id),
             store.get_setting("overflow/x"), store.get_setting("absent", "dflt"))
    statements = _count_selects(store)
    for _ in range(5):
        again = (store.get_conversation(conv.id), store.branch_with_siblings(conv.id),
                 store.get_setting("overflow/x"), store.get_setting("absent", "dflt"))
        assert again == first
    assert statements == []
    assert store.active_branch(conv.id) == [m for m, _s in first[1]]


def test_every_write_is_seen_by_the_next_read(store):
    conv = store.create_conversation("Chat")
    cid = conv.id
    assert store.get_conversation(cid).title == "Chat"
    store.rename_conversation(cid, "Renamed")
    assert store.get_conversation(cid).title == "Renamed"
    store.update_conversation(cid, model_id="m", sampling=SamplingSettings(temperature=0.1))
    assert store.get_conversation(cid).model_id == "m"
    assert store.get_conversation(cid).sampling.temperature == 0.1

    assert store.branch_with_siblings(cid) == []
    u = store.add_message(cid, None, "user", "hello")
    assert [m.id for m in store.active_branch(cid)] == [u.id]
    assert store.get_conversation(cid).active_leaf_id == u.id
    a1 = store.add_message(cid, u.id, "assistant", "one")
    a2 = store.add_message(cid, u.id, "assistant", "two")
    assert [m.id for m, _s in store.branch_with_siblings(cid)] == [u.id, a2.id]
    store.select_branch(a1.id)
    branch = store.branch_with_siblings(cid)
    assert [m.id for m, _s in branch] == [u.id, a1.id]
    assert branch[1][1].count == 2
    store.set_active_leaf(cid, u.id)
    assert [m.id for m in store.active_branch(cid)] == [u.id]

    assert store.get_setting("k") is None
    store.set_setting("k", "a")
    assert store.get_setting("k") == "a"
    store.set_setting("k", "b")
    assert store.get_setting("k") == "b"
    store.delete_setting("k")  # a bulk DELETE statement, not an ORM change
    assert store.get_setting("k", "gone") == "gone"

    store.delete_conversation(cid)
    assert store.get_conversation(cid).deleted
    store.undo_delete(cid)
    assert not store.get_conversation(cid).deleted


def test_a_write_outside_the_stores_methods_is_seen_too(store):
    conv = store.create_conversation("Chat")
    assert store.get_conversation(conv.id).title == "Chat"
    with store._session() as s:  # noqa: SLF001 — any statement through the engine
        s.execute(text("UPDATE conversations SET title = 'raw' WHERE id = :i"), {"i": conv.id})
    assert store.get_conversation(conv.id).title == "raw"


def test_a_caller_changing_a_setting_value_does_not_change_the_cache(store):
    store.set_setting("window/x", {"start_id": "a", "summary": "s"})
    value = store.get_setting("window/x")
    value["summary"] = "changed by the caller"
    assert store.get_setting("window/x") == {"start_id": "a", "summary": "s"}
    conv = store.create_conversation("Chat")
    store.add_message(conv.id, None, "user", "hello")
    store.branch_with_siblings(conv.id).clear()
    assert len(store.branch_with_siblings(conv.id)) == 1


def test_a_write_drops_only_the_reads_it_can_change(store):
    """A message written (every send) keeps the settings read; a setting written keeps the
    chats read; each is seen by the next read of its own kind."""
    conv = store.create_conversation("Chat")
    store.set_setting("overflow/x", "drop_oldest")
    store.get_setting("overflow/x")
    statements = _count_selects(store)
    u = store.add_message(conv.id, None, "user", "hello")
    del statements[:]
    assert store.get_setting("overflow/x") == "drop_oldest"
    assert statements == []  # not read again
    assert [m.id for m in store.active_branch(conv.id)] == [u.id]  # the message is seen
    assert store.get_conversation(conv.id).active_leaf_id == u.id
    del statements[:]
    store.set_setting("overflow/x", "summarize")
    del statements[:]
    assert [m.id for m in store.active_branch(conv.id)] == [u.id]
    assert store.get_conversation(conv.id).active_leaf_id == u.id
    assert statements == []  # the chat's reads were kept
    assert store.get_setting("overflow/x") == "summarize"  # the setting is seen
    assert len(statements) == 1


def test_a_raw_write_to_the_settings_is_seen(store):
    store.set_setting("k", "a")
    assert store.get_setting("k") == "a"
    with store._session() as s:  # noqa: SLF001 — any statement through the engine
        s.execute(text("UPDATE settings SET value = '\"raw\"' WHERE key = 'k'"))
    assert store.get_setting("k") == "raw"
    with store._session() as s:  # noqa: SLF001
        s.execute(text("DELETE FROM settings"))
    assert store.get_setting("k", "gone") == "gone"


@pytest.mark.parametrize(("statement", "kinds"), [
    ("INSERT INTO settings (key, value) VALUES (?, ?)", {"setting"}),
    ('UPDATE "settings" SET value=? WHERE settings."key" = ?', {"setting"}),
    ("delete from settings where key = ?", {"setting"}),
    ("INSERT OR REPLACE INTO messages (id) VALUES (?)", {"conversation", "branch"}),
    ("UPDATE conversations SET title=?", {"conversation", "branch"}),
    ("DELETE FROM conversations WHERE deleted_at IS NOT NULL", {"conversation", "branch"}),
    ("CREATE TABLE other (x)", None),
    ("INSERT INTO other (x) VALUES (1)", None),
    ("PRAGMA foreign_keys=ON", None),
])  # fmt: skip
def test_what_a_statement_can_change(statement, kinds):
    from app.storage.db import kinds_written

    assert kinds_written(statement) == (None if kinds is None else frozenset(kinds))
