"""Property-based, on real llama.cpp (the tiny llama): whatever a user types, deletes, edits,
pastes and sends while type-ahead reads the draft (issue 25) — with reads that overlap one
another and the Enter, and another chat streaming in the same batch — the reply on Enter and
its regenerate are token for token the reply of a cold solo run of the same prompt.

This is the flow in which a tiny-model B11 run once saw a regenerate of a paste turn differ
from the reply it regenerated: every example here ends with both compared to a cold run.
Hypothesis draws the edits; the draft's readable prefix is sent after each one exactly as the
composer does (``readable_prefix`` with the probe), waited for or not, and drawn to be a whole
read or not (the word being typed read too, as the app does while the engine is idle — a word
typed in part then grows, and its tokens change).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.conversation.type_ahead import PROBE, probe_of, readable_prefix
from app.engine import Engine
from tests.helpers.reuse_client import Client, assistant, config, run, user
from tests.helpers.waiting import wait_until

EXAMPLES = int(os.environ.get("HEARTH_PROPERTY_EXAMPLES", "30")) // 3 or 1
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, database=None,
    derandomize=not os.environ.get("HEARTH_PROPERTY_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip
WORDS = ["bridge", "Saône", "river,", "barges", "coal", "the", "oldest", "quay.", "why", "1842", "stone?"]
LINE = "Line {i}: the river carries barges of coal, wine and stone past the quays."

word = st.sampled_from(WORDS)
flags = st.tuples(st.booleans(), st.booleans())  # (wait for the read, a whole read)
edit = st.one_of(
    st.tuples(st.just("type"), st.lists(word, min_size=1, max_size=5), st.integers(0, 0), flags),
    st.tuples(st.just("part"), st.lists(word, min_size=1, max_size=1), st.integers(1, 5), flags),  # a word's start
    st.tuples(st.just("grow"), st.lists(word, min_size=1, max_size=1), st.integers(1, 4), flags),  # letters more
    st.tuples(st.just("delete"), st.just([]), st.integers(1, 30), flags),  # backspace n chars
    st.tuples(st.just("edit"), st.lists(word, min_size=1, max_size=1), st.integers(0, 200), flags),
    st.tuples(st.just("paste"), st.just([]), st.integers(3, 12), flags),  # n lines of text
)


def apply(draft: str, op: tuple[str, list[str], int, tuple[bool, bool]]) -> str:
    kind, words, n, _flags = op
    if kind == "type":
        return (draft + " " + " ".join(words)).lstrip()
    if kind == "part":
        return (draft + " " + words[0][:n]).lstrip()
    if kind == "grow":  # the word being typed goes on (letters of another word, no space)
        return draft + words[0][:n]
    if kind == "delete":
        return draft[:-n] if n < len(draft) else ""
    if kind == "edit":  # a word put in the middle
        at = min(n, len(draft))
        return draft[:at] + words[0] + " " + draft[at:]
    if len(draft) > 1500:  # the prompt stays well inside the context (the cold run's too)
        return draft
    return (draft + "\n" + "\n".join(LINE.format(i=i) for i in range(n))).lstrip()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: Path):
    tmp = tmp_path_factory.mktemp("typing")
    engine = Engine(tmp / "data")
    engine.load_model("m", config(tiny_model_path, n_seq_max=2))
    c = Client(engine, tiny_model_path, tmp)
    yield c
    c.close()
    engine.close()


@SETTINGS
@given(
    history=st.integers(0, 2),
    edits=st.lists(edit, min_size=1, max_size=8),
    last=st.lists(word, min_size=1, max_size=3),
    streaming=st.booleans(),
)
def test_whatever_is_typed_the_reply_and_its_regenerate_equal_a_cold_run(
    client: Client, history: int, edits: list[Any], last: list[str], streaming: bool
) -> None:
    model = client.model
    sid = "typed"
    messages: list[dict[str, str]] = []
    for i in range(history):  # earlier turns of the chat, answered on its session
        messages.append(user(f"Question {i}: which {WORDS[i]} is it?"))
        ids, _, text = run(model, client.render(messages), session_id=sid)
        messages.append(assistant(text))
    other = model.infer(client.render([user(LINE.format(i=99))]), response_tokens=48) if streaming else None
    reads: list[Any] = []
    draft = ""
    for op in edits:
        draft = apply(draft, op)
        if not draft.strip():
            continue
        wait, whole = op[3]
        prompt = client.render([*messages, user(draft)])
        if whole:
            tokens = readable_prefix(prompt, client.render([*messages, user(probe_of(draft, whole=True))]), 0)
        else:
            tokens = readable_prefix(prompt, client.render([*messages, user(draft + PROBE)]))
        if not tokens:
            continue
        reads.append(model.read_ahead(tokens, session_id=sid))
        if wait:
            reads[-1].result(timeout=120)
    draft = (draft + " " + " ".join(last)).strip()  # typed after the last read, then Enter
    prompt = client.render([*messages, user(draft)])
    sent, _, _ = run(model, prompt, session_id=sid)
    again, stats, _ = run(model, prompt, session_id=sid)  # regenerate
    cold = client.cold(prompt)
    assert sent == cold, "the reply on Enter differs from a cold run of its prompt"
    assert again == cold, f"its regenerate differs from a cold run ({stats.reuse})"
    wait_until(lambda: all(r.done for r in reads), timeout=60, what="every read-ahead ended")
    if other is not None:
        other.result(timeout=120)  # raises if the streaming chat failed
    model.end_session(sid)
    wait_until(lambda: model.status() == "idle", timeout=30, what="the engine idle")
    info = model.model_info()
    assert info.available_seqs == info.n_seq_max, "a sequence was left taken"
    for r in reads:
        r.result(timeout=1)  # each read ended, finished or cancelled, never failed
