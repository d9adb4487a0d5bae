"""What a chat sends a remote model, and how its reply line reads (no server needed)."""

from __future__ import annotations

import socket

from app.conversation.requests import GenerationRequest
from app.conversation.window import SUMMARY_PREFIX, OverflowPolicy, Turn, WindowState
from app.conversation.wording import reply_line
from app.engine.events import Done, Error
from app.remote.client import RemoteClient
from app.remote.endpoint import RemoteEndpoint
from app.storage import ReplyStats, SamplingSettings
from app.ui.chat.params import infer_params
from app.ui.remote.bridge import chat_messages, chat_params, estimate_tokens, plan


def test_the_view_and_its_summary_are_what_is_sent() -> None:
    turns = (Turn("a", "user", "first"), Turn("b", "assistant", "one"), Turn("c", "user", "second"))
    request = GenerationRequest("r", "s", turns, "Be brief.", window=WindowState("c", "they said one"))
    assert chat_messages(request) == [
        {"role": "system", "content": "Be brief.\n\n" + SUMMARY_PREFIX + "they said one"},
        {"role": "user", "content": "second"},
    ]
    assert chat_messages(GenerationRequest("r", "s", turns, ""))[0] == {"role": "user", "content": "first"}


def test_params_are_openai_names_and_extensions_only_when_they_matter() -> None:
    neutral = SamplingSettings(temperature=0.0, top_k=0, min_p=0.0, repetition_penalty=1.0, max_tokens=7)
    assert chat_params(infer_params(neutral)) == {"max_tokens": 7, "temperature": 0.0, "top_p": 0.95}
    full = chat_params(infer_params(SamplingSettings(seed=3, stop_sequences=("END",), json_mode=True)))
    assert full["seed"] == 3 and full["stop"] == ["END"] and full["top_k"] == 40
    assert full["repetition_penalty"] == 1.1 and full["grammar"].startswith("root")


def test_the_reply_line_says_there_is_no_local_cache() -> None:
    stats = ReplyStats(prompt_tokens=60, completion_tokens=5, reuse_source="remote", cache_hit_kind="cold")
    assert "remote · no local cache" in reply_line(stats)
    assert "server reused" not in reply_line(stats)
    told = ReplyStats(prompt_tokens=60, cache_read=47, reuse_source="remote", cache_hit_kind="cold")
    assert "remote · no local cache · the server reused 47 of 60 prompt tokens" in reply_line(told)


def test_nobody_listening_is_a_clear_error_not_a_hang() -> None:
    with socket.socket() as s:  # a free port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    events: list[object] = []
    endpoint = RemoteEndpoint(f"http://127.0.0.1:{port}/v1", "m")
    stream = RemoteClient(endpoint, timeout=30).chat([{"role": "user", "content": "hi"}], {}, events.append)
    stream.join(30)
    assert stream.done.is_set()
    (error,) = events
    assert isinstance(error, Error) and error.code == "remote_unreachable"
    assert "cannot reach" in error.reason and "Retry" in error.reason
    assert not any(isinstance(e, Done) for e in events)


def test_a_long_chat_is_cut_or_summarised_under_its_policy() -> None:
    turns = tuple(Turn(str(i), "user" if i % 2 == 0 else "assistant", f"turn {i} " + "x" * 600) for i in range(11))
    request = GenerationRequest("r", "s", turns, "Be brief.")
    assert estimate_tokens(chat_messages(request)) > 1024
    cut, report = plan(request, 1024, 64)
    assert cut.kind == "cut" and report.kind == "cut" and report.start_id == turns[cut.start].id
    assert estimate_tokens(chat_messages(request, cut.start, "")) <= report.limit
    assert chat_messages(request, cut.start, "")[-1]["content"].startswith("turn 10 ")
    summarise = GenerationRequest("r", "s", turns, "Be brief.", policy=OverflowPolicy.SUMMARISE)
    chosen, report = plan(summarise, 1024, 64)
    assert chosen.kind == "summarise" and report.summarise_ids == tuple(t.id for t in turns[: chosen.start])
    stop = GenerationRequest("r", "s", turns, "Be brief.", policy=OverflowPolicy.STOP)
    assert plan(stop, 1024, 64)[1].kind == "full"
