"""A model's turns without Qt (``app.conversation.turns``), on the fake engine's byte-level
template and tokenizer: the sticky session's suffix, type-ahead's reads, and the message sent
as it was last read."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.conversation.requests import GenerationRequest, ReadAheadRequest
from app.conversation.state import SessionState
from app.conversation.turns import Turns
from app.conversation.window import Turn
from tests.helpers.fake_engine import FakeEngine

CONFIG = SimpleNamespace(path="/x/fake.gguf", n_ctx=4096, n_seq_max=4)


@pytest.fixture
def model(tmp_path):
    engine = FakeEngine(tmp_path)
    yield engine.load_model("fake", CONFIG)
    engine.close()


def _tokens(text: str) -> list[int]:
    return list(text.encode())


def _stats(committed: int, finish: str = "stop") -> SimpleNamespace:
    return SimpleNamespace(finish_reason=finish, stop_sequence=None, committed_tokens=committed)


def _remember(turns: Turns, sid: str, prompt: str, reply: list[int]) -> SessionState:
    held = turns.remember(sid, _tokens(prompt), reply, _stats(len(prompt.encode()) + len(reply)))
    assert held is not None
    return held


def _ask(request: GenerationRequest, draft: str, generation: int, turns: Turns, **kw) -> ReadAheadRequest:
    turns.note_read(request.session_id, generation)  # as ``EngineBridge.read_ahead`` does
    return ReadAheadRequest(request, draft, generation, **kw)


def test_a_follow_up_turn_sends_only_its_suffix_on_the_session_it_holds(model):
    turns = Turns(model, "fake", 4096)
    first = GenerationRequest("r1", "c", (Turn("u1", "user", "hi"),), "")
    plan = turns.plan_send(first)
    assert plan.prompt == _tokens("<|user|>hi<|end|>\n<|assistant|>") and plan.suffix is None
    _remember(turns, "c", "<|user|>hi<|end|>\n<|assistant|>", _tokens("hello<|end|>\n"))
    second = GenerationRequest("r2", "c", (*first.messages, Turn("a1", "assistant", "hello"), Turn("u2", "user", "more")), "")
    plan = turns.plan_send(second)
    assert plan.suffix == _tokens("<|user|>more<|end|>\n<|assistant|>")
    assert plan.prompt == _tokens("<|user|>hi<|end|>\n<|assistant|>hello<|end|>\n<|user|>more<|end|>\n<|assistant|>")
    # Sent once: the next turn without a new reply remembered is sent whole.
    assert turns.plan_send(second).suffix is None


def test_a_reply_whose_count_disagrees_is_not_remembered(model):
    turns = Turns(model, "fake", 4096)
    assert turns.remember("c", [1, 2], [3], _stats(2)) is None
    assert turns.remember(None, [1, 2], [3], _stats(3)) is None
    assert turns.remember("c", [1, 2], [3], _stats(3)) == SessionState("fake", (1, 2), (3,), True)


def test_the_suffix_aligns_by_text_when_tokens_differ(model):
    """The reply "hi" was sampled as one token (0x6869) but renders as two bytes; the last
    sampled token (EOG, 0) closes the turn and appears in the new prompt too."""
    model.detokenize = lambda ids: "".join("hi" if t == 0x6869 else "" if t == 0 else chr(t) for t in ids)
    model.apply_chat_template = lambda request: [
        t for m in request["messages"] for t in (_tokens(f"<{m['role'][0]}>{m['content']}") + [0])
    ][:-1]
    turns = Turns(model, "fake", 4096)
    asked = _tokens("<u>q") + [0] + _tokens("<a>")
    turns.remember("c", asked, (0x6869, 0), _stats(len(asked) + 2))
    history = (Turn("u1", "user", "q"), Turn("a1", "assistant", "hi"), Turn("u2", "user", "next"))
    assert turns.plan_send(GenerationRequest("r", "c", history, "")).suffix == _tokens("<u>next")
    # Another reply text in the history: no safe suffix, the whole prompt is sent.
    turns.remember("c", asked, (0x6869, 0), _stats(len(asked) + 2))
    other = (Turn("u1", "user", "q"), Turn("a1", "assistant", "ho"), Turn("u2", "user", "next"))
    assert turns.plan_send(GenerationRequest("r", "c", other, "")).suffix is None


def test_a_session_held_by_another_model_or_ended_gives_no_suffix(model):
    turns = Turns(model, "fake", 4096)
    history = (Turn("u1", "user", "hi"), Turn("a1", "assistant", "hello"), Turn("u2", "user", "more"))
    stored = SessionState("other", tuple(_tokens("<|user|>hi<|end|>\n<|assistant|>")), tuple(_tokens("hello<|end|>\n")), True)
    plan = turns.plan_send(GenerationRequest("r", "c", history, "", session=stored))
    assert plan.suffix is None and plan.prompt == _tokens(
        "<|user|>hi<|end|>\n<|assistant|>hello<|end|>\n<|user|>more<|end|>\n<|assistant|>"
    )
    _remember(turns, "c", "<|user|>hi<|end|>\n<|assistant|>", _tokens("hello<|end|>\n"))
    turns.end_session("c")
    assert turns.plan_send(GenerationRequest("r", "c", history, "")).suffix is None


def test_reads_queued_behind_a_newer_draft_or_the_message_are_dropped_unread(model):
    """The GUI notes each ask (and the message, -1) before it is queued: only the newest draft
    is rendered and read, and nothing once the message is sent (B11's paste turn had its
    message wait behind queued reads)."""
    turns = Turns(model, "fake", 4096)
    request = GenerationRequest("", "c", (), "")
    turns.note_read("c", 2)
    assert turns.plan_read(ReadAheadRequest(request, "an older draft ", 1)) is None  # gen 2 asked since
    turns.note_read("c", -1)  # ... and the message sent (EngineBridge.submit)
    assert turns.plan_read(ReadAheadRequest(request, "the newest draft ", 2)) is None
    plan = turns.plan_read(_ask(request, "the next draft ", 3, turns))  # a word just ended: no margin
    assert plan is not None and list(plan.tokens) == _tokens("<|user|>the next draft")
    assert plan.draft_start == len(_tokens("<|user|>"))
    plan = turns.plan_read(_ask(request, "the next draft is typ", 4, turns))  # inside a word: 2 left out
    assert plan is not None and len(plan.tokens) == len(_tokens("<|user|>the next draft is typ")) - 2


def test_a_whole_read_takes_the_word_being_typed_only_where_the_memory_drops_a_tail(model):
    request = GenerationRequest("", "c", (), "")
    trims = Turns(model, "fake", 4096, trims=True)
    plan = trims.plan_read(_ask(request, "the next draft is typ", 1, trims, whole=True))
    assert plan is not None and list(plan.tokens) == _tokens("<|user|>the next draft is typ")  # not "<|end|>"
    recurrent = Turns(model, "fake", 4096, trims=False)
    plan = recurrent.plan_read(_ask(request, "the next draft is typ", 1, recurrent, whole=True))
    assert plan is not None and len(plan.tokens) == len(_tokens("<|user|>the next draft is typ")) - 2


def test_a_draft_that_cannot_be_read_says_why(model):
    turns = Turns(model, "fake", 4096)
    request = GenerationRequest("", "c", (), "")
    assert turns.plan_read(_ask(request, "   ", 1, turns)) == turns.plan_read(_ask(request, "", 2, turns))
    assert turns.plan_read(_ask(request, "", 3, turns)).skipped == "empty"
    small = Turns(model, "fake", 80)  # the draft alone leaves no room for the reply
    assert small.plan_read(_ask(request, "a long draft " * 20, 1, small)).skipped == "too_long"


def test_after_a_read_ahead_the_next_turn_is_sent_whole(model):
    """What the read put in the chat's sequence is past what the session held: the turn goes
    whole (``infer`` finds the common prefix), never as a suffix."""
    turns = Turns(model, "fake", 4096)
    history = (Turn("u1", "user", "hi"), Turn("a1", "assistant", "hello"))
    _remember(turns, "c", "<|user|>hi<|end|>\n<|assistant|>", _tokens("hello<|end|>\n"))
    assert turns.plan_read(_ask(GenerationRequest("", "c", history, ""), "and then? ", 1, turns)).tokens
    plan = turns.plan_send(GenerationRequest("r", "c", (*history, Turn("u2", "user", "and then?")), ""))
    assert plan.suffix is None
    assert plan.prompt == _tokens("<|user|>hi<|end|>\n<|assistant|>hello<|end|>\n<|user|>and then?<|end|>\n<|assistant|>")


def test_the_message_as_last_read_is_not_rendered_again(model):
    """Enter with the draft type-ahead read last: the request's plan and prompt are the read's
    (no template rendered, nothing tokenized on the way to the engine); another message is
    rendered as usual. Either way the prompt is the message's whole prompt."""
    turns = Turns(model, "fake", 4096, trims=True)
    renders: list[object] = []
    render = model.apply_chat_template
    model.apply_chat_template = lambda request: renders.append(request) or render(request)
    history = (Turn("u1", "user", "hi"), Turn("a1", "assistant", "hello"))
    turns.plan_read(_ask(GenerationRequest("", "c", history, "be brief"), "and then?", 1, turns, whole=True))
    assert renders
    renders.clear()
    plan = turns.plan_send(GenerationRequest("r1", "c", (*history, Turn("u2", "user", "and then?")), "be brief"))
    assert renders == []
    assert plan.prompt == _tokens(
        "<|system|>be brief<|end|>\n<|user|>hi<|end|>\n<|assistant|>hello<|end|>\n<|user|>and then?<|end|>\n<|assistant|>"
    )
    assert plan.report.kind == "fits" and plan.report.num_tokens == len(plan.prompt)
    turns.plan_read(_ask(GenerationRequest("", "c2", (), ""), "a draft", 1, turns, whole=True))
    renders.clear()
    plan = turns.plan_send(GenerationRequest("r2", "c2", (Turn("u3", "user", "a draft, edited"),), ""))
    assert renders
    assert plan.prompt == _tokens("<|user|>a draft, edited<|end|>\n<|assistant|>")


def test_a_view_that_cannot_be_sent_has_no_prompt_and_a_report(model):
    turns = Turns(model, "fake", 80)
    plan = turns.plan_send(GenerationRequest("r", "c", (Turn("u1", "user", "a long message " * 20),), ""))
    assert plan.prompt == [] and plan.report.kind == "too_long" and plan.report.n_ctx == 80


def test_a_summary_prompt_ends_with_its_opening_and_is_not_sampled(model):
    from app.conversation.requests import SummaryRequest
    from app.conversation.window import SUMMARY_OPENING

    turns = Turns(model, "fake", 4096)
    prompt, params = turns.summary(SummaryRequest("s", (Turn("u1", "user", "hi"),), "", (("temperature", 0.8),)))
    assert bytes(prompt).decode().endswith(SUMMARY_OPENING)
    assert params["temperature"] == 0.0 and params["response_tokens"] > 0
