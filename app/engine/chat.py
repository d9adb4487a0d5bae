"""Multi-turn chat on a sticky session: what to send so the KV is reused, not re-prefilled.

A chat client renders the whole history with the model's template every turn. The session's
KV holds the tokens the engine actually saw: the previous prompt plus the *sampled* reply
ids. Re-rendering the reply text can tokenize differently (same text, other merges), so the
new prompt may not extend the held tokens id for id even though it extends them in text.
``continuation_suffix`` aligns the two by text and returns only the new tokens, for
``Model.continue_session`` (docs/design.md §1: that call exists for exactly this).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def continuation_suffix(
    full: Sequence[int],
    held: Sequence[int],
    piece: Callable[[int], str],
    *,
    ended_with_eog: bool = False,
) -> list[int] | None:
    """Tokens to append to ``held`` so that the session reads as ``full``; None if it can't.

    The plain case: ``full`` extends ``held`` id for id. Otherwise walk ``full`` until its
    text equals the held tokens' text (the final end-of-generation token, which the template
    renders as its own special token, is matched by id) and continue from there.
    """
    if len(full) > len(held) and list(full[: len(held)]) == list(held):
        return list(full[len(held) :])
    body = held[:-1] if ended_with_eog and held else held
    target = "".join(piece(t) for t in body)
    text = ""
    j = 0
    while j < len(full) and len(text) < len(target):
        text += piece(full[j])
        j += 1
        if not target.startswith(text):
            return None
    if text != target:
        return None
    if ended_with_eog:
        if j >= len(full) or full[j] != held[-1]:
            return None
        j += 1
    return list(full[j:]) or None
