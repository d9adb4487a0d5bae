"""What a request reused from what Hearth held, and why not more — in plain words. No Qt.

Reads the engine's say-why record (``app.engine.events.Reuse``): where the reused tokens
came from (``session``: the chat's own sequence still in memory; ``live``: another request
running now; ``cache``: a saved conversation), how many of the prompt's tokens, how many it
shared with the best candidate, and on a miss the reason. Conversations are named by title.
"""

from __future__ import annotations

from collections.abc import Callable

from app.conversation.wording import MISS_WORDS
from app.engine.events import Reuse

TitleOf = Callable[[str], str | None]


def reuse_words(
    reuse: Reuse,
    prompt_tokens: int,
    *,
    session_id: str | None = None,
    title_of: TitleOf | None = None,
) -> str:
    """E.g. "reused 1,014 of 1,015 prompt tokens from this chat's earlier reply (the last one
    is always read again)" or "read all 812 prompt tokens: nothing saved started the same
    way"."""
    n, shared = reuse.tokens_reused, reuse.tokens_shared
    if reuse.source == "none" or n <= 0:
        why = MISS_WORDS.get(reuse.miss_reason or "", reuse.miss_reason or "")
        if not why and shared:
            why = f"{shared:,} tokens matched, too few to load"
        return f"read all {prompt_tokens:,} prompt tokens" + (f": {why}" if why else "")
    origin = _origin(reuse, session_id, title_of)
    text = f"reused {n:,} of {prompt_tokens:,} prompt tokens {origin}"
    missed = shared - n
    if missed == 1:
        text += " (the last shared token is always read again, for a fresh answer)"
    elif missed > 1:
        text += f" ({missed:,} more matched but could not be reused)"
    return text


def _origin(reuse: Reuse, session_id: str | None, title_of: TitleOf | None) -> str:
    """Where the tokens came from, naming the conversation when it is known."""
    origin = reuse.origin_session
    if reuse.source == "session":
        return "still held in memory for this chat"
    if origin is not None and origin == session_id:
        whose = "this chat's earlier reply"
    elif origin:
        title = title_of(origin) if title_of is not None else None
        whose = f"“{title}”" if title else "another conversation"
    else:
        whose = ""
    if reuse.source == "live":
        return f"shared with {whose or 'another request still held in memory'}"
    return f"from {whose}" if whose else "from a saved conversation"
