"""A tool-using chat as the model reads it, with the server's own code paths. No Qt.

A reply that called tools is stored as the model wrote it, ``<tool_call>`` blocks and all
(``app.server.reply.ChatReply`` writes a native-mode call the same way), and each result as a
``tool`` message. Rendering them:

- generic mode (the template knows no tools): the tool definitions are appended to the system
  prompt (``app.server.tools.tools_system_text``), a reply goes in as written, a result as a
  user message ``<tool_response>…</tool_response>`` — what the server sends for the same chat;
- native mode (the template renders ``tools``): the calls are read back out of the reply
  (``app.server.tools.parse_calls``) and handed to the template with the results as ``tool``
  messages (``app.server.prompt.native_message``).

Either way the reply's text is the text the model wrote, so the next step's prompt extends the
sticky session's tokens and only the tool result (and the template's turn markers) is read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.server.grammar import TOOL_CLOSE, TOOL_OPEN, tool_call_grammar
from app.server.messages import Message, ToolCall, ToolSpec
from app.server.prompt import ToolMode, native_message
from app.server.tools import parse_calls, tool_response_text, tools_system_text

Rendered = list[dict[str, Any]]


def tool_mode_for(chat_template: str | None) -> ToolMode:
    """As the server decides it (``app.server.prompt.tool_mode``) for a request with tools."""
    return "native" if chat_template and "tools" in chat_template else "generic"


def calls_in(content: str, specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
    """The calls a stored reply made, with ids by position (``call_0``…) so a rendering of
    the same chat is the same text every time. ``specs`` None: any tool name."""
    if TOOL_OPEN not in content:
        return []
    names = [s.name for s in specs] if specs is not None else _names(content)
    parsed = parse_calls(content, [ToolSpec(n, "", {}) for n in names])
    return [ToolCall(f"call_{i}", c.name, c.arguments) for i, c in enumerate(parsed.calls)]


def _names(content: str) -> list[str]:
    names = []
    for block in content.split(TOOL_OPEN)[1:]:
        try:
            obj = json.loads(block.split(TOOL_CLOSE)[0])
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            names.append(obj["name"])
    return names


def text_before_calls(content: str) -> str:
    return content.split(TOOL_OPEN)[0].strip() if TOOL_OPEN in content else content


def display_text(content: str) -> str:
    """A stored reply for the chat view: its text, then each call as a tool name and readable
    JSON arguments (Markdown)."""
    calls = calls_in(content)
    if not calls:
        return content
    parts = [text_before_calls(content)] if text_before_calls(content) else []
    for call in calls:
        try:
            args = json.dumps(json.loads(call.arguments or "{}"), indent=2, ensure_ascii=False)
        except ValueError:
            args = call.arguments
        parts.append(f"**Tool call:** `{call.name}`\n\n```json\n{args}\n```")
    return "\n\n".join(parts)


class ToolShape:
    """Turns a conversation's template messages (and system prompt) into the tool-aware ones
    ``Model.apply_chat_template`` takes; ``PromptBuilder`` calls it for every view it renders."""

    def __init__(self, specs: Sequence[ToolSpec], mode: ToolMode) -> None:
        self.specs = tuple(specs)
        self.mode = mode

    def __call__(self, messages: Rendered, system: str) -> tuple[Rendered, str, list[dict[str, Any]] | None]:
        if self.mode == "native":
            return self._native(messages), system, [t.openai_json() for t in self.specs] or None
        out: Rendered = []
        for m in messages:
            if m.get("role") == "tool":
                out.append({"role": "user", "content": tool_response_text(str(m.get("content", "")))})
            else:
                out.append(m)
        if self.specs:
            block = tools_system_text(self.specs)
            system = f"{system}\n\n{block}" if system else block
        return out, system, None

    def _native(self, messages: Rendered) -> Rendered:
        out: Rendered = []
        pending: list[ToolCall] = []
        for m in messages:
            role, content = str(m.get("role")), str(m.get("content", ""))
            if role == "assistant" and TOOL_OPEN in content:
                pending = calls_in(content, self.specs)
                msg = Message("assistant", text_before_calls(content), tool_calls=tuple(pending))
            elif role == "tool":
                call = pending.pop(0) if pending else None
                msg = Message("tool", content, tool_call_id=call.id if call else "call_0",
                              name=call.name if call else None)  # fmt: skip
            else:
                out.append(m)
                continue
            out.append(native_message(msg))
        return out


def forced_grammar(specs: Sequence[ToolSpec], mode: ToolMode, markers: tuple[str, str] | None) -> str:
    """The grammar that makes the reply one call of one of ``specs`` (``tool_choice``
    required, as the server builds it). A schema the grammar cannot express is loosened to
    "any object" for that tool; the arguments are still checked before the call."""
    pair = markers if mode == "native" and markers else (TOOL_OPEN, TOOL_CLOSE)
    try:
        return tool_call_grammar(specs, None, pair)
    except Exception:  # the server's ApiError: a schema feature the converter refuses
        loose = [ToolSpec(s.name, s.description, {"type": "object"}) for s in specs]
        return tool_call_grammar(loose, None, pair)
