"""Reuse of every token already computed (issue 13), the way chat clients actually send turns.

Each test drives a conversation through the engine the way a client does — the whole
conversation re-rendered with the chat template every turn — and checks, for every turn, that
the engine reused at least (shared tokens − 1) of what it already holds, and that the greedy
reply equals the reply of a cold run of the same prompt. "Shared" is measured here, by the
test: the longest prefix the prompt shares with anything computed before (an earlier prompt
plus its reply, any conversation).
"""

from __future__ import annotations

import pytest

from app.engine import Engine
from tests.helpers.reuse_client import Client
from tests.helpers.reuse_client import assistant as _assistant
from tests.helpers.reuse_client import config as _config
from tests.helpers.reuse_client import user as _user


@pytest.fixture
def client(tmp_path, tiny_model_path):
    engine = Engine(tmp_path / "data")
    engine.load_model("m", _config(tiny_model_path))
    c = Client(engine, tiny_model_path, tmp_path)
    yield c
    c.close()
    c.engine.close()


@pytest.mark.parametrize("session", [None, "chat-1"])
def test_follow_up_regenerate_edit_and_branch_reuse_what_is_held(client, session):
    kw = {} if session is None else {"session_id": session}
    q1, q2 = "How do I bake a simple loaf of bread?", "How long should it rise?"
    reply1, stats = client.turn([_user(q1)], **kw)
    assert stats.cache_hit_kind == "cold"
    history = [_user(q1), _assistant(reply1)]
    # a follow-up sent right after the reply
    reply2, stats = client.turn([*history, _user(q2)], **kw)
    assert stats.reuse.tokens_reused > 0
    # regenerate: the same prompt again
    _, stats = client.turn([*history, _user(q2)], **kw)
    assert stats.reuse.tokens_reused > 0
    # edit of the last user message
    _, stats = client.turn([*history, _user("How long should the dough rest?")], **kw)
    assert stats.reuse.tokens_reused > 0
    # branch from the first message: another first question under the same system prompt
    _, stats = client.turn([_user("What should I see in Lisbon?")], **kw)
    assert stats.reuse.tokens_reused > 0


def test_a_chat_switched_away_and_back_after_its_seq_was_released(client):
    # n_seq_max is 2: a third conversation makes the engine release the least recent one.
    first = [_user("Why is the sky blue?")]
    reply, _ = client.turn(first, session_id="a")
    client.turn([_user("Name three rivers in Europe.")], session_id="b")
    client.turn([_user("What is a good first houseplant?")], session_id="c")  # releases "a"
    _, stats = client.turn([*first, _assistant(reply), _user("And why are sunsets red?")], session_id="a")
    assert stats.cache_hit_kind in ("exact", "partial")
    assert stats.reuse.source == "cache"


def test_the_next_turn_after_a_restart_reuses_the_saved_conversation(client, tmp_path, tiny_model_path):
    first = [_user("How do I reverse a list in Python?")]
    reply, _ = client.turn(first, session_id="x")
    client.engine.close()
    client.engine = Engine(tmp_path / "data")
    client.engine.load_model("m", _config(tiny_model_path))
    # the load made the memory the saved conversation is read and assembled into (``prepare_restores``)
    reserved = client.engine.cache.memory.kept_bytes
    assert reserved > 0
    _, stats = client.turn([*first, _assistant(reply), _user("And a string?")], session_id="x")
    assert stats.reuse.source == "cache"
    assert client.engine.cache.memory.kept_bytes == reserved  # used (the restore, the save after it), no more


def test_a_miss_says_why(client):
    _, stats = client.turn([_user("Tell me about lighthouses.")])
    assert stats.reuse.source == "none"
    assert stats.reuse.miss_reason == "nothing_shared"


@pytest.mark.smollm2
def test_smollm2_conversation_reuses_every_shared_token_and_answers_like_cold(tmp_path, smollm2_path):
    engine = Engine(tmp_path / "data")
    engine.load_model("m", _config(smollm2_path, n_ctx=2048))
    client = Client(engine, smollm2_path, tmp_path)
    try:
        q1 = "What is the capital of France? Answer in one sentence."
        reply1, _ = client.turn([_user(q1)])
        history = [_user(q1), _assistant(reply1)]
        client.turn([*history, _user("And of Italy?")])
        client.turn([*history, _user("And of Italy?")])  # regenerate
        client.turn([*history, _user("And of Spain?")])  # edit
        client.turn([*history, _user("And of Spain?")], session_id="s")
        client.turn([*history, _user("And of Portugal?")], session_id="s")  # edit in a session
    finally:
        client.close()
        engine.close()
