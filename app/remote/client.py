"""A small client for OpenAI-compatible servers: list models, stream a chat reply.

Standard library only (``http.client``), so a cancel can close the socket from another
thread and the reading thread stops at once. Replies arrive as the engine's own events
(``Token``, ``ThinkingDelta``, ``Done(Stats)``, ``Error``) so the app renders them the way it
renders a local model's; the ``Stats`` say ``cache_hit_kind="cold"`` and carry what the
server reported as cached in ``cache_delta.read`` — Hearth keeps no KV for a remote model.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from app.engine.events import CacheDelta, Done, Error, Event, Stats, ThinkingDelta, Token
from app.remote.endpoint import RemoteEndpoint

log = logging.getLogger(__name__)

EventCallback = Callable[[Event], None]

CONNECT_TIMEOUT_S = 10.0


class RemoteError(Exception):
    def __init__(self, message: str, *, status: int = 0, code: str = "remote_error") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class RemoteClient:
    def __init__(self, endpoint: RemoteEndpoint, timeout: float = 600.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        parts = urlsplit(endpoint.base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._path = parts.path

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.endpoint.api_key:
            headers["Authorization"] = f"Bearer {self.endpoint.api_key}"
        return headers

    def models(self, timeout: float = 10.0) -> list[str]:
        """The model ids the server offers (``GET /v1/models``)."""
        conn = self._connection(timeout)
        try:
            conn.request("GET", self._path + "/models", headers=self._headers())
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise _error(resp.status, body)
            data = json.loads(body)
            return [str(m["id"]) for m in data.get("data", [])]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RemoteError(f"cannot list the models at {self.endpoint.base_url}: {exc}") from exc
        finally:
            conn.close()

    def chat(self, messages: list[dict[str, Any]], params: dict[str, Any], on_event: EventCallback) -> RemoteStream:
        """Start a streamed chat turn on a thread of its own; events go to ``on_event``."""
        body = {"model": self.endpoint.model, "messages": messages, "stream": True,
                "stream_options": {"include_usage": True}, **params}
        stream = RemoteStream(self, body, on_event)
        stream.start()
        return stream


class RemoteStream:
    """One streamed reply; ``cancel`` closes the connection (the server stops generating)."""

    def __init__(self, client: RemoteClient, body: dict[str, Any], on_event: EventCallback) -> None:
        self._client = client
        self._body = body
        self._emit = on_event
        self._conn: http.client.HTTPConnection | None = None
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name="remote-chat", daemon=True)
        self.done = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._cancelled.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):  # already closed: nothing to stop
                conn.sock.shutdown(socket.SHUT_RDWR)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        t0 = time.perf_counter()
        first: float | None = None
        usage: dict[str, Any] = {}
        reason = "stop"
        try:
            # NOTE: connect with a short timeout (a host that drops packets would otherwise hold
            # the reply — and Stop, which cannot interrupt a connect — for minutes), then read
            # with the long one (a big prompt on a busy server takes a while to start).
            self._conn = conn = self._client._connection(CONNECT_TIMEOUT_S)
            conn.connect()
            if conn.sock is not None:
                conn.sock.settimeout(self._client.timeout)
            if self._cancelled.is_set():  # cancelled while connecting
                raise OSError("cancelled")
            conn.request("POST", self._client._path + "/chat/completions", json.dumps(self._body),
                         self._client._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                raise _error(resp.status, resp.read())
            for chunk in _sse(resp):
                if self._cancelled.is_set():
                    break
                if "error" in chunk:
                    err = chunk["error"] or {}
                    raise RemoteError(str(err.get("message", err)), code=str(err.get("code") or "remote_error"))
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    reason = choice.get("finish_reason") or reason
                    for key, make in (("reasoning_content", ThinkingDelta), ("content", Token)):
                        text = delta.get(key)
                        if text:
                            first = first if first is not None else time.perf_counter()
                            self._emit(make(text))
        except (OSError, http.client.HTTPException, ValueError, RemoteError) as exc:
            if not self._cancelled.is_set():
                code = exc.code if isinstance(exc, RemoteError) else "remote_unreachable"
                self._emit(Error(_words(self._client.endpoint, exc), code))
                self.done.set()
                return
        finally:
            if self._conn is not None:
                self._conn.close()
        self._emit(Done(_stats(usage, reason, t0, first, self._cancelled.is_set())))
        self.done.set()


def _sse(resp: http.client.HTTPResponse) -> Any:
    """The JSON objects of a ``text/event-stream`` body, up to ``[DONE]``."""
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


def _stats(usage: dict[str, Any], reason: str, t0: float, first: float | None, cancelled: bool) -> Stats:
    end = time.perf_counter()
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return Stats(
        prompt_tokens=prompt,
        completion_tokens=int(usage.get("completion_tokens") or 0),
        prefill_ms=((first or end) - t0) * 1000,
        generation_ms=(end - first) * 1000 if first is not None else 0.0,
        ttft_ms=((first or end) - t0) * 1000,
        cache_hit_kind="cold",
        finish_reason="cancelled" if cancelled else ("length" if reason == "length" else "stop"),
        cancelled=cancelled,
        finish_key=None,
        committed_tokens=0,
        cache_delta=CacheDelta(read=cached),
    )


def _words(endpoint: RemoteEndpoint, exc: Exception) -> str:
    """A failed remote reply in plain words: what went wrong and what to do about it."""
    where = endpoint.base_url
    if isinstance(exc, RemoteError):
        if exc.status in (401, 403):
            return f"{where} refused the API key ({exc}). Check the key under Models → Library → Remote models."
        if exc.status == 404:
            return f"{where} does not offer the model {endpoint.model!r} ({exc})."
        return f"{where} answered with an error: {exc}"
    if isinstance(exc, (ConnectionError, socket.gaierror, TimeoutError)):
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return f"cannot reach {where} ({reason}). Is the server running? Press Retry when it is."
    return f"the connection to {where} failed ({type(exc).__name__}: {exc}). Press Retry to try again."


def _error(status: int, body: bytes) -> RemoteError:
    try:
        err = json.loads(body)["error"]
        return RemoteError(f"{err.get('message')} (HTTP {status})", status=status, code=str(err.get("code") or status))
    except (ValueError, KeyError, TypeError):
        return RemoteError(f"HTTP {status}: {body[:200]!r}", status=status)
