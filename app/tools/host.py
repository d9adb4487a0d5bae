"""The MCP client side: a thread of its own running an asyncio loop, where each MCP server the
app uses is connected (with the ``mcp`` SDK) and called. No Qt.

Nothing here blocks its caller: ``start`` and ``call`` return ``concurrent.futures.Future``s
that the UI polls or attaches callbacks to. A server that hangs, floods, exits or writes
something that is not JSON-RPC fails the one call (or the start) within its timeout; the
server is then stopped, and the next call starts it again. What the server wrote on stderr
is kept (its last ``STDERR_KEEP`` characters) to show when it fails.

What a server writes is bounded before this process parses it: a stdio server's in a guard
process of its own (``app.tools.guard``), an HTTP server's replies by the HTTP client
(``app.tools.http_client``); a result's text is cut to ``GUARD_CHARS`` either way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import threading
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app.tools.config import ServerConfig
from app.tools.guard import ORIGINAL_KEY
from app.tools.guard import command as guard_command
from app.tools.http_client import MAX_REPLY_BYTES
from app.tools.http_client import client as bounded_client

log = logging.getLogger(__name__)

T = TypeVar("T")
START_TIMEOUT_S = 20.0
STDERR_KEEP = 4000
GUARD_CHARS = 200_000
"""A stdio server's result text is cut to this in its guard's process (``app.tools.guard``),
before this process parses it, an HTTP server's (bounded in bytes by then) here; the result
size setting goes up to it."""
PARSE_ERROR = -32700  # JSON-RPC's code for a message that could not be parsed


class ToolError(Exception):
    """A server could not be started or a call did not return a result (said in words)."""


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """One tool a server offers."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ServerStatus:
    server_id: str
    state: str  # "stopped" | "starting" | "running" | "failed"
    tools: tuple[ToolInfo, ...] = ()
    error: str = ""
    stderr: str = ""


@dataclass(frozen=True, slots=True)
class CallResult:
    text: str
    is_error: bool = False
    total_chars: int | None = None
    """How long the text was before the guard cut it (None: not cut)."""


@dataclass(slots=True)
class _Connection:
    config: ServerConfig
    session: Any = None
    tools: tuple[ToolInfo, ...] = ()
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Future[tuple[ToolInfo, ...]] | None = None
    task: asyncio.Task[None] | None = None
    errlog: Any = None
    broken: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the server wrote something that is not JSON-RPC (``why``)."""
    why: str = ""
    oversize: bool = False
    """Set when an HTTP server's reply was longer than the app reads (``MAX_REPLY_BYTES``)."""


class ToolHost:
    """Every MCP server connection of the app, on one background thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hearth-mcp", daemon=True)
        self._thread.start()
        self._conns: dict[str, _Connection] = {}
        self._status: dict[str, ServerStatus] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._stopping: set[asyncio.Task[None]] = set()

    # -- from any thread -----------------------------------------------------------------------

    def status(self, server_id: str) -> ServerStatus:
        with self._lock:
            return self._status.get(server_id, ServerStatus(server_id, "stopped"))

    def start(self, config: ServerConfig, timeout_s: float = START_TIMEOUT_S) -> Future[tuple[ToolInfo, ...]]:
        """Connect (if not connected) and list the server's tools."""
        return self._submit(self._ensure(config, timeout_s))

    def call(self, config: ServerConfig, tool: str, arguments: dict[str, Any], timeout_s: float) -> Future[CallResult]:
        return self._submit(self._call(config, tool, arguments, timeout_s))

    def stop(self, server_id: str) -> Future[None]:
        return self._submit(self._stop(server_id))

    def shutdown(self, timeout_s: float = 15.0) -> None:
        """Stop every server (their processes end) and the thread."""
        if self._closed:
            return
        self._closed = True
        done = asyncio.run_coroutine_threadsafe(self._stop_all(), self._loop)
        try:
            done.result(timeout_s)
        except Exception as exc:  # a server that will not stop must not keep the app alive
            log.warning("MCP servers did not all stop: %s", exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        if self._closed:
            coro.close()
            failed: Future[T] = Future()
            failed.set_exception(ToolError("the tool host has stopped"))
            return failed
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _set_status(self, status: ServerStatus) -> None:
        with self._lock:
            self._status[status.server_id] = status

    # -- on the host's loop --------------------------------------------------------------------

    async def _ensure(self, config: ServerConfig, timeout_s: float) -> tuple[ToolInfo, ...]:
        conn = self._conns.get(config.id)
        if conn is not None and conn.config != config:
            await self._stop(config.id)
            conn = None
        if conn is None or conn.task is None or conn.task.done():
            conn = _Connection(config)
            conn.ready = self._loop.create_future()
            conn.errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed in _stop
            self._conns[config.id] = conn
            self._set_status(ServerStatus(config.id, "starting"))
            conn.task = self._loop.create_task(self._run(conn, timeout_s))
        assert conn.ready is not None
        try:
            return await asyncio.wait_for(asyncio.shield(conn.ready), timeout_s + 1)
        except TimeoutError:
            await self._stop(config.id)
            raise self._failed(conn, f"did not start within {timeout_s:g} s") from None

    async def _run(self, conn: _Connection, timeout_s: float) -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client

        cfg = conn.config
        ready = conn.ready
        assert ready is not None
        try:
            async with AsyncExitStack() as stack:
                if cfg.kind == "stdio":
                    line = guard_command(GUARD_CHARS, [cfg.command, *cfg.args])
                    params = StdioServerParameters(command=line[0], args=line[1:], cwd=cfg.cwd or None,
                                                   encoding_error_handler="replace")  # fmt: skip
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=conn.errlog))
                else:
                    def over() -> None:
                        conn.oversize = True

                    http = await stack.enter_async_context(bounded_client(over))
                    read, write = await stack.enter_async_context(streamable_http_client(cfg.url, http_client=http))
                async def on_message(message: Any) -> None:
                    if isinstance(message, Exception):  # the SDK could not read what the server wrote
                        conn.why = f"wrote something that is not JSON-RPC ({_describe(message).splitlines()[0][:200]})"
                        conn.broken.set()

                session = await stack.enter_async_context(ClientSession(read, write, message_handler=on_message))
                await asyncio.wait_for(session.initialize(), timeout_s)
                listed = await asyncio.wait_for(session.list_tools(), timeout_s)
                conn.tools = tuple(
                    ToolInfo(t.name, t.description or "", dict(t.input_schema or {"type": "object"}))
                    for t in listed.tools
                )
                conn.session = session
                self._set_status(ServerStatus(cfg.id, "running", conn.tools, stderr=self._stderr(conn)))
                if not ready.done():
                    ready.set_result(conn.tools)
                await conn.stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the SDK raises exception groups from its task groups
            error = self._failed(conn, _describe(exc))
            log.info("MCP server %s ended: %s", cfg.name, error)
            if not ready.done():
                ready.set_exception(error)
        finally:
            conn.session = None
            if not ready.done():
                ready.set_exception(ToolError(f"{cfg.name} stopped"))
            if self.status(cfg.id).state in ("running", "starting"):
                self._set_status(ServerStatus(cfg.id, "stopped", stderr=self._stderr(conn)))

    def _failed(self, conn: _Connection, what: str) -> ToolError:
        stderr = self._stderr(conn)
        self._set_status(ServerStatus(conn.config.id, "failed", error=what, stderr=stderr))
        return ToolError(f"the MCP server {conn.config.name} {what}")

    @staticmethod
    def _stderr(conn: _Connection) -> str:
        f = conn.errlog
        if f is None or f.closed:
            return ""
        try:
            f.flush()
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - STDERR_KEEP * 4))
            return str(f.read())[-STDERR_KEEP:]
        except (OSError, ValueError):
            return ""

    async def _call(self, config: ServerConfig, tool: str, arguments: dict[str, Any], timeout_s: float) -> CallResult:
        await self._ensure(config, timeout_s)
        conn = self._conns[config.id]
        session = conn.session
        if session is None:
            raise self._failed(conn, "is not running")
        call = asyncio.ensure_future(session.call_tool(tool, arguments))
        call.add_done_callback(lambda t: t.cancelled() or t.exception())  # read, even when abandoned
        assert conn.task is not None
        ended = conn.task  # the connection ends when the server exits or breaks the protocol
        broken = asyncio.ensure_future(conn.broken.wait())
        done, _ = await asyncio.wait({call, ended, broken}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        broken.cancel()
        if broken in done and call not in done:
            call.cancel()
            self._stop_later(config.id)
            raise self._failed(conn, f"{conn.why} during the call to {tool} (the server was stopped)")
        if call in done:
            try:
                result = call.result()
            except Exception as exc:
                self._stop_later(config.id)
                raise self._failed(conn, self._call_failure(conn, tool, exc)) from None
            return _result_text(result)
        call.cancel()
        if ended in done:
            status = self.status(config.id)
            raise ToolError(f"the MCP server {config.name} stopped during the call to {tool}"
                            + (f": {status.error}" if status.error else ""))  # fmt: skip
        self._stop_later(config.id)
        raise self._failed(conn, f"did not answer the call to {tool} within {timeout_s:g} s (the server was stopped)")

    @staticmethod
    def _call_failure(conn: _Connection, tool: str, exc: Exception) -> str:
        """Why a call failed, in words; an HTTP reply that was too long or not JSON-RPC (the SDK
        turns either into an error for the call) is said as such."""
        from mcp.shared.exceptions import MCPError

        if conn.oversize:
            conn.oversize = False
            return f"answered the call to {tool} with over {MAX_REPLY_BYTES:,} bytes, the most the app reads"
        if isinstance(exc, MCPError) and exc.code == PARSE_ERROR:
            first = exc.message.splitlines()[0][:200] if exc.message else ""
            return f"wrote something that is not JSON-RPC during the call to {tool} ({first})"
        return f"failed the call to {tool}: {_describe(exc)}"

    def _stop_later(self, server_id: str) -> None:
        """Stop a server without waiting for it (closing stdin, then a kill, takes seconds):
        the call it failed is reported now."""
        task = self._loop.create_task(self._stop(server_id))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _stop(self, server_id: str) -> None:
        conn = self._conns.pop(server_id, None)
        if conn is None:
            return
        conn.stop.set()
        if conn.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(conn.task), 10)
            except (TimeoutError, Exception):
                conn.task.cancel()
        if self.status(server_id).state != "failed":
            self._set_status(ServerStatus(server_id, "stopped", stderr=self._stderr(conn)))
        if conn.errlog is not None:
            conn.errlog.close()

    async def _stop_all(self) -> None:
        """Every server stopped, those being stopped already included: a stop left running when
        the loop ends leaves its server's process behind (a hung server ignores its closed stdin)."""
        await asyncio.gather(*(self._stop(i) for i in list(self._conns)), *self._stopping, return_exceptions=True)


def _describe(exc: BaseException) -> str:
    """An exception (or the first leaf of an exception group) in words."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text[:500]


def _result_text(result: Any) -> CallResult:
    """A ``CallToolResult`` as text: its text parts, others named, structured content as JSON."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '')}]")
        elif kind == "resource_link":
            parts.append(f"[resource: {getattr(block, 'uri', '')}]")
        else:
            parts.append(f"[{kind or 'content'}]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    meta = getattr(result, "meta", None)
    total = meta.get(ORIGINAL_KEY) if isinstance(meta, dict) else None
    text = "\n".join(parts)
    if len(text) > GUARD_CHARS:  # an HTTP server's (a stdio server's guard has cut it already)
        total, text = len(text) if not isinstance(total, int) else total, text[:GUARD_CHARS]
    return CallResult(text, bool(getattr(result, "is_error", False)), total if isinstance(total, int) else None)
