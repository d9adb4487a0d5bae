"""Reuse of every token already computed (issue 13), the way chat clients actually send turns.

Each test drives a conversation through the engine the way a client does — the whole
conversation re-rendered with the chat template every turn — and checks, for every turn, that
the engine reused at least (shared tokens − 1) of what it already holds, and that the greedy
reply equals the reply of a cold run of the same prompt. "Shared" is measured here, by the
test: the longest prefix the prompt shares with anything computed before (an earlier prompt
plus its reply, any conversation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig
from app.engine.events import Done, Token, TokenId

POLICY = CachePolicy(
    min_tokens=8, cold_min_tokens=64, cold_max_tokens=30000, continued_interval=4096,
    boundary_trim_tokens=4, boundary_align_tokens=64, session_resume_wait_ms=500,
)  # fmt: skip
SYSTEM = (
    "You are Hearth, a friendly and precise assistant running on the user's own computer. "
    "You answer in plain English, keep answers short, and never invent facts."
)
N_NEW = 16


def _config(path: Path, **kw) -> ModelConfig:
    kw.setdefault("n_ctx", 1024)
    kw.setdefault("n_seq_max", 2)
    kw.setdefault("n_batch", 256)
    kw.setdefault("n_threads", 2)
    kw.setdefault("policy", POLICY)
    kw.setdefault("tier", "disk")
    return ModelConfig(path=str(path), **kw)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class Client:
    """A chat client: re-renders the conversation each turn; remembers what was computed."""

    engine: Engine
    path: Path
    tmp: Path
    held: list[list[int]] = field(default_factory=list)
    cold_engine: Engine | None = None

    @property
    def model(self):
        return self.engine.get_model("m")

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        return self.model.apply_chat_template({"messages": messages, "system": SYSTEM})

    def cold(self, prompt: list[int]) -> list[int]:
        if self.cold_engine is None:
            self.cold_engine = Engine(self.tmp / "cold")
            self.cold_engine.load_model("m", _config(self.path, cache_enabled=False, n_seq_max=1))
        return _run(self.cold_engine.get_model("m"), prompt)[0]

    def turn(self, messages: list[dict[str, str]], **kw) -> tuple[str, object]:
        """Send a turn; check reuse ≥ shared − 1 and reply == cold reply; return (text, stats)."""
        prompt = self.render(messages)
        shared = min(max((_lcp(prompt, h) for h in self.held), default=0), len(prompt) - 1)
        ids, stats, text = _run(self.model, prompt, **kw)
        assert stats.reuse.tokens_reused >= shared - 1, (
            f"reused {stats.reuse.tokens_reused} of {shared} shared tokens ({stats.reuse}, "
            f"kind {stats.cache_hit_kind})"
        )
        assert ids == self.cold(prompt), "the greedy reply differs from a cold run"
        self.held.append([*prompt, *ids])
        return text, stats

    def close(self) -> None:
        if self.cold_engine is not None:
            self.cold_engine.close()


def _run(model, prompt, **kw):
    ids: list[int] = []
    text: list[str] = []
    stats = None
    for event in model.infer(prompt, response_tokens=N_NEW, **kw):
        if isinstance(event, TokenId):
            ids.append(event.id)
        elif isinstance(event, Token):
            text.append(event.text)
        elif isinstance(event, Done):
            stats = event.stats
    assert stats is not None
    return ids, stats, "".join(text)


@pytest.fixture
def client(tmp_path, tiny_model_path):
    engine = Engine(tmp_path / "data")
    engine.load_model("m", _config(tiny_model_path))
    c = Client(engine, tiny_model_path, tmp_path)
    yield c
    c.close()
    c.engine.close()


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


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
    _, stats = client.turn([*first, _assistant(reply), _user("And a string?")], session_id="x")
    assert stats.reuse.source == "cache"


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
