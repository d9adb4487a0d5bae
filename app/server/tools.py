"""Tool calling for models whose chat template knows nothing about tools (the generic mode).

Such a template gets the tool definitions appended to the system message in the Hermes /
Qwen wording that many open models were trained on, and the model answers a call as
``<tool_call>{"name": …, "arguments": {…}}</tool_call>``. ``tool_choice`` ``required`` or a
named function adds a grammar that forces exactly that (``grammar.tool_call_grammar``);
``auto`` leaves the model free and the reply is read afterwards.

Models whose template renders ``tools`` itself (native mode) get the tools through the
template, and the engine reports their calls as ``ToolCallEnd`` spans.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.server.grammar import TOOL_CLOSE, TOOL_OPEN
from app.server.messages import ToolCall, ToolSpec

_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def tools_system_text(tools: Sequence[ToolSpec]) -> str:
    """The block appended to the system message (stable for the same tools, so it caches)."""
    lines = "".join("\n" + json.dumps(t.openai_json(), ensure_ascii=False) for t in tools)
    return _PREAMBLE + lines + _POSTAMBLE


def canonical_call_text(calls: Sequence[ToolCall]) -> str:
    """How a call reads in generic mode when the server did not write it itself."""
    blocks = []
    for call in calls:
        try:
            args: Any = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError:
            args = call.arguments
        body = json.dumps({"name": call.name, "arguments": args}, ensure_ascii=False)
        blocks.append(f"{TOOL_OPEN}\n{body}\n{TOOL_CLOSE}")
    return "\n".join(blocks)


def tool_response_text(content: str) -> str:
    return f"<tool_response>\n{content}\n</tool_response>"


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass(frozen=True, slots=True)
class ParsedReply:
    content: str | None
    calls: tuple[ToolCall, ...]


def parse_calls(text: str, tools: Sequence[ToolSpec]) -> ParsedReply:
    """Split a generic-mode reply into its text and its ``<tool_call>`` blocks.

    A block whose JSON does not parse, or names a function that was not offered, leaves the
    whole reply as text: the client sees what the model wrote rather than a call it cannot run.
    """
    start = text.find(TOOL_OPEN)
    if start < 0:
        return ParsedReply(text, ())
    names = {t.name for t in tools}
    calls: list[ToolCall] = []
    pos = start
    while pos >= 0:
        end = text.find(TOOL_CLOSE, pos)
        body = text[pos + len(TOOL_OPEN): end if end >= 0 else len(text)]
        call = parse_call_json(body, names)
        if call is None:
            return ParsedReply(text, ())
        calls.append(call)
        if end < 0:
            break
        pos = text.find(TOOL_OPEN, end)
        between = text[end + len(TOOL_CLOSE): pos if pos >= 0 else len(text)]
        if between.strip():
            return ParsedReply(text, ())
    head = text[:start].strip()
    return ParsedReply(head or None, tuple(calls))


def parse_call_json(body: str, names: set[str]) -> ToolCall | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ToolCall(new_call_id(), str(obj["name"]), text)


class CallSplitter:
    """Streaming: pass text through until a ``<tool_call>`` may be starting, then hold it.

    ``feed`` returns the text that is safe to stream as content now; what might be the start
    of a call is kept until it is certain, and everything from a real ``<tool_call>`` on is
    kept for ``parse_calls`` at the end.
    """

    def __init__(self) -> None:
        self.text = ""
        self._sent = 0
        self.in_call = False

    def feed(self, chunk: str) -> str:
        self.text += chunk
        if self.in_call:
            return ""
        idx = self.text.find(TOOL_OPEN, self._sent)
        if idx >= 0:
            self.in_call = True
            return self._release(idx)
        hold = _partial_suffix(self.text, TOOL_OPEN)
        return self._release(len(self.text) - hold)

    def _release(self, upto: int) -> str:
        out = self.text[self._sent: upto]
        self._sent = max(self._sent, upto)
        return out

    def rest(self) -> str:
        """At the end, with no call found: whatever was held back."""
        return self._release(len(self.text))


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
