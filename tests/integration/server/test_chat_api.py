"""Chat, text completions and embeddings through the official ``openai`` client against a
real ``hearth serve`` subprocess on the tiny model (random weights: replies are gibberish,
so correctness is checked by equality between paths that must agree)."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path

import numpy as np
import openai
import pytest

from tests.integration.server.conftest import Served, start_server

SYSTEM = "You are a terse assistant."


def ask(served: Served, content: str, **kw: object) -> openai.types.chat.ChatCompletion:
    messages = kw.pop("messages", [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}])
    return served.client().chat.completions.create(
        model=served.model_id, messages=messages, temperature=kw.pop("temperature", 0),  # type: ignore[arg-type]
        max_tokens=kw.pop("max_tokens", 12), **kw,  # type: ignore[arg-type]
    )


def stream_text(served: Served, content: str, max_tokens: int = 12, **kw: object) -> tuple[str, list[object]]:
    chunks = list(served.client().chat.completions.create(
        model=served.model_id, temperature=0, max_tokens=max_tokens, stream=True,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}], **kw,  # type: ignore[arg-type]
    ))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def test_models_lists_the_loaded_model(served: Served) -> None:
    models = served.client().models.list().data
    assert [m.id for m in models] == [served.model_id]
    assert served.client().models.retrieve(served.model_id).id == served.model_id


def test_chat_non_streaming_reply_and_usage(served: Served) -> None:
    reply = ask(served, "Name a colour.", max_tokens=8)
    choice = reply.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage is not None
    assert reply.usage.completion_tokens <= 8
    assert reply.usage.prompt_tokens > 10
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.id.startswith("chatcmpl-")


def test_streaming_equals_non_streaming_and_reports_usage(served: Served) -> None:
    whole = ask(served, "Count to three.", max_tokens=16)
    text, chunks = stream_text(served, "Count to three.", max_tokens=16, stream_options={"include_usage": True})
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"  # type: ignore[attr-defined]
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]  # type: ignore[attr-defined]
    assert reasons[-1] == whole.choices[0].finish_reason and reasons.count(None) == len(reasons) - 1
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None  # type: ignore[attr-defined]
    assert last.usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[attr-defined,union-attr]


def test_stop_sequence_and_max_completion_tokens(served: Served) -> None:
    full = ask(served, "Say something long.", max_tokens=24).choices[0].message.content or ""
    words = full.split()
    assert len(words) >= 3, full
    stop = words[2]
    cut = served.client().chat.completions.create(
        model=served.model_id, temperature=0, max_completion_tokens=24, stop=[stop],
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say something long."}],
    ).choices[0]
    assert cut.finish_reason == "stop"
    assert cut.message.content == full[: full.index(stop)]


def test_seeded_sampling_repeats(served: Served) -> None:
    a = ask(served, "Pick a word.", temperature=1.0, top_p=0.9, seed=1234).choices[0].message.content
    b = ask(served, "Pick a word.", temperature=1.0, top_p=0.9, seed=1234).choices[0].message.content
    assert a == b


def _eight_concurrent_streams(served: Served) -> tuple[list[str], list[str]]:
    """Solo replies first, then the same eight prompts as eight simultaneous streams."""
    prompts = [f"Question number {i}: what is {i} plus {i}?" for i in range(8)]
    expected = [ask(served, p, max_tokens=20).choices[0].message.content or "" for p in prompts]
    assert len(set(expected)) > 1  # the prompts really differ in what they produce
    got: dict[int, str] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def client(i: int) -> None:
        try:
            barrier.wait(30)
            got[i] = stream_text(served, prompts[i], max_tokens=20)[0]
        except BaseException as exc:  # noqa: BLE001 — reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    return [got[i] for i in range(8)], expected


def test_eight_concurrent_clients_one_sequence_each_get_their_own_stream(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """Eight HTTP streams at once, served one after another (``--parallel 1``): the server
    must route every event to its own client; the engine's numerics play no part."""
    served = start_server(tiny_model_path, tmp_path, "--ctx", "1024", "--parallel", "1")
    try:
        got, expected = _eight_concurrent_streams(served)
        assert got == expected
    finally:
        served.stop()


def test_eight_concurrent_clients_batched_equal_their_solo_replies(served: Served) -> None:
    """Eight streams decoded together (four seqs, four waiting) equal their solo replies:
    needs one KV stream per sequence (#12); the unified layout made this flaky."""
    got, expected = _eight_concurrent_streams(served)
    assert got == expected


def test_text_completions(served: Served) -> None:
    client = served.client()
    one = client.completions.create(model=served.model_id, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert one.object == "text_completion"
    assert one.choices[0].text and one.usage is not None and one.usage.completion_tokens <= 6
    streamed = client.completions.create(model=served.model_id, prompt="The capital of France is", max_tokens=6,
                                         temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == one.choices[0].text


def test_embeddings_float_and_base64_agree(served: Served) -> None:
    client = served.client()
    floats = client.embeddings.create(model=served.model_id, input=["hello world", "goodbye", "hello world"],
                                      encoding_format="float")
    vectors = [d.embedding for d in floats.data]
    assert [d.index for d in floats.data] == [0, 1, 2]
    assert len(vectors[0]) == 64  # the tiny model's n_embd
    assert vectors[0] == vectors[2] and vectors[0] != vectors[1]
    assert floats.usage.prompt_tokens > 3
    raw = client.with_raw_response.embeddings.create(model=served.model_id, input="hello world",
                                                     encoding_format="base64")
    b64 = json.loads(raw.text)["data"][0]["embedding"]
    decoded = np.frombuffer(base64.b64decode(b64), dtype=np.float32)
    assert np.allclose(decoded, np.asarray(vectors[0], dtype=np.float32))


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
    [{"role": "developer", "content": SYSTEM}, {"role": "user", "content": "Hi there"}],
])
def test_content_parts_and_developer_role(served: Served, messages: list[dict[str, object]]) -> None:
    reply = ask(served, "", messages=messages, max_tokens=4)
    assert reply.choices[0].message.content


def test_grammar_extension_holds_the_reply_and_a_bad_one_is_a_named_400(served: Served) -> None:
    reply = ask(served, "Say yes or no.", max_tokens=40, extra_body={"grammar": 'root ::= ("yes" | "no") "."'})
    assert reply.choices[0].message.content in ("yes.", "no.")
    assert reply.choices[0].finish_reason == "stop"
    text = served.client().completions.create(model=served.model_id, prompt="Answer:", max_tokens=8, temperature=0,
                                              extra_body={"grammar": 'root ::= [0-9] [0-9]'})
    assert len(text.choices[0].text) == 2 and text.choices[0].text.isdigit()
    with pytest.raises(openai.BadRequestError) as err:
        ask(served, "x", extra_body={"grammar": "root ::= ("})
    assert err.value.body["code"] == "invalid_grammar"  # type: ignore[index]
