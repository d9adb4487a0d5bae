"""A chat request → the token prompt and grammar the engine runs.

The messages are rendered with the model's own chat template (``Model.apply_chat_template``);
tools go through the template when it renders them (native mode), else into the system
message (generic mode, ``tools.py``); ``file`` parts go into the system message, after the
system prompt, as the app lays out a chat's documents (``documents.py``). The tokens are then aligned with what the server
generated before (``alignment.TokenMemo``) so a re-sent conversation reuses its KV.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from app.engine.config import Markers
from app.server.alignment import TokenMemo
from app.server.documents import with_documents
from app.server.grammar import (
    JSON_OBJECT_GRAMMAR,
    TOOL_CLOSE,
    TOOL_OPEN,
    json_schema_grammar,
    tool_call_grammar,
)
from app.server.messages import Message
from app.server.protocol import ChatRequest
from app.server.tools import canonical_call_text, tool_response_text, tools_system_text

ToolMode = Literal["none", "native", "generic"]


class TemplateModel(Protocol):
    """What prompt building needs from an engine ``Model``."""

    def apply_chat_template(self, request: dict[str, Any]) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    tokens: list[int]
    grammar: str | None
    tool_mode: ToolMode
    grammar_param: str = "grammar"
    """Where the grammar came from: ``grammar``, ``tools`` or ``response_format.json_schema.schema``."""


def tool_mode(request: ChatRequest, chat_template: str | None) -> ToolMode:
    uses_tools = bool(request.tools) or any(m.role == "tool" or m.tool_calls for m in request.messages)
    if not uses_tools:
        return "none"
    return "native" if chat_template and "tools" in chat_template else "generic"


def build_chat_prompt(
    model: TemplateModel, request: ChatRequest, memo: TokenMemo, *, chat_template: str | None,
    tool_markers: Markers | None = None,
) -> ChatPrompt:
    request = with_documents(request)  # file parts: where the app puts a chat's documents
    mode = tool_mode(request, chat_template)
    if mode == "native":
        messages = [native_message(m) for m in request.messages]
        tools = [t.openai_json() for t in request.tools] or None
    else:
        messages = _generic(request, memo) if mode == "generic" else [_plain(m) for m in request.messages]
        tools = None
    tokens = model.apply_chat_template({"messages": messages, "tools": tools})
    grammar, param = _grammar(request, mode, tool_markers)
    return ChatPrompt(memo.align(tokens), grammar, mode, param)


def _grammar(request: ChatRequest, mode: ToolMode, markers: Markers | None) -> tuple[str | None, str]:
    """The reply's grammar and the field it comes from. The engine checks it before llama.cpp
    sees it (``app.engine.grammar.check``); a refusal names that field."""
    if request.sampling.grammar:
        return request.sampling.grammar, "grammar"
    if request.tools and request.tool_choice == "required":
        pair = (markers.open, markers.close) if mode == "native" and markers else (TOOL_OPEN, TOOL_CLOSE)
        return tool_call_grammar(request.tools, request.tool_name, pair), "tools"
    if request.format_kind == "json_object":
        return JSON_OBJECT_GRAMMAR, "response_format"
    if request.format_kind == "json_schema":
        assert request.json_schema is not None
        return json_schema_grammar(request.json_schema), "response_format.json_schema.schema"
    return None, "grammar"


def _plain(m: Message) -> dict[str, Any]:
    return {"role": m.role, "content": m.content or ""}


def native_message(m: Message) -> dict[str, Any]:
    """A message as a template that renders tools takes it (also the app's tool chats)."""
    out: dict[str, Any] = {"role": m.role, "content": m.content or ""}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _args(c.arguments)}}
            for c in m.tool_calls
        ]
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id
        if m.name:
            out["name"] = m.name
    return out


def _args(text: str) -> Any:
    """Templates index into the arguments (``arguments | tojson``, ``arguments.items()``)."""
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text


def _generic(request: ChatRequest, memo: TokenMemo) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in request.messages:
        if m.role == "assistant" and m.tool_calls:
            written = memo.tool_text(m.tool_calls[0].id)
            if written is None:
                head = f"{m.content}\n" if m.content else ""
                written = head + canonical_call_text(m.tool_calls)
            out.append({"role": "assistant", "content": written})
        elif m.role == "tool":
            out.append({"role": "user", "content": tool_response_text(m.content or "")})
        else:
            out.append(_plain(m))
    if request.tools:
        block = tools_system_text(request.tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out
