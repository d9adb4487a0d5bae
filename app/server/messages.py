"""Chat messages and tool definitions, parsed from OpenAI's JSON into frozen records.

Roles: ``system`` (and OpenAI's newer name for it, ``developer``), ``user``, ``assistant``
(text and/or ``tool_calls``) and ``tool`` (a result, with the ``tool_call_id`` it answers).
Content is a string or a list of text parts; a user message's parts may also be ``file``
parts (``{"type": "file", "file": {"filename", "file_data": "data:…;base64,…"}}``): documents,
whose text goes where the app puts a chat's documents (``app.server.prompt``,
``app.documents.layout``). Other part types (images, audio, uploaded files by ``file_id``) are
refused by name — a text model cannot read them, and dropping them would change the prompt.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.server.errors import ApiError, invalid, unsupported
from app.server.fields import check_json, reject_unknown, require_object, too_deep

MAX_MESSAGES = 10_000
MAX_TOOLS = 128


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The arguments as the JSON text the model wrote (OpenAI sends them as a string)."""


@dataclass(frozen=True, slots=True)
class FilePart:
    """A document sent inline: its file name and bytes (``param`` names it in an error)."""

    filename: str
    data: bytes = field(repr=False)
    param: str


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    files: tuple[FilePart, ...] = ()
    """A user message's ``file`` parts, in order."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]

    def openai_json(self) -> dict[str, Any]:
        fn: dict[str, Any] = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        fn["parameters"] = dict(self.parameters)
        return {"type": "function", "function": fn}


_ROLE_KEYS = {
    "system": {"role", "content"},
    "developer": {"role", "content"},
    "user": {"role", "content"},
    "assistant": {"role", "content", "tool_calls", "refusal"},
    "tool": {"role", "content", "tool_call_id", "name"},
}


def parse_messages(raw: Any) -> tuple[Message, ...]:
    if raw is None:
        raise ApiError(400, "Missing required parameter: 'messages'.", param="messages",
                       code="missing_required_parameter")
    if not isinstance(raw, list) or not raw:
        raise invalid("messages", "expected a non-empty list of messages")
    if len(raw) > MAX_MESSAGES:
        raise invalid("messages", f"at most {MAX_MESSAGES} messages, got {len(raw)}")
    return tuple(_message(m, f"messages[{i}]") for i, m in enumerate(raw))


def _message(raw: Any, where: str) -> Message:
    msg = require_object(raw, where)
    role = msg.get("role")
    if role not in _ROLE_KEYS:
        raise invalid(f"{where}.role", f"expected one of {', '.join(_ROLE_KEYS)}, got {role!r}")
    reject_unknown(msg, _ROLE_KEYS[role], f"{where}.")
    if msg.get("refusal") is not None:
        raise unsupported(f"{where}.refusal")
    content, files = _content(msg.get("content"), f"{where}.content", files=role == "user")
    if files:
        return Message("user", content, files=files)
    if role == "developer":
        role = "system"
    if role == "assistant":
        calls = _tool_calls(msg.get("tool_calls"), f"{where}.tool_calls")
        if content is None and not calls:
            raise invalid(f"{where}.content", "an assistant message needs content or tool_calls")
        return Message("assistant", content, calls)
    if content is None:
        raise invalid(f"{where}.content", f"a {role} message needs content")
    if role == "tool":
        call_id = msg.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise invalid(f"{where}.tool_call_id", "a tool message needs the id of the call it answers")
        name = msg.get("name")
        return Message("tool", content, tool_call_id=call_id, name=name if isinstance(name, str) else None)
    return Message(role, content)


def _content(raw: Any, where: str, *, files: bool = False) -> tuple[str | None, tuple[FilePart, ...]]:
    """The text of a message's content, and its ``file`` parts (allowed when ``files``)."""
    if raw is None or isinstance(raw, str):
        return raw, ()
    if not isinstance(raw, list):
        raise invalid(where, "expected a string or a list of content parts")
    texts = []
    found: list[FilePart] = []
    for j, part in enumerate(raw):
        part = require_object(part, f"{where}[{j}]")
        kind = part.get("type")
        if kind == "file" and files:
            found.append(_file_part(part, f"{where}[{j}]"))
            continue
        if kind != "text":
            allowed = "'text', and 'file' in a user message" if kind == "file" or files else "'text'"
            raise unsupported(f"{where}[{j}].type", f"content parts of type {kind!r} (only {allowed} is supported)")
        reject_unknown(part, {"type", "text"}, f"{where}[{j}].")
        text = part.get("text")
        if not isinstance(text, str):
            raise invalid(f"{where}[{j}].text", "expected a string")
        texts.append(text)
    return "".join(texts), tuple(found)


def _file_part(part: Mapping[str, Any], where: str) -> FilePart:
    reject_unknown(part, {"type", "file"}, f"{where}.")
    file = require_object(part.get("file"), f"{where}.file")
    if "file_id" in file:
        raise unsupported(f"{where}.file.file_id", "this server keeps no uploaded files: send the file's bytes "
                                                   "as file_data (a data: URL, base64)")
    reject_unknown(file, {"filename", "file_data"}, f"{where}.file.")
    name, data = file.get("filename"), file.get("file_data")
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise invalid(f"{where}.file.filename", "expected the file's name (1 to 255 characters)")
    if not isinstance(data, str):
        raise invalid(f"{where}.file.file_data", "expected the file as a data: URL (data:<type>;base64,<bytes>)")
    head, sep, payload = data.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise invalid(f"{where}.file.file_data", "expected a data: URL with base64 bytes (data:<type>;base64,…)")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise invalid(f"{where}.file.file_data", f"not base64 ({exc})") from None
    return FilePart(name.strip(), raw, f"{where}.file")


def _tool_calls(raw: Any, where: str) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise invalid(where, "expected a list of tool calls")
    calls = []
    for j, item in enumerate(raw):
        call = require_object(item, f"{where}[{j}]")
        reject_unknown(call, {"id", "type", "function"}, f"{where}[{j}].")
        if call.get("type", "function") != "function":
            raise invalid(f"{where}[{j}].type", "only 'function' tool calls exist")
        fn = require_object(call.get("function"), f"{where}[{j}].function")
        reject_unknown(fn, {"name", "arguments"}, f"{where}[{j}].function.")
        name, args, call_id = fn.get("name"), fn.get("arguments", "{}"), call.get("id", "")
        if not isinstance(name, str) or not name:
            raise invalid(f"{where}[{j}].function.name", "expected the function's name")
        if not isinstance(args, str):
            raise invalid(f"{where}[{j}].function.arguments", "expected the arguments as a JSON string")
        _check_arguments(args, f"{where}[{j}].function.arguments")
        calls.append(ToolCall(str(call_id), name, args))
    return tuple(calls)


def _check_arguments(text: str, param: str) -> None:
    """Arguments that are JSON get the body's bounds (depth, no lone surrogate): the prompt
    parses them for the template. Text that is not JSON is kept as text.
    NOTE: JSON nested 1,000 deep here was a ``RecursionError`` (a 500): the body's depth
    limit did not reach JSON carried inside a string."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise too_deep(param) from None
    except ValueError:
        return
    check_json(value, surrogates=True, param=param)


def parse_tools(raw: Any) -> tuple[ToolSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise invalid("tools", "expected a list of tools")
    if len(raw) > MAX_TOOLS:
        raise invalid("tools", f"at most {MAX_TOOLS} tools, got {len(raw)}")
    specs: list[ToolSpec] = []
    for i, item in enumerate(raw):
        tool = require_object(item, f"tools[{i}]")
        reject_unknown(tool, {"type", "function"}, f"tools[{i}].")
        if tool.get("type") != "function":
            raise unsupported(f"tools[{i}].type", f"tools of type {tool.get('type')!r} (only 'function')")
        fn = require_object(tool.get("function"), f"tools[{i}].function")
        reject_unknown(fn, {"name", "description", "parameters", "strict"}, f"tools[{i}].function.")
        name = fn.get("name")
        if not isinstance(name, str) or not name or len(name) > 64:
            raise invalid(f"tools[{i}].function.name", "expected a name of 1 to 64 characters")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise invalid(f"tools[{i}].function.parameters", "expected a JSON Schema object")
        try:
            json.dumps(params)
        except (TypeError, ValueError) as exc:
            raise invalid(f"tools[{i}].function.parameters", str(exc)) from exc
        desc = fn.get("description") or ""
        if not isinstance(desc, str):
            raise invalid(f"tools[{i}].function.description", "expected a string")
        specs.append(ToolSpec(name, desc, params))
    if len({s.name for s in specs}) != len(specs):
        raise invalid("tools", "two tools have the same name")
    return tuple(specs)
