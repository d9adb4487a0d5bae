"""The views of a conversation rendered with the tiny model's real template and tokenizer."""

from __future__ import annotations

import pytest

from app.conversation.prompt import PromptBuilder
from app.conversation.window import Budget, OverflowPolicy, Turn, WindowState
from app.engine import Engine, ModelConfig
from app.engine.errors import InvalidRequest

SYSTEM = "You are a careful assistant. Answer in one short sentence."


@pytest.fixture(scope="module")
def model(tiny_model_path, tmp_path_factory):
    engine = Engine(tmp_path_factory.mktemp("engine"))
    m = engine.load_model("tiny", ModelConfig(path=str(tiny_model_path), n_ctx=512, n_seq_max=1, n_batch=64))
    yield m
    engine.close()


def turns(n: int) -> list[Turn]:
    out = []
    for i in range(n):
        out.append(Turn(f"u{i}", "user", f"question number {i} about the harbour and its boats"))
        out.append(Turn(f"a{i}", "assistant", f"answer number {i}: the boats come in at dawn"))
    return out


def test_a_view_is_exactly_the_template_rendering_of_its_messages(model):
    history = [*turns(3), Turn("u3", "user", "and now?")]
    builder = PromptBuilder(model, SYSTEM, history)
    expected = model.apply_chat_template(
        {"messages": [{"role": t.role, "content": t.content} for t in history[2:]], "system": SYSTEM}
    )
    assert builder.tokens(2, "") == expected
    assert builder.count(2, "") == len(expected)


def test_a_cut_view_starts_with_the_same_system_prompt_tokens(model):
    history = [*turns(16), Turn("u16", "user", "one more question")]
    builder = PromptBuilder(model, SYSTEM, history)
    budget = Budget.for_reply(512, 32)
    assert builder.count(0, "") > budget.limit
    plan = builder.plan(WindowState(), budget, OverflowPolicy.DROP_OLDEST)
    assert plan.kind == "cut" and history[plan.start].role == "user"
    assert plan.num_tokens <= budget.target
    full, cut = builder.tokens(0, ""), builder.tokens(plan.start, "")
    system_only = model.apply_chat_template({"messages": [], "system": SYSTEM})
    # The head that may come from the cache: the system prompt's tokens are identical.
    head = next(k for k in range(len(system_only)) if SYSTEM in model.detokenize(system_only[:k]))
    assert cut[:head] == full[:head] == system_only[:head]
    assert cut[head:] != full[head:]


def test_a_summary_follows_the_system_prompt_and_a_refusing_template_gets_it_merged(model):
    history = [*turns(2), Turn("u2", "user", "go on")]
    builder = PromptBuilder(model, SYSTEM, history)
    with_summary = builder.tokens(2, "they talked about boats")
    text = model.detokenize(with_summary)
    assert text.index(SYSTEM) < text.index("they talked about boats") < text.index("go on")

    class OneSystemMessage:
        """The tiny model behind a template that, like many, takes one system message, first."""

        def apply_chat_template(self, request):
            if any(m["role"] == "system" for m in request["messages"]):
                raise InvalidRequest("chat template failed: system message must come first")
            return model.apply_chat_template(request)

        def tokenize(self, text):
            return model.tokenize(text)

    strict = PromptBuilder(OneSystemMessage(), SYSTEM, history)
    merged = model.detokenize(strict.tokens(2, "they talked about boats"))
    assert strict.merge_summary
    assert merged.index(SYSTEM) < merged.index("they talked about boats") < merged.index("go on")


def test_continue_renders_up_to_the_user_turn_and_appends_the_reply_tokens(model):
    history = [Turn("u0", "user", "tell me about boats"), Turn("a0", "assistant", "The boats come")]
    builder = PromptBuilder(model, SYSTEM, history, continue_reply=True)
    head = model.apply_chat_template(
        {"messages": [{"role": "user", "content": "tell me about boats"}], "system": SYSTEM}
    )
    ids = builder.tokens(0, "")
    assert ids[: len(head)] == head
    assert model.detokenize(ids[len(head) :]) == "The boats come"
    assert builder.reply_ids("The boats come") == ids[len(head) :]
