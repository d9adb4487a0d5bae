"""The scanners under a request's text pipeline: UTF-8 decoding, stop strings, span markers.

``TextDecoder`` turns token pieces (a token may hold half a character) into text;
``StopScanner`` holds back enough text that a stop string spanning tokens is still cut;
``SpanTracker`` routes tokens into thinking / tool-call spans by matching their markers as
token sequences. ``app.engine.streaming.TextPipeline`` puts them together for one request.
"""

from __future__ import annotations

import codecs
import enum
from collections.abc import Sequence
from dataclasses import dataclass


class StopScanner:
    """First-match-by-list-order stop strings over streamed text, with hold-back.

    ``feed`` returns text safe to emit now; up to ``max_len - 1`` characters are held so a
    stop string spanning several tokens is still found and removed.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.pending = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        if not self.stops:
            return text
        self.pending += text
        for stop in self.stops:
            idx = self.pending.find(stop)
            if idx >= 0:
                self.matched = stop
                out, self.pending = self.pending[:idx], ""
                return out
        if len(self.pending) <= self.hold:
            return ""
        cut = len(self.pending) - self.hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class TextDecoder:
    """Incremental UTF-8 decoding of token pieces (a token may hold half a character)."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        return self._dec.decode(piece)

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)


class Span(enum.Enum):
    TEXT = "text"
    THINKING = "thinking"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class MarkerTokens:
    open: tuple[int, ...]
    close: tuple[int, ...]


class SpanTracker:
    """Routes generated tokens into text / thinking / tool-call spans.

    Markers are token sequences; tokens that could still be the start of a marker are held
    until they either complete it (swallowed, span switches) or cannot (released as content).
    """

    def __init__(self, thinking: MarkerTokens | None, tool: MarkerTokens | None) -> None:
        self.markers = {Span.THINKING: thinking, Span.TOOL: tool}
        self.span = Span.TEXT
        self.held: list[int] = []

    def _candidates(self) -> list[tuple[tuple[int, ...], Span | None]]:
        """Markers that matter in the current span: (tokens, span it leads to)."""
        if self.span is Span.TEXT:
            return [(m.open, s) for s, m in self.markers.items() if m is not None and m.open]
        marker = self.markers[self.span]
        assert marker is not None
        return [(marker.close, None)]

    def push(self, token: int) -> list[tuple[Span, list[int] | None]]:
        """Feed one token; returns content chunks and span transitions in order.

        A transition is ``(new_span, None)``: entering THINKING/TOOL, or leaving to TEXT
        (then ``new_span`` is TEXT and the closed span was the previous one).
        """
        self.held.append(token)
        out: list[tuple[Span, list[int] | None]] = []
        for seq, target in self._candidates():
            n = len(seq)
            if len(self.held) >= n and tuple(self.held[-n:]) == seq:
                content = self.held[:-n]
                if content:
                    out.append((self.span, content))
                self.held = []
                self.span = target if target is not None else Span.TEXT
                out.append((self.span, None))
                return out
        keep = self._longest_partial()
        release = self.held[: len(self.held) - keep]
        self.held = self.held[len(self.held) - keep :]
        if release:
            out.append((self.span, release))
        return out

    def _longest_partial(self) -> int:
        best = 0
        for seq, _ in self._candidates():
            for k in range(min(len(seq) - 1, len(self.held)), 0, -1):
                if tuple(self.held[-k:]) == seq[:k]:
                    best = max(best, k)
                    break
        return best

    def flush(self) -> list[int]:
        held, self.held = self.held, []
        return held

    def force_text(self) -> None:
        """Leave the current span without a close marker (thinking budget reached)."""
        self.span = Span.TEXT
