"""One engine request, consumed from the server's asyncio loop.

``Model.infer`` waits for the scheduler thread to admit the request, so it runs in a worker
thread; events come back through the stream's callback (on the scheduler thread) and are
handed to the loop with ``call_soon_threadsafe``. ``cancel`` is safe at any moment — before
admission finished, while streaming, or after the end — and reaches the scheduler at its
next tick boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from app.engine.events import Done, Error, Event

log = logging.getLogger(__name__)


class StreamHandle(Protocol):
    def cancel(self) -> None: ...


class InferModel(Protocol):
    def infer(self, tokens: Sequence[int], **params: Any) -> StreamHandle: ...


class EngineRun:
    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._stream: StreamHandle | None = None
        self._cancelled = False
        self.finished = False

    def _push(self, event: Event) -> None:
        """On the scheduler thread."""
        # A closed loop means the server stopped: nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    async def start(self, model: InferModel, tokens: Sequence[int], **params: Any) -> None:
        """Admit the request (raises its ``EngineError`` if the engine refuses it)."""
        self._stream = await asyncio.to_thread(model.infer, list(tokens), on_event=self._push, **params)
        if self._cancelled:
            self._stream.cancel()

    async def events(self) -> AsyncIterator[Event]:
        while True:
            event = await self._queue.get()
            if isinstance(event, Done | Error):
                self.finished = True
            yield event
            if self.finished:
                return

    def cancel(self) -> None:
        """Idempotent; a finished run is left alone. Callable from any thread."""
        if self.finished or self._cancelled:
            return
        self._cancelled = True
        stream = self._stream
        if stream is not None:
            stream.cancel()
