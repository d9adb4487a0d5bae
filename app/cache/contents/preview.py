"""Row previews in words: the end of a saved conversation as one line of plain text, with
the chat template's markup turned into ``Role:`` labels and other special tokens dropped,
so nobody reads raw template tokens (``app.template_text.readable``, the one home of that
rule). Qt-free; the dashboard and the store share it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.cache.contents.rows import PREVIEW_CHARS
from app.template_text import readable

TAIL_TOKENS = 48  # how a conversation ends says more than its (often shared) start

Detokenizer = Callable[[Sequence[int]], str]


def tail_preview(detokenize: Detokenizer, tokens: Sequence[int]) -> str:
    """The readable end of ``tokens`` (at most ``PREVIEW_CHARS``), "…" when cut."""
    start = max(0, len(tokens) - TAIL_TOKENS)
    text = readable(detokenize(tokens[start:]))
    if start:
        text = "…" + text
    return text[-PREVIEW_CHARS:] if len(text) > PREVIEW_CHARS else text


__all__ = ["TAIL_TOKENS", "Detokenizer", "readable", "tail_preview"]
