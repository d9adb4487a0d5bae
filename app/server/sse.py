"""Server-sent events, and noticing that the client went away.

``EventStreamResponse`` is a small ASGI response that sends each chunk as it comes and, at
the same time, listens for ``http.disconnect``: the moment the client hangs up, the engine
request is cancelled (it stops at the scheduler's next tick and frees its seq) instead of
generating into a closed socket until the reply would have ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)


def sse(data: dict[str, Any] | str) -> str:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n"


async def wait_for_disconnect(receive: Receive) -> None:
    """Returns once the client has disconnected (the request body must be read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


@contextlib.asynccontextmanager
async def on_disconnect(receive: Receive, callback: Callable[[], None]) -> AsyncIterator[None]:
    """Call ``callback`` if the client disconnects while the block runs."""

    async def watch() -> None:
        await wait_for_disconnect(receive)
        callback()

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class EventStreamResponse(Response):
    media_type = "text/event-stream"

    def __init__(self, chunks: AsyncIterator[str], disconnected: Callable[[], None], *,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status_code=200)
        self.chunks = chunks
        self.disconnected = disconnected
        self.extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({
            "type": "http.response.start", "status": 200,
            "headers": [(b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"), *self.extra],
        })  # fmt: skip
        complete = False
        try:
            async with on_disconnect(receive, self.disconnected):
                async for text in self.chunks:
                    await send({"type": "http.response.body", "body": text.encode(), "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                complete = True
        except OSError:  # uvicorn raises ClientDisconnected (an OSError) on a send after hang-up
            pass
        finally:
            if not complete:  # hang-up, or this task was cancelled: never leave it generating
                self.disconnected()
            aclose = getattr(self.chunks, "aclose", None)
            if aclose is not None:
                await aclose()
