"""The app database on a real SQLite file: conversations, message trees, export, settings."""

from __future__ import annotations

import json

import pytest

from app.storage import ReplyStats, SamplingSettings, Storage, StorageError


@pytest.fixture
def store(tmp_path):
    s = Storage(tmp_path / "hearth.db")
    yield s
    s.close()


def _chat(store: Storage, cid: str, *pairs: tuple[str, str]) -> list[str]:
    ids: list[str] = []
    parent = None
    for user, reply in pairs:
        u = store.add_message(cid, parent, "user", user)
        a = store.add_message(cid, u.id, "assistant", reply)
        ids += [u.id, a.id]
        parent = a.id
    return ids


def test_create_list_rename_persist(tmp_path):
    store = Storage(tmp_path / "db.sqlite")
    a = store.create_conversation("First", system_prompt="be brief", model_id="smol")
    b = store.create_conversation()
    store.rename_conversation(a.id, "Renamed")
    store.add_message(a.id, None, "user", "hello")  # touches ``updated``
    store.close()

    again = Storage(tmp_path / "db.sqlite")
    convs = again.list_conversations()
    assert [c.id for c in convs] == [a.id, b.id]
    assert convs[0].title == "Renamed"
    assert convs[0].system_prompt == "be brief"
    assert convs[0].model_id == "smol"
    assert convs[1].title == "New chat"
    again.close()


def test_wal_mode(store):
    with store._engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_sampling_settings_round_trip(store):
    settings = SamplingSettings(
        temperature=0.2,
        top_k=5,
        seed=7,
        stop_sequences=("END", "##"),
        json_mode=True,
        thinking=True,
        thinking_budget_tokens=64,
    )
    conv = store.create_conversation(sampling=settings)
    assert store.get_conversation(conv.id).sampling == settings
    changed = settings.with_changes(max_tokens=9)
    store.update_conversation(conv.id, sampling=changed, system_prompt="sys")
    got = store.get_conversation(conv.id)
    assert got.sampling.max_tokens == 9
    assert got.system_prompt == "sys"
    assert SamplingSettings.from_dict({"temperature": 1.0, "unknown": 3}).temperature == 1.0


def test_branching_keeps_old_branch(store):
    cid = store.create_conversation().id
    u1, a1, u2, a2 = _chat(store, cid, ("hi", "hello"), ("how are you", "fine"))
    assert [m.id for m in store.active_branch(cid)] == [u1, a1, u2, a2]

    # Edit the second user message: a sibling of u2 under a1, with its own reply.
    u2b = store.add_message(cid, a1, "user", "what is 2+2")
    a2b = store.add_message(cid, u2b.id, "assistant", "4")
    assert [m.content for m in store.active_branch(cid)] == ["hi", "hello", "what is 2+2", "4"]
    sib = store.siblings(u2b.id)
    assert sib.ids == (u2, u2b.id) and sib.index == 1 and sib.count == 2

    # Switch back to the old branch: the newest descendant of u2 becomes the leaf.
    assert store.select_branch(u2) == a2
    assert [m.content for m in store.active_branch(cid)] == ["hi", "hello", "how are you", "fine"]
    assert store.select_branch(u2b.id) == a2b.id


def test_branch_with_siblings_matches_the_per_message_calls(store):
    cid = store.create_conversation().id
    u1, a1, u2, a2 = _chat(store, cid, ("hi", "hello"), ("q", "a"))
    u2b = store.add_message(cid, a1, "user", "q2")
    store.add_message(cid, u2b.id, "assistant", "a2")
    got = store.branch_with_siblings(cid)
    assert [m.id for m, _ in got] == [m.id for m in store.active_branch(cid)]
    assert [sib for _, sib in got] == [store.siblings(m.id) for m, _ in got]
    assert got[2][1].count == 2 and got[2][1].index == 1
    assert store.branch_with_siblings(store.create_conversation().id) == []


def test_purge_removes_every_per_chat_record(store):
    """A purged chat leaves no record behind: its session state, window, overflow policy,
    failure and type-ahead switch (each keyed ``<kind>/<id>``); a kept chat's and the app's
    own settings stay."""
    from app.conversation.state import failure_key, policy_key, window_key
    from app.conversation.type_ahead import chat_key
    from app.storage import session_key

    keyed = (session_key, window_key, policy_key, failure_key, chat_key)
    gone, kept = store.create_conversation().id, store.create_conversation().id
    for cid in (gone, kept):
        for key in keyed:
            store.set_setting(key(cid), {"of": cid})
    store.set_setting("last_conversation", gone)
    store.delete_conversation(gone)
    assert store.purge_deleted() == 1
    assert [key(gone) for key in keyed if store.get_setting(key(gone)) is not None] == []
    assert all(store.get_setting(key(kept)) == {"of": kept} for key in keyed)
    assert store.get_setting("last_conversation") == gone


def test_regenerate_adds_sibling_reply(store):
    cid = store.create_conversation().id
    u1, a1 = _chat(store, cid, ("q", "a"))
    stats = ReplyStats(
        ttft_ms=12.5, tokens_per_s=80.0, cache_hit_kind="sticky", cache_read=40, cache_created=64
    )
    a1b = store.add_message(cid, u1, "assistant", "a again", thinking="hmm", stats=stats)
    assert store.siblings(a1b.id).ids == (a1, a1b.id)
    got = store.get_message(a1b.id)
    assert got.stats == stats and got.thinking == "hmm"
    store.set_active_leaf(cid, a1)
    assert store.active_branch(cid)[-1].content == "a"


def test_root_siblings(store):
    cid = store.create_conversation().id
    r1 = store.add_message(cid, None, "user", "one")
    r2 = store.add_message(cid, None, "user", "two")
    assert store.siblings(r2.id).ids == (r1.id, r2.id)


def test_soft_delete_undo_and_purge(store):
    a = store.create_conversation("keep")
    b = store.create_conversation("drop")
    _chat(store, b.id, ("x", "y"))
    store.delete_conversation(b.id)
    assert [c.id for c in store.list_conversations()] == [a.id]
    assert store.undo_delete(b.id).title == "drop"
    assert {c.id for c in store.list_conversations()} == {a.id, b.id}
    store.delete_conversation(b.id)
    assert store.purge_deleted() == 1
    with pytest.raises(StorageError):
        store.get_conversation(b.id)
    assert store.list_conversations(include_deleted=True)[0].id == a.id


def test_search_title_and_content(store):
    a = store.create_conversation("Rust lifetimes")
    b = store.create_conversation("Dinner")
    _chat(store, b.id, ("a recipe with 100% saffron", "ok"))
    assert [c.id for c in store.search("rust")] == [a.id]
    assert [c.id for c in store.search("SAFFRON")] == [b.id]
    assert [c.id for c in store.search("100%")] == [b.id]
    assert store.search("_") == []
    store.delete_conversation(b.id)
    assert store.search("saffron") == []
    assert len(store.search("  ")) == 1


def test_export_markdown_and_json(store):
    conv = store.create_conversation("Export me", system_prompt="You are terse.")
    _chat(store, conv.id, ("Show code", "```python\nprint(1)\n```"))
    md = store.export_markdown(conv.id)
    assert md.startswith("# Export me\n")
    assert "> **System:** You are terse." in md
    assert "## User\n\nShow code" in md
    assert "```python\nprint(1)\n```" in md
    doc = json.loads(store.export_json(conv.id))
    assert doc["title"] == "Export me"
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant"]
    assert doc["active_path"] == [m["id"] for m in doc["messages"]]


def test_settings(store):
    assert store.get_setting("theme", "system") == "system"
    store.set_setting("theme", "dark")
    store.set_setting("geometry", "AbC=")
    store.set_setting("theme", "light")
    assert store.get_setting("theme") == "light"
    assert store.get_setting("geometry") == "AbC="


def test_errors(store, tmp_path):
    with pytest.raises(StorageError):
        store.get_conversation("nope")
    cid = store.create_conversation().id
    other = store.create_conversation().id
    m = store.add_message(other, None, "user", "x")
    with pytest.raises(StorageError):
        store.add_message(cid, m.id, "assistant", "y")
    with pytest.raises(ValueError):
        store.add_message(cid, None, "robot", "y")
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StorageError):
        Storage(tmp_path / "dir.db").list_conversations()


def test_markdown_export_closes_a_fence_a_cut_reply_left_open():
    from app.storage.export import close_fences

    assert close_fences("```python\nprint(1)") == "```python\nprint(1)\n```"
    assert close_fences("````\n```\nstill code") == "````\n```\nstill code\n````"
    assert close_fences("~~~\ncode\n~~~\nprose") == "~~~\ncode\n~~~\nprose"
    assert close_fences("```js\nx\n```\n") == "```js\nx\n```\n"
    assert close_fences("inline ``` is not a fence") == "inline ``` is not a fence"
