"""The background writer: a bounded queue drained by one thread, so saves never block.

``submit`` never waits: when the queue is full it returns False and the caller counts the
save as dropped. Each job is handed to the store's handler on the writer thread; a handler
exception is reported through ``on_error`` (or logged with its traceback when there is no
handler) and never reaches the submitter.

Beyond the seed: a job may wait before it runs (``gate``, called with the job's submission
time): the store holds writes back while a request waits for its first token, so the file
writes do not take a core from that prefill (see ``CacheStore.hold_writes``). ``flush`` and
``close`` hurry: jobs run at once while they wait.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar, cast

log = logging.getLogger(__name__)

J = TypeVar("J")
_STOP = object()


class Writer(Generic[J]):
    def __init__(
        self,
        handle: Callable[[J], None],
        *,
        maxsize: int = 32,
        on_error: Callable[[J, BaseException], None] | None = None,
        name: str = "hearth-cache-writer",
        gate: Callable[[float, Callable[[], bool]], None] | None = None,
    ) -> None:
        """``gate(submitted_at, hurry)``: called on the writer thread before each job (with
        its ``time.monotonic()`` submission time); it returns when the job may run, and
        should return at once while ``hurry()`` is true."""
        if maxsize < 1:
            raise ValueError("writer queue size must be >= 1")
        self._handle = handle
        self._on_error = on_error
        self._gate = gate
        self._hurry = 0  # flushes waiting: gated jobs run at once
        self._queue: queue.Queue[object] = queue.Queue(maxsize)
        self._idle = threading.Condition()
        self._pending = 0  # submitted and not yet handled
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def num_pending(self) -> int:
        with self._idle:
            return self._pending

    def submit(self, job: J) -> bool:
        """Queue a job; False (and nothing queued) when the queue is full or closed."""
        with self._idle:
            if self._closed:
                return False
            try:
                self._queue.put_nowait((job, time.monotonic()))
            except queue.Full:
                return False
            self._pending += 1
            return True

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every submitted job has been handled; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            self._hurry += 1
            try:
                while self._pending:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._idle.wait(remaining)
                return True
            finally:
                self._hurry -= 1

    def hurrying(self) -> bool:
        """A flush (or close) is waiting for the queue to drain."""
        return self._hurry > 0

    def close(self, timeout: float = 10.0) -> None:
        """Drain (up to ``timeout``) and stop the thread. Idempotent."""
        with self._idle:
            if self._closed:
                return
            self._closed = True
        if not self.flush(timeout):
            log.warning("cache writer closed with %d saves still pending", self.num_pending)
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            log.error("cache writer is stuck; leaving its thread behind")
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            job, submitted_at = cast("tuple[J, float]", item)
            try:
                if self._gate is not None:
                    try:
                        self._gate(submitted_at, self.hurrying)
                    except Exception:  # a gate that fails only stops holding the job back
                        log.exception("cache writer gate failed")
                self._handle(job)
            except Exception as exc:  # a writer thread must not die
                if self._on_error is None:
                    log.exception("cache writer job failed")
                else:  # the handler tells the environment's failures from bugs, and logs
                    try:
                        self._on_error(job, exc)
                    except Exception:
                        log.exception("cache writer error handler failed")
            finally:
                # NOTE: not held while waiting for the next job: a save's payload may be
                # memory the next save or restore reuses once nothing reads it (StateMemory)
                del item, job
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()
