"""Turning generated tokens into stream events: visible text, thinking and tool-call spans.

The scheduler calls ``TokenRouter.route`` once per generated token (after its ``TokenId``)
and ``flush`` when the request finishes. Text passes through the request's stop scanner;
thinking and tool-call tokens go to their own events (SPEC §2).
"""

from __future__ import annotations

from collections.abc import Callable

from app.engine.errors import InvalidRequest
from app.engine.events import ThinkingDelta, ThinkingEnd, Token, ToolCallDelta, ToolCallEnd
from app.engine.request import Request, Span


class TokenRouter:
    def __init__(self, token_piece: Callable[[int], bytes], signing_key: bytes | None) -> None:
        self.token_piece = token_piece
        self.signing_key = signing_key

    def route(self, req: Request, token: int) -> None:
        if req.spans is None:
            self._emit_text(req, self.token_piece(token))
            return
        before = req.spans.span
        for span, chunk in req.spans.push(token):
            if chunk is None:
                self._on_transition(req, before, span)
                before = span
                if req.finishing:
                    return
            else:
                self._emit_span(req, span, chunk)

    def flush(self, req: Request) -> None:
        """Release held tokens and held-back text at the end of the request."""
        if req.spans is not None:
            for tok in req.spans.flush():
                self._emit_span(req, req.spans.span, [tok])
        if req.stop.matched is None:
            text = req.stop.feed(req.text_decoder.flush())
            text += "" if req.stop.matched is not None else req.stop.flush()
            if text:
                req.reply_parts.append(text)
                req.emit(Token(text))

    def _on_transition(self, req: Request, old: Span, new: Span) -> None:
        if new is Span.THINKING and not req.options.thinking:
            req.error = InvalidRequest("the model produced thinking output but thinking is not enabled")
            req.mark("stop")
        elif old is Span.THINKING and not req.thinking_capped:
            self._end_thinking(req)
        elif old is Span.TOOL:
            tail = req.tool_decoder.flush()
            if tail:
                req.tool_parts.append(tail)
                req.emit(ToolCallDelta(tail))
            req.emit(ToolCallEnd("".join(req.tool_parts)))
            req.tool_parts = []
            req.tool_in_string = req.tool_escape = False

    def _end_thinking(self, req: Request) -> None:
        tail = req.thinking_decoder.flush()
        if tail:
            req.emit(ThinkingDelta(tail))
        req.emit(ThinkingEnd(req.thinking_signature(self.signing_key)))

    def _emit_span(self, req: Request, span: Span, tokens: list[int]) -> None:
        for tok in tokens:
            piece = self.token_piece(tok)
            if span is Span.THINKING and not req.thinking_capped:
                req.thinking_count += 1
                req.thinking_bytes.extend(piece)
                text = req.thinking_decoder.feed(piece)
                if text:
                    req.emit(ThinkingDelta(text))
                budget = req.options.thinking_budget_tokens
                if budget and req.thinking_count >= budget:
                    # Budget reached: close the span now; later thinking tokens read as text.
                    self._end_thinking(req)
                    req.thinking_capped = True
            elif span is Span.TOOL:
                text = req.tool_decoder.feed(piece)
                if text:
                    req.track_tool_text(text)
                    req.tool_parts.append(text)
                    req.emit(ToolCallDelta(text))
            else:
                self._emit_text(req, piece)

    def _emit_text(self, req: Request, piece: bytes) -> None:
        if req.stop.matched is not None:
            return
        text = req.stop.feed(req.text_decoder.feed(piece))
        if text:
            req.reply_parts.append(text)
            req.emit(Token(text))
