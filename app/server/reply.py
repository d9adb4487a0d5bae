"""Engine events → an OpenAI chat reply: content, reasoning and tool calls, as deltas or whole.

``ChatReply.on_event`` returns the deltas to stream for one event (nothing for most
``TokenId``s); ``close`` returns the last deltas and the finish reason. The non-streaming
route uses the same object and reads ``message()`` at the end, so both paths agree.
"""

from __future__ import annotations

from typing import Any

from app.engine.events import (
    Done,
    Event,
    Stats,
    ThinkingDelta,
    Token,
    TokenId,
    ToolCallEnd,
)
from app.server.alignment import TokenMemo
from app.server.grammar import TOOL_CLOSE, TOOL_OPEN
from app.server.messages import ToolCall, ToolSpec
from app.server.prompt import ToolMode
from app.server.tools import CallSplitter, parse_call_json, parse_calls

Delta = dict[str, Any]


def cached_tokens(stats: Stats) -> int:
    """Prompt tokens the engine did not have to compute (its ``Reuse`` record when the
    engine fills it in, else the warm prefix it restored or shared)."""
    if stats.reuse.source != "none":
        return stats.reuse.tokens_reused
    return stats.cache_delta.read


def usage(stats: Stats) -> dict[str, Any]:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "total_tokens": stats.prompt_tokens + stats.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens(stats)},
    }


def finish_reason(stats: Stats) -> str:
    return "length" if stats.finish_reason == "length" else "stop"


class ChatReply:
    def __init__(self, tools: tuple[ToolSpec, ...], mode: ToolMode, memo: TokenMemo, *, calls_allowed: bool = True) -> None:
        self.tools = tools
        self.names = {t.name for t in tools}
        self.mode = mode
        self.memo = memo
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[ToolCall] = []
        self.generated: list[int] = []
        self.text: list[str] = []
        """Everything the model wrote as text, calls included (for the memo)."""
        # Calls written as text are read in both modes: in native mode the engine reports a
        # call as a ToolCallEnd only when the model wrote the marker with the very tokens the
        # marker tokenizes to, and a grammar-forced call often spells it with other merges.
        self._splitter = CallSplitter() if tools and calls_allowed and mode != "none" else None

    def on_event(self, event: Event) -> list[Delta]:
        if isinstance(event, TokenId):
            self.generated.append(event.id)
        elif isinstance(event, Token):
            self.text.append(event.text)
            return self._content(self._splitter.feed(event.text) if self._splitter else event.text)
        elif isinstance(event, ThinkingDelta):
            self.reasoning.append(event.text)
            return [{"reasoning_content": event.text}]
        elif isinstance(event, ToolCallEnd):
            return self._native_call(event.full)
        return []

    def _content(self, text: str) -> list[Delta]:
        if not text:
            return []
        self.content.append(text)
        return [{"content": text}]

    def _native_call(self, full: str) -> list[Delta]:
        markers = f"{TOOL_OPEN}{full}{TOOL_CLOSE}"
        self.text.append(markers)
        call = parse_call_json(full, self.names)
        if call is None:  # not a call we can hand over: show what the model wrote
            return self._content(markers)
        self.calls.append(call)
        return [_call_delta(len(self.calls) - 1, call)]

    def close(self, done: Done) -> tuple[list[Delta], str]:
        """The last deltas (held-back text or generic-mode calls) and the finish reason."""
        deltas: list[Delta] = []
        if self._splitter is not None:
            parsed = parse_calls(self._splitter.text, self.tools) if self._splitter.in_call else None
            if parsed is not None and parsed.calls:
                for call in parsed.calls:
                    self.calls.append(call)
                    deltas.append(_call_delta(len(self.calls) - 1, call))
            else:
                deltas += self._content(self._splitter.rest())
        if self.calls:
            self.memo.remember_tool_text([c.id for c in self.calls], "".join(self.text))
            return deltas, "tool_calls"
        return deltas, finish_reason(done.stats)

    def message(self) -> dict[str, Any]:
        text = "".join(self.content)
        msg: dict[str, Any] = {"role": "assistant", "content": text if text or not self.calls else None}
        if self.reasoning:
            msg["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            msg["tool_calls"] = [_call_json(c) for c in self.calls]
        return msg


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _call_delta(index: int, call: ToolCall) -> Delta:
    return {"tool_calls": [{"index": index, **_call_json(call)}]}
