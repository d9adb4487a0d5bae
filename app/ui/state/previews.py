"""Text previews of cache rows, detokenized lazily with the row's loaded model and cached.

Previews are plain words: chat-template markup is turned into "User: …" by
``app.template_text``. A row whose prompt starts with attached documents is named by them
("[contract.pdf] …", ``app.documents.layout``). Rows only hold token ids; turning them into text needs the model's vocabulary, so a row
whose model is not loaded shows ``NO_PREVIEW``. Only rows a view asks for are decoded
(the table asks for the visible ones), and each decode is remembered (bounded LRU).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence

from app.cache.contents.index import Row
from app.cache.keys import decode_tokens
from app.documents import document_names
from app.engine.errors import EngineError
from app.template_text import readable

log = logging.getLogger(__name__)

NO_PREVIEW = "— model not loaded"
TAIL_TOKENS = 48  # the table shows how a conversation ends: its start is often a shared prompt
HEAD_TOKENS = 256
"""Tokens of a row's start decoded to find the documents it opens with (their wrappers come
right after the system prompt's own text)."""
Detokenizer = Callable[[Sequence[int]], str]
DetokenizerFor = Callable[[Row], Detokenizer | None]


class PreviewCache:
    """``tail(row)``: the last words of a row; ``text(row)``: all of it. Cached by key."""

    def __init__(self, detokenizer_for: DetokenizerFor, capacity: int = 4096) -> None:
        self._detokenizer_for = detokenizer_for
        self._capacity = capacity
        self._tails: OrderedDict[bytes, str] = OrderedDict()

    def cached_tail(self, key: bytes) -> str | None:
        return self._tails.get(key)

    def tail(self, row: Row) -> str:
        text = self._tails.get(row.key)
        if text is not None:
            self._tails.move_to_end(row.key)
            return text
        detok = self._detokenizer_for(row)
        if detok is None:  # not cached: the model may load later
            return readable(row.prompt_preview) if row.prompt_preview else NO_PREVIEW
        start = max(0, row.n_tokens - TAIL_TOKENS)
        body = _safe(detok, decode_tokens(row.tokens_le[start * 4 :]))
        if body is None:
            return NO_PREVIEW
        text = ("…" if start else "") + readable(body)
        names = self._documents(detok, row)
        if names:
            text = f"[{', '.join(names)}] {text}"
        self._tails[row.key] = text
        if len(self._tails) > self._capacity:
            self._tails.popitem(last=False)
        return text

    def _documents(self, detok: Detokenizer, row: Row) -> list[str]:
        """The documents the row's prompt opens with: a wrapper's opening in its first
        ``HEAD_TOKENS`` tokens, and every later one up to the last document's end."""
        head = _safe(detok, decode_tokens(row.tokens_le[: HEAD_TOKENS * 4]))
        if not head or not document_names(head):
            return []
        whole = _safe(detok, decode_tokens(row.tokens_le))
        return document_names(whole or head)

    def text(self, row: Row, start: int = 0) -> str | None:
        """Tokens ``start..`` of the row as raw text (template markup included), or None
        without a loaded model; show it through ``template_text.transcript``."""
        detok = self._detokenizer_for(row)
        if detok is None:
            return None
        return _safe(detok, decode_tokens(row.tokens_le[start * 4 :]))

    def decode(self, row: Row, tokens_le: bytes) -> str | None:
        """Other tokens (u32 little-endian) as text with ``row``'s model, or None."""
        detok = self._detokenizer_for(row)
        return None if detok is None else _safe(detok, decode_tokens(tokens_le))

    def clear(self) -> None:
        self._tails.clear()


def _safe(detok: Detokenizer, tokens: list[int]) -> str | None:
    try:
        return detok(tokens)
    except EngineError as exc:  # a model unloaded meanwhile (NotFound), a vocabulary mismatch
        log.debug("detokenize failed: %s", exc)
        return None
    except Exception:
        log.exception("detokenizing a preview failed (a bug)")
        return None


__all__ = ["NO_PREVIEW", "PreviewCache", "readable"]
