"""The HTTP client a Streamable-HTTP MCP server is reached with: the SDK's, with what it reads
bounded. No Qt.

A stdio server's output is bounded in a guard process (``app.tools.guard``); an HTTP server's
reply arrives in the app's own process, so it is bounded here, before the SDK reads it:

- a reply that is not a stream of server-sent events (a JSON reply) is read up to
  ``MAX_REPLY_BYTES``; past that the read fails with ``ReplyTooLarge`` and the call fails with
  it. Unbounded, a server that never ended its reply grew the app by ~400 MB a second until the
  call's timeout, and the SDK parses a whole reply at once (holding the GIL, so the GUI thread
  waits for it). 1 MiB is the SDK's own limit for one server-sent event, the way an SDK server
  answers by default; a text that long is cut to ``GUARD_CHARS`` afterwards anyway;
- an event stream is left to the SDK's limit per event (its events are read one at a time);
- replies are asked for and read uncompressed (``Accept-Encoding: identity``; a
  ``Content-Encoding`` is not decoded), so a small compressed reply cannot expand past the bound.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx2

MAX_REPLY_BYTES = 1 << 20


class ReplyTooLarge(httpx2.StreamError, httpx2.SSEError):
    """A reply longer than the app reads. Both kinds the SDK turns into an error for the
    request the reply answered (a JSON reply's ``StreamError``, an event stream's ``SSEError``)."""

    def __init__(self, limit: int) -> None:
        httpx2.StreamError.__init__(self, f"the server's reply was over {limit:,} bytes, the most the app reads")
        self.limit = limit


class _Bounded(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, on_over: Callable[[], None]) -> None:
        self._inner = inner
        self._limit = limit
        self._on_over = on_over

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                self._on_over()
                raise ReplyTooLarge(self._limit)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """``inner`` with each reply that is not an event stream cut off at ``limit`` bytes
    (``on_over`` is called then), and no reply decompressed."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int, on_over: Callable[[], None]) -> None:
        self._inner = inner
        self._limit = limit
        self._on_over = on_over

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-encoding"]
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            stream = _Bounded(stream, self._limit, self._on_over)
        return httpx2.Response(response.status_code, headers=headers, stream=stream,
                               extensions=response.extensions)  # fmt: skip

    async def aclose(self) -> None:
        await self._inner.aclose()


def client(on_over: Callable[[], None], limit: int = MAX_REPLY_BYTES) -> httpx2.AsyncClient:
    """The SDK's client (its timeouts; redirects left to the SDK) with replies bounded; never
    through a proxy (only URLs on this machine are accepted, and a proxy's transport is unbounded)."""
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    transport = BoundedTransport(httpx2.AsyncHTTPTransport(), limit, on_over)
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    return httpx2.AsyncClient(timeout=timeout, transport=transport, trust_env=False)  # local: no proxy
