"""One request's text pipeline: generated tokens in, stream events out (docs/design.md §2).

``TextPipeline`` owns everything between a sampled token and the events a caller sees:
UTF-8 decoding, the stop-string scan with its hold-back, the thinking and tool-call spans
(``ThinkingDelta``/``ThinkingEnd``, ``ToolCallDelta``/``ToolCallEnd``) and the reply text.
The scheduler calls ``push`` once per generated token (after its ``TokenId``) and ``flush``
when the request finishes; it reads back ``reply``, ``stop_sequence`` and
``in_tool_syntax`` (tool-call syntax is sampled greedily).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.engine.errors import InvalidRequest
from app.engine.events import Event, ThinkingDelta, ThinkingEnd, Token, ToolCallDelta, ToolCallEnd
from app.engine.text import MarkerTokens, Span, SpanTracker, StopScanner, TextDecoder


@dataclass(slots=True)
class _Thinking:
    """The open thinking span: its raw bytes (signed at the end) and token count (budget)."""

    decoder: TextDecoder = field(default_factory=TextDecoder)
    raw: bytearray = field(default_factory=bytearray)
    num_tokens: int = 0
    capped: bool = False


@dataclass(slots=True)
class _ToolCall:
    """The open tool-call span: its text so far and the JSON string state inside it."""

    decoder: TextDecoder = field(default_factory=TextDecoder)
    parts: list[str] = field(default_factory=list)
    in_string: bool = False
    escape: bool = False

    def track(self, text: str) -> None:
        """Follow JSON string state through tool-call text (payload strings vs syntax)."""
        for ch in text:
            if self.escape:
                self.escape = False
            elif ch == "\\" and self.in_string:
                self.escape = True
            elif ch == '"':
                self.in_string = not self.in_string


class TextPipeline:
    """Turns one request's generated tokens into its stream events."""

    def __init__(
        self,
        token_piece: Callable[[int], bytes],
        emit: Callable[[Event], None],
        *,
        stop_sequences: Sequence[str] = (),
        thinking_enabled: bool = False,
        thinking_budget_tokens: int | None = None,
        thinking_markers: MarkerTokens | None = None,
        tool_markers: MarkerTokens | None = None,
        signing_key: bytes | None = None,
    ) -> None:
        self._piece = token_piece
        self._emit = emit
        self._stop = StopScanner(stop_sequences)
        has_markers = thinking_markers is not None or tool_markers is not None
        self._spans = SpanTracker(thinking_markers, tool_markers) if has_markers else None
        self._thinking_enabled = thinking_enabled
        self._thinking_budget = thinking_budget_tokens
        self._signing_key = signing_key
        self._text = TextDecoder()
        self._reply: list[str] = []
        self._thinking = _Thinking()
        self._tool = _ToolCall()

    @property
    def reply(self) -> str:
        """The visible text emitted so far (stop string and spans removed)."""
        return "".join(self._reply)

    @property
    def stop_sequence(self) -> str | None:
        """The stop string that matched, once one has."""
        return self._stop.matched

    @property
    def in_tool_syntax(self) -> bool:
        """Inside a tool-call span but outside a JSON string: sample greedily."""
        return self._spans is not None and self._spans.span is Span.TOOL and not self._tool.in_string

    def push(self, token: int) -> None:
        """Route one generated (non end-of-generation) token.

        Raises ``InvalidRequest`` when the model opens a thinking span on a request that did
        not opt in (docs/design.md §2); nothing of that span is emitted.
        """
        if self._spans is None:
            self._emit_text(self._piece(token))
            return
        before = self._spans.span
        for span, chunk in self._spans.push(token):
            if chunk is None:
                self._on_transition(before, span)
                before = span
            else:
                self._emit_span(span, chunk)

    def flush(self) -> None:
        """Release held tokens and held-back text at the end of the request."""
        if self._spans is not None:
            for tok in self._spans.flush():
                self._emit_span(self._spans.span, [tok])
        if self._stop.matched is None:
            text = self._stop.feed(self._text.flush())
            text += "" if self._stop.matched is not None else self._stop.flush()
            self._emit_reply(text)

    def _on_transition(self, old: Span, new: Span) -> None:
        if new is Span.THINKING and not self._thinking_enabled:
            raise InvalidRequest("the model produced thinking output but thinking is not enabled")
        if old is Span.THINKING and not self._thinking.capped:
            self._end_thinking()
        elif old is Span.TOOL:
            tool = self._tool
            tail = tool.decoder.flush()
            if tail:
                tool.parts.append(tail)
                self._emit(ToolCallDelta(tail))
            self._emit(ToolCallEnd("".join(tool.parts)))
            self._tool = _ToolCall()

    def _end_thinking(self) -> None:
        tail = self._thinking.decoder.flush()
        if tail:
            self._emit(ThinkingDelta(tail))
        key = self._signing_key
        signature = hmac.new(key, bytes(self._thinking.raw), hashlib.sha256).digest() if key else b""
        self._emit(ThinkingEnd(signature))

    def _emit_span(self, span: Span, tokens: list[int]) -> None:
        for tok in tokens:
            piece = self._piece(tok)
            if span is Span.THINKING and not self._thinking.capped:
                self._think(piece)
            elif span is Span.TOOL:
                text = self._tool.decoder.feed(piece)
                if text:
                    self._tool.track(text)
                    self._tool.parts.append(text)
                    self._emit(ToolCallDelta(text))
            else:
                self._emit_text(piece)

    def _think(self, piece: bytes) -> None:
        thinking = self._thinking
        thinking.num_tokens += 1
        thinking.raw.extend(piece)
        text = thinking.decoder.feed(piece)
        if text:
            self._emit(ThinkingDelta(text))
        budget = self._thinking_budget
        if budget and thinking.num_tokens >= budget:
            # Budget reached: close the span now; later thinking tokens read as text.
            self._end_thinking()
            thinking.capped = True

    def _emit_text(self, piece: bytes) -> None:
        if self._stop.matched is not None:
            return
        self._emit_reply(self._stop.feed(self._text.feed(piece)))

    def _emit_reply(self, text: str) -> None:
        if text:
            self._reply.append(text)
            self._emit(Token(text))
