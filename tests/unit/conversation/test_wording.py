"""The plain words under a reply, from the stats record the app stores."""

from __future__ import annotations

from app.conversation.wording import (
    finish_words,
    prefill_words,
    reply_line,
    reply_tooltip,
    reuse_words,
)
from app.storage import ReplyStats


def test_reuse_from_the_engines_record_names_the_source_and_the_conversation():
    titles = {"other": "Trip to Lyon"}
    own = ReplyStats(prompt_tokens=1015, reuse_source="cache", tokens_reused=1014, origin_session="me")
    assert reuse_words(own, "me", titles.get) == (
        "restored 1,014 of 1,015 prompt tokens of this chat from the cache"
    )
    other = ReplyStats(prompt_tokens=300, reuse_source="live", tokens_reused=120, origin_session="other")
    assert reuse_words(other, "me", titles.get) == "shared 120 of 300 prompt tokens with “Trip to Lyon”"
    held = ReplyStats(prompt_tokens=60, reuse_source="session", tokens_reused=44)
    assert reuse_words(held) == "reused 44 of 60 prompt tokens still held for this chat"
    miss = ReplyStats(prompt_tokens=80, reuse_source="none", miss_reason="evicted")
    assert reuse_words(miss) == "read all 80 prompt tokens: its saved copy had been removed to make room"


def test_without_the_record_the_hit_kind_is_put_in_words():
    sticky = ReplyStats(prompt_tokens=60, cache_hit_kind="continuation", cache_read=44)
    assert reuse_words(sticky) == "reused 44 of 60 prompt tokens still held for this chat"
    partial = ReplyStats(prompt_tokens=60, cache_hit_kind="partial", cache_read=50)
    assert reuse_words(partial) == "restored 50 of 60 prompt tokens from the cache"
    assert reuse_words(ReplyStats(prompt_tokens=9, cache_hit_kind="cold")) == "read all 9 prompt tokens"


def test_how_a_reply_ended():
    assert finish_words(ReplyStats(finish_reason="length", context_full=True)) == "cut: the context is full"
    assert finish_words(ReplyStats(finish_reason="length")) == "reached the reply length limit"
    assert finish_words(ReplyStats(finish_reason="cancelled")) == "stopped"
    assert finish_words(ReplyStats(finish_reason="stop")) == ""
    line = reply_line(ReplyStats(tokens_per_s=12.34, ttft_ms=250, prompt_tokens=9, cache_hit_kind="cold"))
    assert line == "12.3 tok/s  ·  first token 250 ms  ·  read all 9 prompt tokens"
    cut = ReplyStats(tokens_per_s=12.34, ttft_ms=250, prompt_tokens=9, cache_hit_kind="cold",
                     finish_reason="length", context_full=True)
    assert reply_line(cut).startswith("cut: the context is full  ·  12.3 tok/s")  # reason first


def test_prefill_progress_with_an_estimate():
    assert prefill_words(1024, 3814, 100.0) == "Reading the prompt… 1,024 / 3,814 tokens · about 28 s left"
    assert prefill_words(3814, 3814, 100.0) == "Reading the prompt… 3,814 / 3,814 tokens"
    assert prefill_words(0, 500, None) == "Reading the prompt… 0 / 500 tokens"


def test_what_was_read_ahead_while_the_message_was_written():
    paste = ReplyStats(prompt_tokens=1492, reuse_source="session", tokens_reused=1480, tokens_read_ahead=1480)
    assert reuse_words(paste) == "read ahead while you typed: 1,480 of 1,492 prompt tokens"
    follow_up = ReplyStats(prompt_tokens=870, reuse_source="session", tokens_reused=860, tokens_read_ahead=60)
    assert reuse_words(follow_up) == (
        "read ahead while you typed: 60 of 870 prompt tokens, 800 more still held for this chat"
    )
    assert "Type-ahead read 60" in reply_tooltip(follow_up)


def test_speculative_decoding_is_in_the_line_only_when_it_drafted():
    plain = ReplyStats(tokens_per_s=40.0, ttft_ms=90, prompt_tokens=9, cache_hit_kind="cold")
    assert "drafted" not in reply_line(plain)
    drafted = ReplyStats(tokens_per_s=61.0, ttft_ms=90, prompt_tokens=9, cache_hit_kind="cold",
                         drafted_tokens=1212, accepted_tokens=951)
    assert reply_line(drafted) == (
        "61.0 tok/s  ·  first token 90 ms  ·  read all 9 prompt tokens  ·  drafted 1,212, accepted 951"
    )
    assert "1,212 tokens drafted from the conversation, 951 of them accepted" in reply_tooltip(drafted)
