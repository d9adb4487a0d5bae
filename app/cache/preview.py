"""Row previews in words: the end of a saved conversation as one line of plain text, with
the chat template's markup turned into ``Role:`` labels and other special tokens dropped,
so nobody reads raw template tokens. Qt-free; the dashboard and the store share it."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from app.cache.rows import PREVIEW_CHARS

TAIL_TOKENS = 48  # how a conversation ends says more than its (often shared) start

Detokenizer = Callable[[Sequence[int]], str]

_ROLE_START = re.compile(r"<\|im_start\|>(\w+)\s*|<\|start_header_id\|>(\w+)<\|end_header_id\|>\s*")
_MARKUP = re.compile(r"<\|[^|<>]{1,32}\|>|</?s>|\[/?INST\]")


def readable(text: str) -> str:
    """One line of plain text: chat-template markup becomes ``Role:``, whitespace collapses."""
    text = _ROLE_START.sub(lambda m: f" {(m.group(1) or m.group(2)).capitalize()}: ", text)
    text = _MARKUP.sub(" ", text)
    return " ".join(text.split())


def tail_preview(detokenize: Detokenizer, tokens: Sequence[int]) -> str:
    """The readable end of ``tokens`` (at most ``PREVIEW_CHARS``), "…" when cut."""
    start = max(0, len(tokens) - TAIL_TOKENS)
    text = readable(detokenize(tokens[start:]))
    if start:
        text = "…" + text
    return text[-PREVIEW_CHARS:] if len(text) > PREVIEW_CHARS else text
