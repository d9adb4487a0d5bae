"""What the user set up for tools: the MCP servers (app-wide), the loop's limits, and each
chat's choices (which servers it may use, the tools always allowed in it). No Qt.

All of it lives in the app database's settings table as JSON, so it needs no table of its
own: ``tools/servers``, ``tools/limits`` and ``tools/chat/<conversation id>``.
"""

from __future__ import annotations

import shlex
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

SERVERS_KEY = "tools/servers"
LIMITS_KEY = "tools/limits"


def chat_key(conversation_id: str) -> str:
    return f"tools/chat/{conversation_id}"


class SettingsStore(Protocol):
    """The part of ``app.storage.Storage`` this module uses."""

    def get_setting(self, key: str, default: Any = None) -> Any: ...

    def set_setting(self, key: str, value: Any) -> None: ...

    def delete_setting(self, key: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One MCP server the user added: a local command (stdio) or an HTTP URL on this machine."""

    id: str
    name: str
    kind: str  # "stdio" | "http"
    command: str = ""
    args: tuple[str, ...] = ()
    url: str = ""
    cwd: str = ""

    @classmethod
    def stdio(cls, name: str, command_line: str, cwd: str = "") -> ServerConfig:
        """From a command line as typed (split like a POSIX shell, nothing expanded)."""
        parts = shlex.split(command_line)
        if not parts:
            raise ValueError("the command is empty")
        return cls(uuid.uuid4().hex[:12], name.strip() or parts[0], "stdio", parts[0], tuple(parts[1:]), cwd=cwd)

    @classmethod
    def http(cls, name: str, url: str) -> ServerConfig:
        url = url.strip()
        if not local_url(url):
            raise ValueError("only a URL on this machine (http://127.0.0.1, localhost or [::1]) is accepted")
        return cls(uuid.uuid4().hex[:12], name.strip() or url, "http", url=url)

    @property
    def where(self) -> str:
        """The command line or URL, for the settings list."""
        if self.kind == "http":
            return self.url
        return shlex.join([self.command, *self.args])

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "kind": self.kind, "command": self.command,
                "args": list(self.args), "url": self.url, "cwd": self.cwd}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Any) -> ServerConfig | None:
        if not isinstance(data, dict) or data.get("kind") not in ("stdio", "http"):
            return None
        try:
            return cls(str(data["id"]), str(data["name"]), str(data["kind"]), str(data.get("command", "")),
                       tuple(str(a) for a in data.get("args", ())), str(data.get("url", "")),
                       str(data.get("cwd", "")))  # fmt: skip
        except (KeyError, TypeError):
            return None


def local_url(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and parts.hostname in ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True, slots=True)
class Limits:
    """The loop's limits (Settings › Tools)."""

    max_steps: int = 10
    """Tool steps one turn may take before the loop stops and says so."""
    timeout_s: float = 30.0
    """How long one call may take; the server is stopped after that."""
    max_result_chars: int = 8000
    """How much of a tool's output the model is shown; the rest is cut, and the message says so."""

    def to_dict(self) -> dict[str, Any]:
        return {"max_steps": self.max_steps, "timeout_s": self.timeout_s, "max_result_chars": self.max_result_chars}

    @classmethod
    def from_dict(cls, data: Any) -> Limits:
        if not isinstance(data, dict):
            return cls()
        try:
            return cls(max(1, int(data.get("max_steps", 10))), max(0.1, float(data.get("timeout_s", 30.0))),
                       max(100, int(data.get("max_result_chars", 8000))))  # fmt: skip
        except (TypeError, ValueError):
            return cls()


@dataclass(frozen=True, slots=True)
class ChatTools:
    """One chat's tool choices: off until the user enables a server in it."""

    servers: tuple[str, ...] = ()
    """The ids of the servers this chat may use."""
    always: frozenset[str] = field(default_factory=frozenset)
    """``server id/tool name`` of the tools that run without asking, in this chat only."""
    force_call: str = ""
    """When the model must call a tool (``tool_choice`` required: a grammar makes the reply a
    call): "" never, ``first`` in the first reply of each turn, ``every`` in every reply
    (until the step limit)."""

    def to_dict(self) -> dict[str, Any]:
        return {"servers": list(self.servers), "always": sorted(self.always), "force_call": self.force_call}

    @classmethod
    def from_dict(cls, data: Any) -> ChatTools:
        if not isinstance(data, dict):
            return cls()
        servers = tuple(str(s) for s in data.get("servers") or () if isinstance(s, str))
        always = frozenset(str(s) for s in data.get("always") or () if isinstance(s, str))
        force = data.get("force_call", "")
        return cls(servers, always, force if force in ("", "first", "every") else "")


class ToolSettings:
    """Reads and writes the records above in the app database's settings table."""

    def __init__(self, store: SettingsStore) -> None:
        self.store = store

    def servers(self) -> list[ServerConfig]:
        raw = self.store.get_setting(SERVERS_KEY) or []
        found = [ServerConfig.from_dict(d) for d in raw] if isinstance(raw, list) else []
        return [s for s in found if s is not None]

    def server(self, server_id: str) -> ServerConfig | None:
        return next((s for s in self.servers() if s.id == server_id), None)

    def add_server(self, server: ServerConfig) -> None:
        self.store.set_setting(SERVERS_KEY, [*(s.to_dict() for s in self.servers()), server.to_dict()])

    def remove_server(self, server_id: str) -> None:
        self.store.set_setting(SERVERS_KEY, [s.to_dict() for s in self.servers() if s.id != server_id])

    def limits(self) -> Limits:
        return Limits.from_dict(self.store.get_setting(LIMITS_KEY))

    def set_limits(self, limits: Limits) -> None:
        self.store.set_setting(LIMITS_KEY, limits.to_dict())

    def chat(self, conversation_id: str) -> ChatTools:
        return ChatTools.from_dict(self.store.get_setting(chat_key(conversation_id)))

    def set_chat(self, conversation_id: str, tools: ChatTools) -> None:
        if tools == ChatTools():
            self.store.delete_setting(chat_key(conversation_id))
        else:
            self.store.set_setting(chat_key(conversation_id), tools.to_dict())

    def enable(self, conversation_id: str, server_id: str, on: bool) -> ChatTools:
        chat = self.chat(conversation_id)
        servers = [s for s in chat.servers if s != server_id] + ([server_id] if on else [])
        chat = replace(chat, servers=tuple(servers))
        self.set_chat(conversation_id, chat)
        return chat

    def allow_always(self, conversation_id: str, key: str) -> None:
        chat = self.chat(conversation_id)
        self.set_chat(conversation_id, replace(chat, always=chat.always | {key}))
