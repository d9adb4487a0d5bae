"""Every memory type llama.cpp knows, through every flow a chat user or client takes (issue 28).

The tiny models of ``tests.helpers.tiny_families`` — ``mamba2`` (recurrent), ``lfm2``
(hybrid: convolution state + attention), ``gemma3`` (sliding window) — and the tiny llama
as the attention control go through: a chat, a follow-up, a regenerate, an edit of an
earlier message, a branch, a restart, and four chats that start together. Every reply must
be bit-identical to a cold solo run of the same prompt (greedy), reuse at least what the
model's memory allows (``tests.helpers.reuse_client``: any shared head for attention, the
turn boundaries a checkpoint covers for the others), and leave no sequence behind.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from app.engine import Engine
from app.engine.events import TokenId
from app.engine.scheduling.scheduler import Scheduler
from tests.helpers.reuse_client import Client, assistant, config, run, user
from tests.helpers.tiny_families import ensure_tiny_family

FAMILIES = ("llama", "mamba2", "lfm2", "gemma3")
EXPECTED_KIND = {"llama": "attention", "mamba2": "recurrent", "lfm2": "hybrid", "gemma3": "sliding_window"}


@pytest.fixture(params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def model_path(family: str, assets_dir: Path, tiny_model_path: Path) -> Path:
    return tiny_model_path if family == "llama" else ensure_tiny_family(family, assets_dir)


@pytest.fixture
def client(tmp_path: Path, family: str, model_path: Path):
    engine = Engine(tmp_path / "data")
    engine.load_model("m", config(model_path, n_seq_max=4))
    c = Client(engine, model_path, tmp_path, whole_states=family != "llama")
    yield c
    c.close()
    c.engine.close()


def _no_seq_left(client: Client, sessions: tuple[str, ...] = ()) -> None:
    model = client.model
    for sid in sessions:
        model.end_session(sid)
    info = model.model_info()
    assert model.status() == "idle"
    assert info.available_seqs == info.n_seq_max, f"{info.n_seq_max - info.available_seqs} seqs still taken"


def test_the_memory_type_is_known(client: Client, family: str) -> None:
    info = client.model.model_info()
    assert info.memory == EXPECTED_KIND[family]
    assert info.memory_reuse


def test_chat_follow_up_regenerate_edit_and_branch_in_a_session(client: Client) -> None:
    q1 = "Tell me about the history of Lyon and its bridges over the Rhône."
    q2 = "And what about its food?"
    r1, stats = client.turn([user(q1)], session_id="s")
    assert stats.reuse.source == "none"
    history = [user(q1), assistant(r1)]
    r2, _ = client.turn([*history, user(q2)], session_id="s")  # follow-up
    client.turn([*history, user(q2)], session_id="s")  # regenerate
    client.turn([*history, user("And its wine?")], session_id="s")  # edit of the last message
    _, stats = client.turn([user("Tell me about the history of Paris instead.")], session_id="s")  # edit of the first
    assert stats.reuse.tokens_reused > 0  # the system prompt, at least
    # a branch from turn 2: the conversation as it was, with another third question
    client.turn([*history, user(q2), assistant(r2), user("Which museum first?")], session_id="s")
    _no_seq_left(client, ("s",))


def test_regenerate_and_edit_without_a_session(client: Client) -> None:
    q1 = "Which three rivers flow through Lyon, and where do they meet?"
    r1, _ = client.turn([user(q1)])
    _, stats = client.turn([user(q1)])  # regenerate: the same prompt, a new request
    assert stats.reuse.tokens_reused == len(client.render([user(q1)])) - 1
    history = [user(q1), assistant(r1)]
    client.turn([*history, user("How long is the Saône?")])  # follow-up re-sent whole
    client.turn([*history, user("How long is the Rhône?")])  # edit of that message
    _no_seq_left(client)


def test_the_next_turn_after_a_restart(client: Client, tmp_path: Path, model_path: Path) -> None:
    q1 = "How do I reverse a list in Python?"
    r1, _ = client.turn([user(q1)], session_id="x")
    client.engine.close()
    client.engine = Engine(tmp_path / "data")
    client.engine.load_model("m", config(model_path, n_seq_max=4))
    _, stats = client.turn([user(q1), assistant(r1), user("And a string?")], session_id="x")
    assert stats.reuse.source == "cache"
    client.turn([user(q1)])  # a regenerate of the first turn, after the restart
    _no_seq_left(client, ("x",))


def test_four_chats_that_start_together(client: Client) -> None:
    prompts = [client.render([user(f"Question {i}: what is {i} plus {i}, and why?")]) for i in range(4)]
    results: dict[int, object] = {}

    def chat(i: int) -> None:
        try:
            results[i] = run(client.model, prompts[i])
        except Exception as exc:  # reported below, with the others
            results[i] = exc

    threads = [threading.Thread(target=chat, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for i in range(4):
        got = results.get(i)
        assert not isinstance(got, BaseException) and got is not None, f"chat {i}: {got!r}"
        ids, stats, _ = got  # type: ignore[misc]
        assert ids == client.cold(prompts[i]), f"chat {i} differs from a cold run"
    _no_seq_left(client)


def test_a_chat_sent_while_another_streams(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its prompt ends beside the other chat's decode row, so it is read first, in a decode of
    its own (``Scheduler._read_first``), and its first token joins the other's row."""
    split: list[int] = []
    read_first = Scheduler._read_first

    def spy(self: Scheduler, *parts: Any) -> Any:
        split.append(1)
        return read_first(self, *parts)

    monkeypatch.setattr(Scheduler, "_read_first", spy)
    story = client.render([user("Tell me a long story about a lighthouse keeper and the sea.")])
    question = client.render([user("What is two plus two?")])
    other = client.model.infer(story, response_tokens=400, ignore_eos=True)
    events = iter(other)
    while not isinstance(next(events), TokenId):  # until the other chat decodes
        pass
    ids, _, _ = run(client.model, question)
    other.result()
    assert split, "the question's prompt was not read first"
    assert ids == client.cold(question)
    _no_seq_left(client)


def test_a_miss_says_why(client: Client, family: str) -> None:
    client.turn([user("Tell me about lighthouses and the people who kept them.")])
    _, stats = client.turn([user("Tell me about windmills.")])
    # "live": the shared head from the cells the first turn left in its free seq (a state
    # that can be cut; SeqPool.leave), where the cache would otherwise have served it.
    assert stats.reuse.source in ("cache", "live", "none")
    if stats.reuse.source == "none":
        assert stats.reuse.miss_reason == ("too_short" if family == "llama" else "no_checkpoint")
