"""Type-ahead on real llama.cpp (issue 25): a draft read while it is written, then the ordinary
request on Enter. Every reply must be token for token the reply of a cold solo run of the same
prompt, the read-ahead must count as no request, and no sequence may be left behind — on the
tiny llama (attention) and on the tiny mamba2 (recurrent) and lfm2 (hybrid), whose states
cannot be cut: an edited draft falls back to a checkpoint or a fresh read, never an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.conversation.type_ahead import PROBE, margin_of, probe_of, readable_prefix
from app.engine import Engine
from app.engine.events import Done, Error, Event, PrefillProgress, Stats
from tests.helpers.reuse_client import Client, assistant, config, run, user
from tests.helpers.tiny_families import ensure_tiny_family
from tests.helpers.waiting import wait_until

FAMILIES = ("llama", "mamba2", "lfm2")
QUESTION = "Which bridges cross the Saône in Lyon, and which of them is the oldest one still standing?"
PASTE = " ".join(f"Line {i}: the river carries barges of coal, wine and stone past the quays." for i in range(30))


@pytest.fixture(params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def model_path(family: str, assets_dir: Path, tiny_model_path: Path) -> Path:
    return tiny_model_path if family == "llama" else ensure_tiny_family(family, assets_dir)


@pytest.fixture
def client(tmp_path: Path, family: str, model_path: Path):
    engine = Engine(tmp_path / "data")
    engine.load_model("m", config(model_path, n_seq_max=2))
    c = Client(engine, model_path, tmp_path, whole_states=family != "llama")
    yield c
    c.close()
    c.engine.close()


class Typist:
    """Writes a message into a chat the way the app reads it ahead: after each change, the
    draft's readable prefix goes to ``Model.read_ahead`` on the chat's session."""

    def __init__(self, client: Client, history: list[dict[str, str]], sid: str = "chat") -> None:
        self.client = client
        self.history = history
        self.sid = sid
        self.streams: list[Any] = []
        self.events: list[Event] = []

    def write(self, draft: str, *, wait: bool = True, whole: bool = False) -> list[int]:
        prompt = self.client.render([*self.history, user(draft)])
        if whole:  # the word being typed too (the app asks for it while the engine is idle)
            probed = self.client.render([*self.history, user(probe_of(draft, whole=True))])
            tokens = readable_prefix(prompt, probed, margin_of(draft, whole=True))
            assert len(tokens) <= len(prompt) - self.tail()  # never the end of turn or the header
        else:
            probed = self.client.render([*self.history, user(draft + PROBE)])
            tokens = readable_prefix(prompt, probed)
            assert len(tokens) < len(prompt) - 4  # never the draft's last tokens, its end or the header
        assert tokens and prompt[: len(tokens)] == tokens
        stream = self.client.model.read_ahead(tokens, session_id=self.sid, on_event=self.events.append)
        self.streams.append(stream)
        if wait:
            stream.result(timeout=120)
        return tokens

    def tail(self) -> int:
        """Tokens the template puts after the last user message (end of turn, assistant header)."""
        a = self.client.render([*self.history, user("Zebra")])
        b = self.client.render([*self.history, user("Quokka?")])
        n = 0
        while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
            n += 1
        return n

    def enter(self, draft: str) -> tuple[list[int], Stats]:
        """Send: the ordinary request, the whole prompt tokenized from scratch."""
        prompt = self.client.render([*self.history, user(draft)])
        ids, stats, _ = run(self.client.model, prompt, session_id=self.sid)
        assert ids == self.client.cold(prompt), "the reply differs from the same prompt without type-ahead"
        wait_until(lambda: all(s.done for s in self.streams), timeout=30, what="every read-ahead ended")
        return ids, stats


def no_seq_left(client: Client, *sessions: str) -> None:
    model = client.model
    for sid in sessions:
        model.end_session(sid)
    info = model.model_info()
    assert model.status() == "idle"
    assert info.available_seqs == info.n_seq_max, f"{info.n_seq_max - info.available_seqs} seqs still taken"


def request_counters(engine: Engine) -> dict[str, int]:
    c = engine.counters()
    return {k: v for k, v in c.items() if k.startswith("hits_") or k in ("misses", "prompt_tokens", "prompt_tokens_reused")}


def test_type_delete_edit_and_send(client: Client) -> None:
    r1, _ = client.turn([user("Tell me about Lyon.")], session_id="chat")
    typist = Typist(client, [user("Tell me about Lyon."), assistant(r1)])
    words = QUESTION.split()
    before = request_counters(client.engine)
    for i in range(1, len(words) + 1):  # word by word
        typist.write(" ".join(words[:i]))
    typist.write(" ".join(words[:-4]))  # four words deleted
    edited = QUESTION.replace("bridges", "footbridges")  # an edit in the middle
    read = typist.write(edited)
    assert request_counters(client.engine) == before  # reading ahead is no request
    _, stats = typist.enter(edited)
    assert stats.reuse.source == "session"
    assert stats.reuse.tokens_read_ahead > 0
    assert stats.reuse.tokens_reused >= len(read) - 1
    no_seq_left(client, "chat")


def test_whole_reads_of_a_word_being_typed_leave_only_the_end_of_turn(client: Client) -> None:
    """Read after every character, the word being typed included: its tokens change as it
    grows (each read drops the changed tail; a recurrent state reads again from a checkpoint),
    and Enter reads only what the template puts after the message."""
    r1, _ = client.turn([user("Tell me about Lyon.")], session_id="chat")
    typist = Typist(client, [user("Tell me about Lyon."), assistant(r1)])
    message = "Which bridges cross the Saône, and which is oldest"
    for i in range(1, len(message) + 1):
        if message[i - 1] != " ":
            typist.write(message[:i], whole=True)
    _, stats = typist.enter(message)
    assert stats.reuse.source == "session"
    assert stats.prompt_tokens - stats.reuse.tokens_reused == typist.tail()
    no_seq_left(client, "chat")


def test_a_paste_then_a_question_typed_below_it(client: Client) -> None:
    typist = Typist(client, [])
    pasted = typist.write(PASTE)
    question = PASTE + "\n\nWhat do the barges carry?"
    typist.write(PASTE + "\n\nWhat do the")
    _, stats = typist.enter(question)
    assert stats.reuse.tokens_read_ahead >= len(pasted) - 1
    assert stats.prompt_tokens - stats.reuse.tokens_reused < 24  # the question's end and the header
    no_seq_left(client, "chat")


def test_enter_while_a_read_ahead_chunk_runs(client: Client) -> None:
    typist = Typist(client, [])
    typist.write(PASTE, wait=False)
    # Enter once the first chunk is in: the next one is running (or about to) when it comes
    wait_until(lambda: any(isinstance(e, PrefillProgress) and e.done > 0 for e in typist.events), timeout=60)
    _, stats = typist.enter(PASTE + " Summarise.")
    (end,) = [e for e in typist.events if isinstance(e, Done | Error)]
    assert isinstance(end, Done)  # cancelled or finished: what it read stays, either way
    assert 0 < stats.reuse.tokens_read_ahead == stats.reuse.tokens_reused
    no_seq_left(client, "chat")


def test_undo_back_to_the_sent_history_and_a_cleared_draft(client: Client) -> None:
    r1, _ = client.turn([user("Name a river.")], session_id="chat")
    history = [user("Name a river."), assistant(r1)]
    typist = Typist(client, history)
    typist.write("Something I will undo entirely, word after word")
    typist.write("Something I will")  # undo, undo
    _, stats = typist.enter("Something I will ask instead?")
    assert stats.reuse.tokens_read_ahead > 0
    # an edit of that message: written, cleared, and another one sent in its place
    typist.write("Something I wrote")
    _, stats = typist.enter("Another question altogether?")
    assert stats.reuse.tokens_reused > 0 and stats.reuse.tokens_read_ahead == 0
    no_seq_left(client, "chat")


def test_unloading_the_model_mid_draft(client: Client, model_path: Path) -> None:
    typist = Typist(client, [])
    stream = client.model.read_ahead(client.render([user(PASTE)])[:-8], session_id="chat")
    client.engine.unload("m")
    wait_until(lambda: stream.done, timeout=60, what="the read ended")
    client.engine.load_model("m", config(model_path, n_seq_max=2))
    typist.enter("Hello again")
    no_seq_left(client, "chat")
