"""A client that hangs up mid-stream frees its sequence; a re-sent conversation is reused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.server.conftest import Served, start_server, wait_until

SYSTEM = ("You are Hearth's test assistant. You answer questions about cooking, gardening and "
          "the weather, briefly and politely, and you never make up facts you do not know.")


def _busy_slots(served: Served) -> list[dict[str, Any]]:
    status = served.get("/hearth/status")
    return [s for m in status["models"] for s in m["slots"] if s["state"] != "free"]


def test_client_disconnect_mid_stream_frees_the_sequence(served: Served) -> None:
    client = served.client()
    stream = client.chat.completions.create(
        model=served.model_id, temperature=0, max_tokens=900, stream=True,
        messages=[{"role": "user", "content": "Tell me a very long story."}],
    )
    received = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received += 1
        if received == 3:
            break
    assert _busy_slots(served), "the request should still be generating"
    stream.close()  # hang up

    wait_until(lambda: not _busy_slots(served) and not served.get("/hearth/status")["requests"])
    record = served.get("/hearth/status")["recent"][-1]
    assert record["state"] == "cancelled"
    assert 3 <= record["completion_tokens"] < 900
    # The server is still fine afterwards.
    after = client.chat.completions.create(model=served.model_id, messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=2)
    assert after.choices[0].message.content is not None


def test_second_turn_reports_the_conversation_as_cached(served: Served) -> None:
    """Issue #16 acceptance: turn 2 re-sends turn 1 (prompt + reply) and reports at least
    that many tokens, less one, as cached. Depends on #13 (read-your-writes and the longest
    common prefix with anything the engine holds)."""
    client = served.client()
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "How do I grow basil indoors?"}]
    first = client.chat.completions.create(model=served.model_id, messages=messages, temperature=0, max_tokens=24)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "And how often should I water it?"}]
    second = client.chat.completions.create(model=served.model_id, messages=messages, temperature=0, max_tokens=8)
    assert first.usage is not None and second.usage is not None
    held = first.usage.prompt_tokens + first.usage.completion_tokens
    cached = second.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    assert cached >= held - 1, f"cached {cached} of the {held} tokens turn 1 left in the engine"


def test_after_a_restart_the_conversation_resumes_from_the_disk_cache(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """The server stops (saving its KV to disk) and starts again; the client re-sends the
    conversation and gets it from the cache — reply tokens included, although a fresh
    tokenization of the reply's text gives other ids than the ones the model sampled."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "How do I grow basil indoors?"}]
    served = start_server(tiny_model_path, tmp_path, "--ctx", "1024")
    try:
        first = served.client().chat.completions.create(model=served.model_id, messages=messages, temperature=0,
                                                        max_tokens=24)
    finally:
        served.stop()
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "And how often should I water it?"}]
    again = start_server(tiny_model_path, tmp_path, "--ctx", "1024")
    try:
        second = again.client().chat.completions.create(model=again.model_id, messages=messages, temperature=0,
                                                        max_tokens=8)
    finally:
        again.stop()
    assert first.usage is not None and second.usage is not None
    held = first.usage.prompt_tokens + first.usage.completion_tokens
    cached = second.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    assert cached >= held - 1, f"cached {cached} of the {held} tokens saved before the restart"
