"""What a reply's numbers mean, in plain words: the line under each reply and its tooltip,
and the progress text while a prompt is read. No Qt here, so it is tested without widgets.
"""

from __future__ import annotations

from collections.abc import Callable

from app.conversation.accounting import request_words, source_of
from app.storage import ReplyStats

TitleOf = Callable[[str], str | None]
"""Conversation id → its title (None when unknown)."""

MISS_WORDS = {
    "nothing_shared": "nothing saved started the same way",
    "evicted": "its saved copy had been removed to make room",
    "other_identity": "what was saved is for another model, adapter set or context setting",
    "corrupt": "its saved copy was damaged, so it was not used",
    "too_short": "the shared start was too short to be worth loading",
    "no_checkpoint": (
        "this model's memory cannot be cut back, and no checkpoint was saved before the point "
        "where this prompt differs (e.g. inside an edited message)"
    ),
}
"""Why nothing was reused (``Reuse.miss_reason``), in words — for the reply line here and the
Cache dashboard's request list (``app.ui.cache.reuse_words``) alike."""


def reuse_words(stats: ReplyStats, conversation_id: str = "", title_of: TitleOf | None = None) -> str:
    """What was reused for this reply, e.g. "reused 1,014 of 1,015 tokens held for this chat".

    Reads ``stats.reuse_source`` (the engine's say-why record) when the engine filled it in,
    else the older hit kind and ``cache_read``.
    """
    prompt = stats.prompt_tokens
    n = stats.tokens_reused
    source = stats.reuse_source
    if source == "remote":  # Hearth holds no KV for a remote model; its server may
        cached = stats.cache_read
        told = f" · the server reused {cached:,} of {prompt:,} prompt tokens" if cached else ""
        return "remote · no local cache" + told
    if source == "none" and stats.miss_reason:
        return f"read all {prompt:,} prompt tokens: {MISS_WORDS.get(stats.miss_reason, stats.miss_reason)}"
    if source in ("session", "cache", "live") and n > 0:
        where = _origin(stats.origin_session, conversation_id, title_of)
        if source == "session" and stats.tokens_read_ahead > 0:
            return _read_ahead_words(stats)
        if source == "session":
            return f"reused {n:,} of {prompt:,} prompt tokens still held for this chat"
        if source == "live":
            return f"shared {n:,} of {prompt:,} prompt tokens with {where or 'another request still held in memory'}"
        return f"restored {n:,} of {prompt:,} prompt tokens of {where or 'a saved chat'} from the cache"
    return _kind_words(stats)


def _read_ahead_words(stats: ReplyStats) -> str:
    """"read ahead while you typed: 1,480 of 1,492 prompt tokens" (type-ahead), and what the
    chat's sequence held before the message was written."""
    ahead, held = stats.tokens_read_ahead, stats.tokens_reused - stats.tokens_read_ahead
    text = f"read ahead while you typed: {ahead:,} of {stats.prompt_tokens:,} prompt tokens"
    return text + (f", {held:,} more still held for this chat" if held > 0 else "")


def _origin(origin: str | None, conversation_id: str, title_of: TitleOf | None) -> str:
    if origin is None:
        return ""
    if origin == conversation_id:
        return "this chat"
    title = title_of(origin) if title_of is not None else None
    return f"“{title}”" if title else "another chat"


def _kind_words(stats: ReplyStats) -> str:
    prompt, read = stats.prompt_tokens, stats.cache_read
    kind = stats.cache_hit_kind
    if kind in ("sticky", "continuation") and read:
        return f"reused {read:,} of {prompt:,} prompt tokens still held for this chat"
    if kind in ("exact", "partial") and read:
        return f"restored {read:,} of {prompt:,} prompt tokens from the cache"
    if kind == "cold" or not kind:
        return f"read all {prompt:,} prompt tokens"
    return f"cache {kind}"


def finish_words(stats: ReplyStats) -> str:
    """Why the reply ended, when that is worth saying ("" for a normal end)."""
    if stats.finish_reason == "cancelled":
        return "stopped"
    if stats.context_full:
        return "cut: the context is full"
    if stats.finish_reason == "length":
        return "reached the reply length limit"
    return ""


def reply_line(stats: ReplyStats, conversation_id: str = "", title_of: TitleOf | None = None) -> str:
    """The line under a reply: how it ended (when that is worth saying), speed, what was
    reused. The reason comes first: the line wraps in a narrow window, and the reason is
    the part a person must not miss."""
    return "  ·  ".join(reply_line_parts(stats, conversation_id, title_of))


def reply_line_parts(
    stats: ReplyStats, conversation_id: str = "", title_of: TitleOf | None = None
) -> list[str]:
    """The parts of :func:`reply_line`, in order."""
    end = finish_words(stats)
    parts = [end] if end else []
    parts += [f"{stats.tokens_per_s:.1f} tok/s", f"first token {stats.ttft_ms:,.0f} ms"]
    parts.append(reuse_words(stats, conversation_id, title_of))
    if stats.drafted_tokens:
        parts.append(speculation_words(stats))
    return parts


def speculation_words(stats: ReplyStats) -> str:
    """Speculative decoding's share of the reply, e.g. "drafted 212, accepted 151"."""
    return f"drafted {stats.drafted_tokens:,}, accepted {stats.accepted_tokens:,}"


def reply_tooltip(stats: ReplyStats) -> str:
    source = source_of(stats.reuse_source, stats.miss_reason, stats.cache_hit_kind)
    reused = stats.tokens_reused if source == stats.reuse_source else stats.cache_read
    lines = [
        f"Prompt {stats.prompt_tokens:,} tokens, reply {stats.completion_tokens:,} tokens.",
        # The words and the figure the Cache dashboard counts it under (one hit accounting).
        f"Counted as {request_words(source, stats.prompt_tokens, reused)}.",
    ]
    if stats.cache_created:
        lines.append(f"{stats.cache_created:,} more tokens were saved to the cache.")
    if stats.tokens_read_ahead:
        lines.append(
            f"Type-ahead read {stats.tokens_read_ahead:,} of them while the message was being "
            "written; the reply is the one it would be without."
        )
    if stats.drafted_tokens:
        lines.append(
            f"Speculative decoding: {stats.drafted_tokens:,} tokens drafted from the conversation, "
            f"{stats.accepted_tokens:,} of them accepted (the reply is the same as without)."
        )
    return "\n".join(lines)


def prefill_words(done: int, total: int, tokens_per_s: float | None) -> str:
    """"Reading the prompt… 1,024 / 3,814 tokens · about 40 s left"."""
    text = f"Reading the prompt… {done:,} / {total:,} tokens"
    if tokens_per_s and tokens_per_s > 0 and done < total:
        left = (total - done) / tokens_per_s
        text += f" · about {_duration(left)} left"
    return text


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "1 s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"
